#include "jit/plan/executor.h"

#include "kiln/ops.h"

namespace kiln::jit {
namespace {

// Binds an eager result to the lazy tensor recorded for it: takes the
// result's memory when the geometry matches and nothing else shares it, else
// copies into memory of the lazy tensor's own geometry.
void bind_output(const Tensor& lazy, const Tensor& result) {
  if (lazy.is_same(result)) return;  // an in-place op returned its argument
  StorageImpl* dst = lazy.impl()->storage().get();
  StorageImpl* src = result.impl()->storage().get();
  if (dst == src) return;
  bool same_geometry = lazy.sizes() == result.sizes() && lazy.strides() == result.strides() &&
                       lazy.storage_offset() == result.storage_offset() &&
                       lazy.dtype() == result.dtype();
  if (same_geometry && src && src->use_count() == 1 && src->nbytes() >= dst->nbytes() &&
      dst->data() == nullptr) {
    dst->adopt_data(*src);
    return;
  }
  if (dst->data() == nullptr && dst->nbytes() > 0) {
    auto fresh = StorageImpl::allocate(dst->nbytes(), dst->device());
    dst->adopt_data(*fresh);
  }
  Tensor target = lazy;
  copy_(target, result);
}

}  // namespace

void execute_node(const Node& node) {
  ExcludeKeyGuard no_lazy(DispatchKey::Lazy);
  // Errors name the op the user called (Note [Composite ops name themselves]).
  Stack out = RenameScopes::run(node.renames, [&] { return call_normalized(*node.op, node.args); });
  std::vector<Tensor> results;
  for (IValue& v : out) {
    if (v.is_tensor()) {
      results.push_back(v.to_tensor());
    } else if (v.is_tensor_list()) {
      for (const Tensor& t : v.to_tensor_list()) results.push_back(t);
    }
  }
  KILN_INTERNAL_ASSERT(results.size() == node.outputs.size(), node.op->name(), " returned ",
                       results.size(), " tensors, its trace node expected ", node.outputs.size());
  for (size_t i = 0; i < results.size(); ++i) bind_output(node.outputs[i], results[i]);
}

void execute_node_into(const Node& node, const OperatorEntry& out_op) {
  const Tensor& lazy = node.outputs[0];
  KILN_INTERNAL_ASSERT(lazy.impl()->storage()->data() != nullptr, node.op->name(),
                       ": its output has no memory to write into");
  // An alias of the output: other nodes hold the lazy handle itself.
  Tensor out(IntrusivePtr<TensorImpl>::make(lazy.impl()->storage(), lazy.dtype(), lazy.device(),
                                            lazy.sizes(), lazy.strides(), lazy.storage_offset()));
  Stack args = node.args;
  args.emplace_back(out);
  try {
    ExcludeKeyGuard no_lazy(DispatchKey::Lazy);
    RenameScopes scopes(
        node.renames);  // a device check's message (Note [Composite ops name themselves])
    call_normalized(out_op, std::move(args));
  } catch (const Error&) {
    // Errors name the op the user called (index_select, not index_select.out):
    // run that one, which raises its own message (or, should it pass, is copied in).
    execute_node(node);
    return;
  }
  KILN_INTERNAL_ASSERT(out.impl()->storage().get() == lazy.impl()->storage().get() &&
                           out.sizes() == lazy.sizes() && out.strides() == lazy.strides() &&
                           out.storage_offset() == lazy.storage_offset(),
                       out_op.name(), " moved or restrided an output of the right size");
}

}  // namespace kiln::jit
