#pragma once

// Note [Runtime hooks]
// runtime/ never includes jit/: jit/ records, plans and generates code on top
// of runtime/'s tensors and kernels. A few things runtime/ does still need
// from jit/: computing a pending storage, running what is pending, views a
// trace must know of, the kernel disk cache, and three CUDA kernels that exist only as generated
// code. Each is a slot declared here, and only here. jit/ fills its slots from static initializers
// when the library loads (record/lazy_kernel.cpp, cache/persistent_cache.cpp,
// codegen_cuda/op_kernels/int_matmul.cpp, codegen_cuda/op_kernels/gemv.cpp,
// codegen_cuda/copy_cuda.cpp); runtime/ reads them when it needs them. Every slot exists in every
// build, with or without CUDA: without it the CUDA slots stay empty and nothing reads them. A slot
// is an atomic, set once at load and read afterwards from any thread; an empty slot behaves as its
// comment says.

#include <optional>
#include <string>
#include <vector>

namespace kiln {

class Scalar;
class StorageImpl;
class Tensor;
class TensorImpl;

// --- Lazy evaluation -------------------------------------------------------------

// Computes a storage's pending contents (Note [Pending storage]), returning
// once the calling thread may read its memory (or throwing the error that kept
// it from being computed). Empty: reading a pending storage is an internal
// error (only jit/ makes pending storages).
using MaterializeHook = void (*)(StorageImpl* storage);
void set_materialize_hook(MaterializeHook hook);
MaterializeHook materialize_hook();

// Runs every pending computation (kiln::sync() calls it before waiting for the
// devices). Empty: nothing is pending.
using SyncHook = void (*)();
void set_sync_hook(SyncHook hook);
SyncHook sync_hook();

// Told of a view made at an explicit storage offset (as_strided with one) of
// `storage`: a compiled function being traced then keeps that argument's
// offset exact (Note [Dynamic storage offsets] in guards/guards.h). Empty:
// nothing listens.
using AbsoluteViewHook = void (*)(const StorageImpl* storage);
void set_absolute_view_hook(AbsoluteViewHook hook);
AbsoluteViewHook absolute_view_hook();

// Told of each view made (make_view: every view op), of `base`: a compiled
// function being traced follows the views of a captured tensor back to the
// tensor object they were made of, whose identity it guards (Note [Guards]
// in guards/guards.h). Empty: nothing listens.
using ViewHook = void (*)(TensorImpl* base, TensorImpl* view);
void set_view_hook(ViewHook hook);
ViewHook view_hook();

// Told of each access to a tensor's data (TensorImpl::data(): item(),
// data_ptr(), printing, a copy to the host, a kernel) while
// TensorImpl::host_reads_watched(), before a pending value is computed: a
// compiled function being traced on this thread makes a host read of a
// value a graph break (Note [Host reads while tracing] in
// jit/compile/tracing.h). Empty: nothing listens.
using HostReadHook = void (*)(TensorImpl* tensor);
void set_host_read_hook(HostReadHook hook);
HostReadHook host_read_hook();

// --- Persistent cache ---------------------------------------------------------------

// Note [Persistent cache hook]
// A few answers in runtime/ are worth keeping across processes (cuBLASLt's
// algorithm choices: Note [cuBLASLt algorithm disk cache]), but the disk cache
// belongs to jit/ (Note [Kernel disk cache]). Empty: every lookup misses and
// stores are dropped.
struct PersistentCache {
  std::optional<std::vector<char>> (*load)(const std::string& key) = nullptr;
  void (*store)(const std::string& key, const std::vector<char>& payload) = nullptr;
};
void set_persistent_cache(PersistentCache cache);
std::optional<std::vector<char>> persistent_load(const std::string& key);
void persistent_store(const std::string& key, const std::vector<char>& payload);

// --- Generated CUDA kernels -----------------------------------------------------------

namespace cuda {

// out[..., m, n] = beta * self + alpha * (a[..., m, k] @ b[..., k, n]) on
// integer CUDA tensors of one device and one dtype (Note [Integer matmuls on
// CUDA]). a and b have out's rank and batch sizes (they may be expanded
// views); `self` (optional: undefined when beta is zero, and then never read)
// broadcasts to out's shape and may be out itself. out may share storage with
// a or b. Runs on the current stream. Empty: an integer product on CUDA is an
// internal error (the CUDA code generator is always linked with the CUDA
// backend).
using IntMatmulKernel = void (*)(const Tensor& out, const Tensor& self, const Tensor& a,
                                 const Tensor& b, const Scalar& beta, const Scalar& alpha);
void set_int_matmul_kernel(IntMatmulKernel kernel);
IntMatmulKernel int_matmul_kernel();

// Writes `src` (broadcast to dst's sizes) into `dst` on one device, converting
// the dtype (Note [Device copies through generated kernels]). Empty: copies
// that change the dtype fail with a kiln::Error, the others use the copy
// engines.
using DeviceCopyKernel = void (*)(const Tensor& dst, const Tensor& src);
void set_device_copy_kernel(DeviceCopyKernel kernel);
DeviceCopyKernel device_copy_kernel();

// Note [Skinny matmuls] (runtime/cuda/blas_lt_skinny.cpp): a product of few
// rows, out[m, n] = act(norm(a)[m, k] @ b[k, n] + bias[n]) + residual[m, n],
// with b read as rows of a weight (b.stride(0) == 1), through a generated
// kernel that streams the weight. act: 0 none, 1 relu, 2 gelu (tanh form);
// norm (of a's rows, before the product): 0 none, 1 layer_norm, 2 rms_norm.
struct SkinnyMatmul {
  const Tensor* out = nullptr;
  const Tensor* a = nullptr;
  const Tensor* b = nullptr;
  const Tensor* bias = nullptr;      // optional
  const Tensor* residual = nullptr;  // optional, of out's sizes
  int act = 0;
  int norm = 0;
  const Tensor* norm_weight = nullptr;  // optional, [k]
  const Tensor* norm_bias = nullptr;    // optional, [k] (layer_norm)
  double norm_eps = 0;
};
// `takes`: whether `run` takes these operands (host checks only; nothing
// runs); `run`: the product on the current stream; `preferred` (optional):
// for operands it takes, +1 where it is the better default even above the
// rows where a plain kernel is, -1 where the other way is even below them,
// 0 where the rows decide (Note [Skinny matmul choice]). Empty: every
// product goes to cuBLASLt.
struct SkinnyMatmulKernel {
  bool (*takes)(const SkinnyMatmul& p) = nullptr;
  void (*run)(const SkinnyMatmul& p) = nullptr;
  int (*preferred)(const SkinnyMatmul& p) = nullptr;
};
void set_skinny_matmul_kernel(SkinnyMatmulKernel kernel);
SkinnyMatmulKernel skinny_matmul_kernel();

}  // namespace cuda
}  // namespace kiln
