#pragma once

// Automatic mixed precision, after PyTorch's autocast. Inside an
// AutocastGuard, ops cast their floating inputs by a per-op policy before
// running: matrix products, linear and attention in the guard's 16-bit dtype;
// reductions, normalizations, softmax and precision-hungry pointwise ops in
// float32; ops combining several inputs (cat, where...) in the widest floating
// dtype among them. See Note [Autocast] in runtime/ops/autocast.cpp.
//
//   kiln::AutocastGuard amp(kiln::kBFloat16);
//   kiln::Tensor y = kiln::linear(x, w);  // x, w float32 -> y bfloat16

#include <cstdint>
#include <optional>
#include <string_view>

#include "kiln/api.h"
#include "kiln/dtype.h"

namespace kiln {

// RAII: enables autocast to `dtype` (float16 or bfloat16) on this thread for
// its lifetime, or with `enabled` false disables it inside an enclosing guard.
// Guards nest; each restores the previous state when destroyed.
class KILN_API AutocastGuard {
 public:
  explicit AutocastGuard(DType dtype, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  uint64_t saved_included_;
  std::optional<DType> saved_dtype_;
};

// The dtype lower-precision ops run in on this thread; nullopt when autocast is off.
KILN_API std::optional<DType> autocast_dtype();

// How autocast treats an op's floating tensor arguments (in-place and out=
// forms should keep no policy: their result dtype is the caller's).
enum class AutocastPolicy : uint8_t {
  LowerPrecision,  // float32 and the other 16-bit dtype -> the autocast dtype; float64 kept
  Float32,         // float16 / bfloat16 -> float32, unless the call passes dtype=
  Promote,         // every floating tensor -> the widest floating dtype among them
};

// Gives op `name` (e.g. "myns::attention") an Autocast kernel with `policy`;
// built-in ops have theirs. Call once, e.g. from a KILN_LIBRARY_IMPL block.
KILN_API void set_autocast_policy(std::string_view name, AutocastPolicy policy);

}  // namespace kiln
