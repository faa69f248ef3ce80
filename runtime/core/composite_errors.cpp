#include "runtime/core/composite_errors.h"

namespace kiln {
namespace detail {

const RenameFrame*& innermost_rename() {
  thread_local const RenameFrame* top = nullptr;
  return top;
}

std::string apply_renames(std::string what, const RenameFrame* frame) {
  for (; frame; frame = frame->outer) {
    const std::string_view inner = frame->inner;
    if (what.size() > inner.size() + 1 && what[0] == '[' &&
        std::string_view(what).substr(1, inner.size()) == inner && what[inner.size() + 1] == ']') {
      what.replace(1, inner.size(), frame->op);
    }
  }
  return what;
}

void rethrow_renamed(const RenameFrame* frame) {
  try {
    throw;
  } catch (const Error& e) {
    std::string what = apply_renames(e.what(), frame);
    if (what == e.what()) throw;
    throw Error(std::move(what));
  }
}

}  // namespace detail

ErrorRenames open_renames() {
  ErrorRenames out;
  for (const detail::RenameFrame* f = detail::innermost_rename(); f; f = f->outer) {
    out.push_back({std::string(f->op), std::string(f->inner)});
  }
  return {out.rbegin(), out.rend()};
}

std::string renamed_by_open_scopes(std::string what) {
  return detail::apply_renames(std::move(what), detail::innermost_rename());
}

RenameScopes::RenameScopes(const ErrorRenames& renames) : saved_(detail::innermost_rename()) {
  frames_.reserve(renames.size());
  const detail::RenameFrame* outer = nullptr;
  for (const ErrorRename& r : renames) {
    frames_.push_back({r.op, r.inner, outer});
    outer = &frames_.back();
  }
  detail::innermost_rename() = outer;
}

RenameScopes::~RenameScopes() {
  detail::innermost_rename() = saved_;
}

}  // namespace kiln
