#include "tests/oracle/oracle_modes.h"

namespace kiln::oracle {

Mode parse_mode(const std::string& s) {
  if (s == "eager") return Mode::Eager;
  if (s == "lazy") return Mode::Lazy;
  throw Error("[oracle] expected mode eager or lazy, got '" + s + "'");
}

const char* mode_name(Mode m) {
  return m == Mode::Eager ? "eager" : "lazy";
}

Stack call(Mode mode, const std::string& op, const Stack& args,
           const std::vector<std::pair<std::string, IValue>>& kwargs) {
  if (mode == Mode::Eager) {
    EagerGuard eager;
    return call_op(op, args, kwargs);
  }
  // Lazy: record, then run the trace here so errors the kernels raise at run
  // time count as the call's errors.
  KILN_CHECK(jit::is_lazy(), "[oracle] lazy mode requested but recording is off (KILN_EAGER?)");
  Stack out = call_op(op, args, kwargs);
  jit::flush();
  return out;
}

}  // namespace kiln::oracle
