// The Lazy dispatch key: a boxed fallback that records every op into the
// thread's trace (Note [Lazy trace]), with output geometry from the op's Meta
// kernel (the common pointwise ops have typed kernels that skip it: Note
// [Typed lazy recording]). Also the hooks runtime/ calls to materialize,
// EagerGuard, KILN_EAGER.

#include "jit/record/lazy_kernel.h"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <typeinfo>
#include <unordered_map>
#include <utility>
#include <vector>

#include "jit/plan/pipeline.h"
#include "jit/record/decompose.h"
#include "jit/record/trace_buffer.h"
#include "kiln/jit.h"
#include "kiln/logging.h"
#include "runtime/core/env.h"
#include "runtime/core/hooks.h"
#include "runtime/core/tensor_utils.h"

namespace kiln {

namespace {

// Note [Entering eager mode]
// An op run eagerly takes effect at once, while what the thread recorded
// before runs later: an eager in-place write inside an EagerGuard would be
// seen by a recorded read that came before it (y = x * 2; then, eagerly,
// x.add_(1): y must not see the new x). So entering a guard from lazy mode
// first runs the thread's trace (a graph break when jit::compile traces).
// Writes from other threads, or by the host through data_ptr(), to a tensor
// that a recorded op reads are Note [Pending state across threads]'s
// uncovered case.
DispatchKey run_recorded_first() {
  if (jit::is_lazy()) {
    jit::TraceBuffer::current().flush({"an EagerGuard was entered", nullptr, nullptr, true});
  }
  return DispatchKey::Lazy;
}

}  // namespace

EagerGuard::EagerGuard() : guard_(run_recorded_first()) {}
EagerGuard::~EagerGuard() = default;

namespace jit {
namespace {

constexpr int kMetaKey = static_cast<int>(DispatchKey::Meta);

// Where an op's fresh outputs live: its device argument when it has one
// (factories, _to_copy), else CUDA if any tensor argument is there, else CPU.
Device output_device(const Stack& stack) {
  for (const IValue& v : stack) {
    if (v.is_device()) return v.to_device();
  }
  for (const IValue& v : stack) {
    if (v.is_tensor() && v.to_tensor().defined() && v.to_tensor().is_cuda()) {
      return v.to_tensor().device();
    }
    if (v.is_tensor_list()) {
      for (const Tensor& t : v.to_tensor_list()) {
        if (t.defined() && t.is_cuda()) return t.device();
      }
    }
  }
  return Device::cpu();
}

void run_eagerly(const OperatorEntry& op, Stack& stack, const char* why) {
  count_eager_fallback();
  KILN_LOG(Perf, op.name(), " in lazy mode ", why);
  TraceBuffer::current().flush({why, nullptr, &op, true});
  ExcludeKeyGuard no_lazy(DispatchKey::Lazy);
  stack = call_normalized(op, std::move(stack));
}

// A lazy output with `meta`'s geometry.
Tensor fresh_output_like(const Tensor& meta, Device device) {
  return fresh_output(meta.sizes(), meta.strides(), meta.storage_offset(), meta.dtype(), device);
}

// Whether `pred` holds for a defined tensor of `stack` (lists included).
template <class Pred>
bool any_tensor(const Stack& stack, Pred pred) {
  for (const IValue& v : stack) {
    if (v.is_tensor() && v.to_tensor().defined() && pred(v.to_tensor())) return true;
    if (v.is_tensor_list()) {
      for (const Tensor& t : v.to_tensor_list()) {
        if (t.defined() && pred(t)) return true;
      }
    }
  }
  return false;
}

bool has_meta_tensor(const Stack& stack) {
  return any_tensor(stack, [](const Tensor& t) { return t.is_meta(); });
}

// Whether a tensor of `stack` is on a storage that wraps memory another
// storage wraps too (Note [Memory wrapped twice] in runtime/core/tensor_impl.cpp).
bool touches_shared_memory(const Stack& stack) {
  if (KILN_LIKELY(!StorageImpl::any_shares_memory())) return false;
  return any_tensor(stack, [](const Tensor& t) {
    return t.impl()->has_storage() && t.impl()->storage()->shares_memory();
  });
}

// Whether argument `i` shares storage with another tensor argument.
bool shares_storage(const Stack& stack, size_t i) {
  const StorageImpl* mine = stack[i].to_tensor().impl()->storage().get();
  for (size_t j = 0; j < stack.size(); ++j) {
    if (j == i || !stack[j].is_tensor() || !stack[j].to_tensor().defined()) continue;
    if (stack[j].to_tensor().impl()->storage().get() == mine) return true;
  }
  return false;
}

// `out` given `meta`'s geometry, as resize_ does: its storage kept when
// large enough (views of it see the write), else a grown one that starts with
// the old bytes (elements the op does not write keep them). Recorded nodes may
// hold `out` with its current geometry (as their output or an input): they
// run first, so the resize happens between them and the op, as in eager mode.
void resize_like(const OperatorEntry& op, const Tensor& out, const Tensor& meta) {
  TraceBuffer::current().flush({"resized its out= argument", nullptr, &op});
  const int64_t extent =
      checked_extent(meta.sizes(), meta.strides(), meta.storage_offset(), meta.dtype(), "resize");
  const size_t needed = static_cast<size_t>(extent) * itemsize(meta.dtype());
  grow_storage(out, needed);
  out.impl()->set_geometry(meta.sizes(), meta.strides(), meta.storage_offset());
}

}  // namespace

Tensor fresh_output(IntArrayRef sizes, IntArrayRef strides, int64_t storage_offset, DType dtype,
                    Device device) {
  const int64_t extent = checked_extent(sizes, strides, storage_offset, dtype, "lazy");
  auto storage = IntrusivePtr<StorageImpl>::make(
      nullptr, static_cast<size_t>(extent) * itemsize(dtype), device, nullptr, nullptr);
  return Tensor(IntrusivePtr<TensorImpl>::make(std::move(storage), dtype, device, sizes, strides,
                                               storage_offset));
}

namespace {

// Note [Overlaps raised at the call]
// The eager kernel of a pointwise op (its TensorIter) refuses an output that
// partly overlaps one of its inputs (a[1:].add_(a[:-1])): the result would
// depend on the order of the elements. The Meta kernel cannot see it (meta
// twins share no storage), so lazy mode recorded the op, which then failed
// when the trace ran and left its whole target carrying the error. The same
// check now runs at the call on the real tensors (their storages and
// offsets, no data needed) for the ops that fuse as pointwise kernels, whose
// eager kernels all make it, and for copy_ (cpu::check_copy; PyTorch's copy_
// refuses y[1:].copy_(y[:-1]) too); the message is the eager kernel's. Where
// the views are strided and their byte ranges meet (too irregular to tell, and
// let through by the eager kernel as by PyTorch's), the op runs eagerly at
// the call: a fused kernel would read and write in another order (a
// transposed alias subtracted in place gave other values lazily).
// The other ops that write an argument (index_copy_, scatter_, cat.out,
// index_select.out, ...) make their own checks in their eager kernels
// (whole overlaps refused, not only partial ones, each op its own way), and
// their Meta kernels cannot make them either. Rather than repeat each op's
// rule here, such an op whose written argument shares memory with another of
// its tensors (the same tensor again, or byte ranges that meet) runs eagerly
// at the call: its eager kernel raises there, before writing anything, or
// computes what eager mode computes. Writes into memory no other argument
// touches (a KV cache's index_copy_ from a fresh row) stay recorded.
// masked_fill_'s and fill_'s 0-dim `value` is read as a number before
// anything is written (and what is written there is that value), so it is
// not an input that could overlap. A written argument that may overlap
// itself (may_overlap_itself) runs eagerly at the call too, whatever the op.
// The elements' byte range [lo, hi) in the storage (strides non-negative).
std::pair<int64_t, int64_t> byte_extent(const Tensor& t) {
  int64_t last = t.storage_offset();
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  const auto es = static_cast<int64_t>(t.element_size());
  return {t.storage_offset() * es, (last + 1) * es};
}

// Raises where a written argument partly overlaps an input, both dense;
// true where they share memory in a way too irregular to tell (strided
// views whose byte ranges meet): the eager kernel then runs the op in its
// own element order, which a fused kernel would not keep, so the op runs
// eagerly at the call (PyTorch lets such calls through as well).
// Whether `a` and `b` (both defined) may read or write a common byte: the
// same tensor, or byte ranges of one storage that meet.
bool may_share_bytes(const Tensor& a, const Tensor& b) {
  if (a.impl() == b.impl()) return true;
  if (a.numel() == 0 || b.numel() == 0 || !a.impl()->has_storage() || !b.impl()->has_storage() ||
      a.impl()->storage().get() != b.impl()->storage().get()) {
    return false;
  }
  const auto [a0, a1] = byte_extent(a);
  const auto [b0, b1] = byte_extent(b);
  return a0 < b1 && b0 < a1;
}

// For an op that is neither pointwise nor copy_: whether a written argument
// may share memory with another tensor argument (Note [Overlaps raised at the
// call]).
bool written_shares_memory(const Node& node) {
  for (int w : node.written) {
    const Tensor& out = node.args[static_cast<size_t>(w)].to_tensor();
    if (!out.defined()) continue;
    for (size_t i = 0; i < node.args.size(); ++i) {
      if (static_cast<int>(i) == w) continue;
      const IValue& v = node.args[i];
      if (v.is_tensor() && v.to_tensor().defined() && may_share_bytes(out, v.to_tensor())) {
        return true;
      }
      if (v.is_tensor_list()) {
        for (const Tensor& t : v.to_tensor_list()) {
          if (t.defined() && may_share_bytes(out, t)) return true;
        }
      }
    }
  }
  return false;
}

bool check_written_overlaps(const OperatorEntry& op, const Node& node) {
  // A CPU view written whose elements may share addresses (an unfold whose
  // windows meet): what a later read of it sees depends on the order of the
  // writes, which only the eager kernel defines (a fused kernel, and the
  // passes that forward a written value to its readers, would give each
  // element its own value). On CUDA no kernel orders such writes, PyTorch's
  // included, and most ops have no eager kernel to run them: they stay
  // recorded.
  for (int w : node.written) {
    const Tensor& out = node.args[static_cast<size_t>(w)].to_tensor();
    if (out.defined() && out.device().is_cpu() && out.numel() > 1 &&
        may_overlap_itself(out.sizes(), out.strides())) {
      return true;
    }
  }
  // copy_ makes the same check (cpu::check_copy); its self is only written,
  // like an out= argument, so src is its input 0.
  static const OperatorEntry* const copy = &find_op("copy_").entry();
  const bool is_copy = &op == copy;
  if (!is_copy && !is_pointwise_op(&op)) return written_shares_memory(node);
  const auto& params = op.schema().arguments;
  bool unordered = false;
  for (int w : node.written) {
    const Tensor& out = node.args[static_cast<size_t>(w)].to_tensor();
    if (!out.defined() || out.numel() == 0 || !out.impl()->has_storage()) continue;
    int input = 0;  // the eager kernel's numbering: tensor inputs, out= arguments left out
    for (size_t i = 0; i < node.args.size(); ++i) {
      const IValue& v = node.args[i];
      if (!v.is_tensor() || !v.to_tensor().defined()) continue;
      const bool out_param =
          static_cast<int>(i) == w && ((i < params.size() && params[i].name == "out") || is_copy);
      if (out_param) continue;
      const Tensor& in = v.to_tensor();
      const int k = input++;
      if (in.dim() == 0 && i < params.size() && params[i].name == "value") continue;
      if (in.impl() == out.impl() || in.numel() == 0 || !in.impl()->has_storage() ||
          in.impl()->storage().get() != out.impl()->storage().get()) {
        continue;
      }
      const auto [a0, a1] = byte_extent(out);
      const auto [b0, b1] = byte_extent(in);
      const bool same_view = a0 == b0 && out.sizes() == in.sizes() && out.strides() == in.strides();
      if (same_view || !(a0 < b1 && b0 < a1)) continue;
      if (!non_overlapping_and_dense(in) || !non_overlapping_and_dense(out)) {
        unordered = true;
        continue;
      }
      // The eager kernel's name for the op: "add_", not "add_.Tensor".
      const std::string& name = op.name();
      KILN_FAIL("[", name.substr(0, name.find('.')),
                "] expected an output that is an input or shares no memory with it, got one "
                "that partly overlaps input ",
                k, "; clone() it first");
    }
  }
  return unordered;
}

// Note [One device per CUDA op]
// A CUDA op without a kernel of its own (Note [Eager CUDA ops]) reads its
// tensors on its device, except 0-dim CPU tensors, which PyTorch takes as
// scalars: a wrapped number (x + 2.0) becomes a constant of the kernel, and
// any other 0-dim CPU tensor is copied to the device here, at the call (its
// value may change between calls, so it is read when the op runs, not baked
// in). A meta tensor, a CPU tensor of one or more dims, a tensor on another
// GPU, or a written argument (out=, an in-place self) off the device raises,
// naming both devices. Such calls used to come back to the CUDA fallback and
// fail as ops without a CUDA kernel, and a 0-dim CPU operand failed the same
// way.
constexpr int kCudaKey = static_cast<int>(DispatchKey::CUDA);

void cuda_fallback(const OperatorEntry& op, Stack& stack);

void onto_device(const OperatorEntry& op, Tensor& t, bool written, Device cuda) {
  if (!t.defined() || t.device() == cuda) return;
  const bool scalar = t.device().is_cpu() && t.dim() == 0 && !written;
  KILN_CHECK(scalar, "[", op.name(), "] expected all tensors on one device, got ", t.device(),
             " and ", cuda, " (", written ? "a written argument" : "an input", " of ", t.sizes(),
             ")");
  if (!t.impl()->is_wrapped_number()) t = t.to(cuda);
}

void onto_one_cuda_device(const OperatorEntry& op, Stack& stack) {
  Device cuda = Device::cpu();
  for (const IValue& v : stack) {
    if (v.is_device()) return;  // a factory or a copy: its device is its argument
    if (v.is_tensor() && v.to_tensor().defined() && v.to_tensor().is_cuda() && cuda.is_cpu()) {
      cuda = v.to_tensor().device();
    }
    if (v.is_tensor_list()) {
      for (const Tensor& t : v.to_tensor_list()) {
        if (t.defined() && t.is_cuda() && cuda.is_cpu()) cuda = t.device();
      }
    }
  }
  if (!cuda.is_cuda()) return;
  const auto& params = op.schema().arguments;
  for (size_t i = 0; i < stack.size(); ++i) {
    const bool written = i < params.size() && params[i].is_write;
    if (stack[i].is_tensor()) {
      Tensor t = stack[i].to_tensor();
      const TensorImpl* before = t.impl();
      onto_device(op, t, written, cuda);
      if (t.impl() != before) stack[i] = IValue(std::move(t));
    } else if (stack[i].is_tensor_list()) {
      std::vector<Tensor> list = stack[i].to_tensor_list();
      bool moved = false;
      for (Tensor& t : list) {
        const TensorImpl* before = t.impl();
        onto_device(op, t, written, cuda);
        moved = moved || t.impl() != before;
      }
      if (moved) stack[i] = IValue(std::move(list));
    }
  }
}

// Whether `op` runs on CUDA through cuda_fallback (no CUDA kernel of its own).
bool cuda_by_fallback(const OperatorEntry& op) {
  return !op.unboxed(kCudaKey) && op.boxed(kCudaKey) == &cuda_fallback;
}

}  // namespace

// Note [Random ops run at the call]
// A random op reads the generator's state when it runs. Recorded lazily, it
// would read it at flush time, after any manual_seed() the program called in
// between; so in lazy mode random ops run at once, and their results are
// ordinary tensors. A compiled function's trace records them instead: its
// plan runs each call, and each run draws from the generator then, at its
// call, as eager mode would. (Run at once while tracing, a random op's result
// was a constant of the trace: every call returned the same numbers.)
namespace {

// Records `op` (or runs it at once where it cannot be deferred).
void record_op(const OperatorEntry& op, Stack& stack) {
  if (draws_random(op.schema()) && !TraceBuffer::current().observed()) {
    ExcludeKeyGuard no_lazy(DispatchKey::Lazy);
    stack = call_normalized(op, std::move(stack));
    return;
  }
  if (cuda_by_fallback(op)) onto_one_cuda_device(op, stack);
  if (touches_shared_memory(stack)) {
    run_eagerly(op, stack,
                "ran at once: a tensor of it wraps memory another from_blob tensor wraps too "
                "(Note [Memory wrapped twice])");
    return;
  }
  if (has_meta_tensor(stack)) {
    // Meta tensors have no values to defer: their shapes are computed now.
    ExcludeKeyGuard no_lazy(DispatchKey::Lazy);
    stack = call_normalized(op, std::move(stack));
    return;
  }
  if (!op.unboxed(kMetaKey) && !op.boxed(kMetaKey)) {
    run_eagerly(op, stack, "ran at once: it has no Meta kernel");
    return;
  }
  // Shapes from the Meta kernel, on meta twins of the arguments.
  std::unordered_map<const TensorImpl*, size_t> twin_of;  // twin -> argument index
  Stack meta_stack;
  meta_stack.reserve(stack.size());
  const auto& params = op.schema().arguments;
  for (size_t i = 0; i < stack.size(); ++i) {
    const IValue& v = stack[i];
    if (v.is_device() || (i < params.size() && params[i].type == ArgType::Device)) {
      // A factory's Meta kernel is its CPU kernel: given a real device it
      // would make (and fill) real memory there.
      meta_stack.emplace_back(Device::meta());
    } else if (v.is_tensor() && v.to_tensor().defined()) {
      Tensor twin = meta_twin(v.to_tensor());
      twin_of[twin.impl()] = i;
      meta_stack.emplace_back(std::move(twin));
    } else if (v.is_tensor_list()) {
      std::vector<Tensor> twins;
      for (const Tensor& t : v.to_tensor_list()) twins.push_back(meta_twin(t));
      meta_stack.emplace_back(std::move(twins));
    } else {
      meta_stack.push_back(v);
    }
  }
  Stack twins_in = meta_stack;  // kept to compare geometry after the call
  {
    ExcludeKeyGuard no_lazy(DispatchKey::Lazy);
    if (void* fn = op.unboxed(kMetaKey)) {
      op.unboxed_caller()(fn, meta_stack);
    } else {
      op.boxed(kMetaKey)(op, meta_stack);
    }
  }
  Node node;
  node.op = &op;
  node.device = output_device(stack);
  node.outputs = node_outputs();
  for (size_t i = 0; i < params.size() && i < stack.size(); ++i) {
    if (params[i].is_write && stack[i].is_tensor()) {
      const Tensor& arg = stack[i].to_tensor();
      const Tensor& twin = twins_in[i].to_tensor();
      if (!(arg.sizes() == twin.sizes()) || !(arg.strides() == twin.strides())) {
        if (!node.device.is_cuda() || shares_storage(stack, i)) {
          // The op resized its out= argument: run it eagerly rather than trace a resize.
          run_eagerly(op, stack, "ran at once: it resizes an out= argument");
          return;
        }
        // On CUDA there is no eager kernel to run (Note [Eager CUDA ops]):
        // resize the target now, as resize_out does, and record the op.
        resize_like(op, arg, twin);
      }
      node.written.push_back(static_cast<int>(i));
    }
  }
  Stack results;
  std::vector<Tensor> list_out;
  bool returns_list =
      op.schema().returns.size() == 1 && op.schema().returns[0].type == ArgType::TensorList;
  auto map_output = [&](const Tensor& m) -> Tensor {
    auto it = twin_of.find(m.impl());
    if (it != twin_of.end()) return stack[it->second].to_tensor();  // a written argument
    return fresh_output_like(m, node.device);                       // marked by append()
  };
  for (const IValue& v : meta_stack) {
    if (v.is_tensor()) {
      Tensor out = map_output(v.to_tensor());
      node.outputs.push_back(out);
      results.emplace_back(std::move(out));
    } else if (v.is_tensor_list()) {
      for (const Tensor& m : v.to_tensor_list()) {
        Tensor out = map_output(m);
        node.outputs.push_back(out);
        list_out.push_back(std::move(out));
      }
    }
  }
  if (returns_list) results.emplace_back(std::move(list_out));
  node.args = std::move(stack);
  if (!node.written.empty() && check_written_overlaps(op, node)) {
    stack = std::move(node.args);
    run_eagerly(op, stack,
                "ran at once: it writes memory another of its tensors may share, where only the "
                "eager kernel's checks and element order are defined");
    return;
  }
  for (int w : node.written) {
    // The write happens now as far as anyone can tell: bump the version at the call.
    node.args[static_cast<size_t>(w)].to_tensor().impl()->bump_version();
  }
  TraceBuffer::current().append(std::move(node));
  count_recorded();
  stack = std::move(results);
}

}  // namespace

namespace {

// Note [A failed call settles its thread's dead work]
// An op that raises while it is recorded (a shape check, an input that
// carries an earlier failure) ends the request that called it. Ops recorded
// before it whose results nobody holds, but that check values, still run
// (Note [Failures in a trace]), and their errors used to surface at the
// thread's next materialization: in the thread's next request, unrelated to
// the one that recorded them (a bad token id recorded, then the request
// stopped by a poisoned cache; the next request, valid, raised the id's
// error). So the outermost op that raises while recording runs the thread's
// own trace at once (not a traced function's) and adds those errors to its
// own: each is raised once, by the request that caused it. A kiln::Error of
// a derived type keeps its type, and those errors then go to the log.
thread_local int t_recording_depth = 0;

std::exception_ptr settle_dead_work(std::exception_ptr failed) {
  if (TraceBuffer::scoped() || plan_running()) return failed;
  TraceBuffer& trace = TraceBuffer::current();
  try {
    trace.flush({"an op raised while it was recorded"});
  } catch (const std::exception& e) {
    KILN_LOG(Perf, "running the trace after an op raised failed too: ", e.what());
  }
  std::string owed;
  while (std::exception_ptr e = trace.take_unclaimed()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      owed += (owed.empty() ? "" : "; ") + std::string(x.what());
    }
  }
  if (owed.empty()) return failed;
  try {
    std::rethrow_exception(failed);
  } catch (const Error& e) {
    if (typeid(e) == typeid(Error)) {
      return std::make_exception_ptr(
          Error(std::string(e.what()) + " (and before it on this thread: " + owed + ")"));
    }
  } catch (...) {
  }
  KILN_LOG(Perf, "an op raised while recorded; before it on this thread: ", owed);
  return failed;
}

}  // namespace

void lazy_fallback(const OperatorEntry& op, Stack& stack) {
  ++t_recording_depth;
  try {
    record_op(op, stack);
  } catch (...) {
    if (--t_recording_depth == 0)
      std::rethrow_exception(settle_dead_work(std::current_exception()));
    throw;
  }
  --t_recording_depth;
}

namespace {

// Note [Eager CUDA ops]
// An op without a CUDA kernel of its own runs on CUDA as a one-node trace: it
// is recorded and flushed at once, so it becomes a single-op group compiled by
// NVRTC (the same path fused groups take). An op that the generator cannot
// express comes back here while that trace runs, and is refused clearly.
thread_local int t_cuda_fallback_depth = 0;

void cuda_fallback(const OperatorEntry& op, Stack& stack) {
  KILN_CHECK(t_cuda_fallback_depth == 0, "[", op.name(),
             "] has no CUDA kernel yet: expected a pointwise op, copy or fill on CUDA tensors, "
             "got one that needs its own kernel");
  ++t_cuda_fallback_depth;
  struct Restore {
    ~Restore() { --t_cuda_fallback_depth; }
  } restore;
  lazy_fallback(op, stack);
  TraceBuffer::current().flush();
  // An eager call raises its own failure at the call (the flush keeps a
  // failure with the results that carry it: Note [Failures in a trace]).
  for (const IValue& v : stack) {
    if (v.is_tensor() && v.to_tensor().defined()) (void)v.to_tensor().data_ptr();
  }
}

// kiln::sync() and jit::flush() are materializations too: they raise what a
// dropped result's failure left (Note [Failures in a trace]).
void flush_and_raise() {
  TraceBuffer& trace = TraceBuffer::current();
  trace.flush();
  if (std::exception_ptr e = trace.take_unclaimed()) std::rethrow_exception(e);
}

// kiln::sync() waits for every queued op: other threads' recorded ones too
// (their failures stay theirs).
void sync_all_and_raise() {
  TraceBuffer& trace = TraceBuffer::current();
  trace.flush();
  if (!TraceBuffer::scoped()) TraceBuffer::flush_all_threads();
  if (std::exception_ptr e = trace.take_unclaimed()) std::rethrow_exception(e);
}

// Runs at library load: installs the hooks and turns lazy mode on unless KILN_EAGER=1.
struct Install {
  Install() {
    set_materialize_hook(&materialize);
    set_sync_hook(&sync_all_and_raise);
    if (!env_flag("KILN_EAGER", false)) detail::g_default_keys |= key_bit(DispatchKey::Lazy);
  }
} g_install;

}  // namespace

bool is_lazy() {
  const LocalDispatchKeySet& l = detail::local_keys();
  uint64_t ks = (l.included | detail::g_default_keys) & ~l.excluded;
  return (ks & key_bit(DispatchKey::Lazy)) != 0;
}

void flush() {
  flush_and_raise();
}

}  // namespace jit

KILN_LIBRARY_IMPL(_, Lazy, m) {
  m.fallback(&jit::lazy_fallback);
}
KILN_LIBRARY_IMPL(_, CUDA, m) {
  m.fallback(&jit::cuda_fallback);
}

}  // namespace kiln
