#include "tests/oracle/oracle_modes.h"

namespace kiln::oracle {

Mode parse_mode(const std::string& s) {
  if (s == "eager") return Mode::Eager;
  if (s == "lazy") return Mode::Lazy;
  throw Error("[oracle] expected mode eager or lazy, got '" + s + "'");
}

const char* mode_name(Mode m) { return m == Mode::Eager ? "eager" : "lazy"; }

Stack call(Mode mode, const std::string& op, const Stack& args,
           const std::vector<std::pair<std::string, IValue>>& kwargs) {
  KILN_CHECK(mode == Mode::Eager, "[oracle] lazy mode needs the jit, which this build lacks");
  return call_op(op, args, kwargs);
}

}  // namespace kiln::oracle
