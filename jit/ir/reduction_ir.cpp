#include "jit/ir/reduction_ir.h"

#include <cstring>
#include <sstream>

namespace kiln::jit {

const char* row_op_name(RowOp op) {
  static const char* const names[] = {"sum",     "mean",        "max",        "min",     "var",
                                      "softmax", "log_softmax", "layer_norm", "rms_norm"};
  return names[static_cast<int>(op)];
}

uint64_t ReductionKernel::hash() const {
  uint64_t h = prologue.hash() * 31 + epilogue.hash();
  uint64_t eps_bits;
  std::memcpy(&eps_bits, &eps, sizeof eps_bits);
  for (uint64_t v : {static_cast<uint64_t>(op), static_cast<uint64_t>(correction), eps_bits,
                     static_cast<uint64_t>(sqrt_result)}) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  }
  return h;
}

std::string ReductionKernel::str() const {
  std::ostringstream os;
  os << "reduce " << row_op_name(op);
  if (op == RowOp::Var) os << " correction=" << correction << (sqrt_result ? " sqrt" : "");
  if (op == RowOp::LayerNorm || op == RowOp::RmsNorm) os << " eps=" << eps;
  os << "\nprologue: " << prologue.str() << "epilogue: " << epilogue.str();
  return os.str();
}

}  // namespace kiln::jit
