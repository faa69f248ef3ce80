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
// out of range on a device, read back after the kernel). A value check that
// runs later, when a lazy trace or a compiled function's plan runs, still
// names the inner op: the trace records the inner op, not the composite.

#include <string>
#include <string_view>
#include <utility>

#include "kiln/error.h"

namespace kiln {

// Rethrows the kiln::Error being handled with a leading "[inner]" replaced
// by "[op]"; any other error as it is. Call it only from a catch block.
[[noreturn]] inline void rethrow_renamed(const char* op, std::string_view inner) {
  try {
    throw;
  } catch (const Error& e) {
    const std::string_view what = e.what();
    if (what.size() > inner.size() + 1 && what[0] == '[' && what.substr(1, inner.size()) == inner &&
        what[inner.size() + 1] == ']') {
      throw Error("[" + std::string(op) + "]" + std::string(what.substr(inner.size() + 2)));
    }
    throw;
  }
}

// fn() (a call of the op `inner`), its errors naming `inner` renamed to `op`.
template <class Fn>
decltype(auto) rename_errors(const char* op, std::string_view inner, Fn&& fn) {
  try {
    return std::forward<Fn>(fn)();
  } catch (const Error&) {
    rethrow_renamed(op, inner);
  }
}

}  // namespace kiln
