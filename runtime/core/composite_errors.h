#pragma once

// Note [Composite ops name themselves]
// An op built on other ops (index_add on scatter_add, one_hot on scatter,
// index_put on index_select and index_copy_ or index_add_, pad on
// constant_pad_nd and the mode kernels, max(a, b) on maximum, stack on cat)
// raised the inner op's errors, naming an op the caller never called. A
// composite checks what it can first, under its own name: its arguments,
// and index values where they are on the host (a CPU tensor that is not
// pending, so reading it runs nothing: cpu::host_indices). Where the inner
// op's checks are the composite's own, it calls the inner op through
// rename_errors(op, inner, ...), which gives an error naming `inner` the
// composite's name. That covers every check raised at the call: argument
// checks (the Meta kernel's, in every mode) and eager value checks (an index
// out of range on a device, read back after the kernel).
// A value check that runs later, when a lazy trace or a compiled function's
// plan runs, is the recorded inner op's: so the scopes rename_errors opens
// are kept on this thread (open_renames()), a recorded node keeps those open
// at its call (Node::renames), and the step that runs it opens them again
// (RenameScopes): its errors are renamed as they leave it, and a device
// check's message is renamed when its kernel is launched (DeviceErrorFlag),
// so a check raised after the run, or by a graph replay, names the composite
// too. Renames apply innermost first: index_put's index_add_ raises
// scatter_add_'s error as index_add_'s, then as index_put's. A compiled
// function's plan runs copies of the traced nodes (jit/compile/instance.cpp),
// which keep Node::renames.

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/error.h"

namespace kiln {

// One rename_errors scope: an error whose message starts "[inner]" starts "[op]".
struct ErrorRename {
  std::string op;
  std::string inner;
};
// Scopes, outermost first.
using ErrorRenames = std::vector<ErrorRename>;

namespace detail {

// A scope open on this thread (on the stack of whoever opened it).
struct RenameFrame {
  std::string_view op;
  std::string_view inner;
  const RenameFrame* outer;
};

// The innermost scope open on this thread, or null.
const RenameFrame*& innermost_rename();

// `what` with the scopes from `frame` outwards applied, innermost first.
std::string apply_renames(std::string what, const RenameFrame* frame);

// Rethrows the kiln::Error being handled renamed by the scopes from `frame`
// outwards; any other error as it is. Call it only from a catch block.
[[noreturn]] void rethrow_renamed(const RenameFrame* frame);

}  // namespace detail

// The scopes open on this thread, outermost first (empty nearly always).
ErrorRenames open_renames();

// `what` renamed by the scopes open on this thread.
std::string renamed_by_open_scopes(std::string what);

// While alive, the scopes open on this thread are exactly `renames` (a
// trace's step runs under those of its op's call, none of its caller's);
// `renames` must outlive it.
class RenameScopes {
 public:
  explicit RenameScopes(const ErrorRenames& renames);
  ~RenameScopes();
  RenameScopes(const RenameScopes&) = delete;
  RenameScopes& operator=(const RenameScopes&) = delete;

  // fn() under `renames`, its kiln::Errors renamed by them.
  template <class Fn>
  static decltype(auto) run(const ErrorRenames& renames, Fn&& fn) {
    if (renames.empty() && !detail::innermost_rename()) return std::forward<Fn>(fn)();
    RenameScopes scopes(renames);
    try {
      return std::forward<Fn>(fn)();
    } catch (const Error&) {
      detail::rethrow_renamed(detail::innermost_rename());
    }
  }

 private:
  const detail::RenameFrame* saved_;
  std::vector<detail::RenameFrame> frames_;
};

// Rethrows the kiln::Error being handled with a leading "[inner]" replaced
// by "[op]"; any other error as it is. Call it only from a catch block.
[[noreturn]] inline void rethrow_renamed(const char* op, std::string_view inner) {
  const detail::RenameFrame frame{op, inner, nullptr};
  detail::rethrow_renamed(&frame);
}

// fn() (a call of the op `inner`), its errors naming `inner` renamed to `op`;
// what fn() records lazily keeps the rename for when it runs.
template <class Fn>
decltype(auto) rename_errors(const char* op, std::string_view inner, Fn&& fn) {
  const detail::RenameFrame*& top = detail::innermost_rename();
  const detail::RenameFrame frame{op, inner, top};
  struct Pop {
    const detail::RenameFrame*& top;
    const detail::RenameFrame* saved;
    ~Pop() { top = saved; }
  } pop{top, frame.outer};
  top = &frame;
  try {
    return std::forward<Fn>(fn)();
  } catch (const Error&) {
    rethrow_renamed(op, inner);
  }
}

}  // namespace kiln
