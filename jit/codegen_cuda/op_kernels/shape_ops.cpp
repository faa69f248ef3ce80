// roll, flip, repeat, constant_pad_nd and the reflect / replicate / circular
// pads on CUDA: one generated remap kernel.
//
// Note [CUDA remap kernel]
// Each of these ops writes a dense result whose element at coordinates c
// reads the input at coordinates c' with, per dim, c' = c * mul + add,
// optionally taken modulo the input's size (roll, repeat); a c' outside the
// input (padding) writes the fill value instead. flip is mul = -1, add =
// size - 1; roll is add = -shift with the modulo; repeat is the modulo over
// the input read with new leading dims of size 1; constant_pad_nd is add =
// -left (negative pads crop). The other pad modes (Note [Pad modes] in
// runtime/cpu/shape_pad.h) map a coordinate that falls outside back inside:
// reflect (a bit per dim) mirrors it at the edges, replicate (clamp bits)
// clamps it, circular is the modulo over the cropped extent, whose start the
// input pointer is moved to. The kernel only moves elements, so it is
// generated per element size, not per dtype. Shapes, dtypes and errors come
// from the Meta kernels.

#include <cstring>

#include "jit/codegen_cuda/kernel_loader.h"
#include "jit/codegen_cuda/op_kernels/op_sources.h"
#include "jit/codegen_cuda/op_kernels/op_support.h"
#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/cpu/shape_pad.h"

#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"

namespace kiln::jit::cuda {
namespace {

const char* word_type(int64_t bytes) {
  switch (bytes) {
    case 1:
      return "unsigned char";
    case 2:
      return "unsigned short";
    case 4:
      return "unsigned int";
    default:
      return "unsigned long long";
  }
}

std::string remap_name(int64_t bytes) {
  return "kiln_remap_b" + std::to_string(bytes);
}

std::string remap_source(int64_t bytes) {
  const std::string W = word_type(bytes);
  return op_prelude() + "extern \"C\" __global__ void __launch_bounds__(256) " + remap_name(bytes) +
         "(" + W + "* __restrict__ y, const " + W +
         "* __restrict__ x, i64 n, int nd, KilnDims sizes, KilnDims in_sizes, KilnDims in_st, "
         "KilnDims mul, KilnDims add, int modulo, int reflect, int clamp, unsigned long long fill) "
         "{\n"
         "  kiln_grid_enter();\n"
         "  for (i64 i = (i64)blockIdx.x * 256 + threadIdx.x; i < n; i += (i64)gridDim.x * 256) {\n"
         "    i64 rem = i, off = 0;\n"
         "    bool inside = true;\n"
         "    for (int d = nd - 1; d >= 0; --d) {\n"
         "      const i64 c = rem % sizes.v[d];\n"
         "      rem /= sizes.v[d];\n"
         "      const i64 m = in_sizes.v[d];\n"
         "      i64 s = c * mul.v[d] + add.v[d];\n"
         "      if ((modulo >> d) & 1) s = ((s % m) + m) % m;\n"
         "      if ((reflect >> d) & 1) s = s < 0 ? -s : (s >= m ? 2 * (m - 1) - s : s);\n"
         "      if ((clamp >> d) & 1) s = s < 0 ? 0 : (s >= m ? m - 1 : s);\n"
         "      if (s < 0 || s >= m) inside = false;\n"
         "      off += s * in_st.v[d];\n"
         "    }\n"
         "    y[i] = inside ? x[off] : (" +
         W + ")fill;\n  }\n}\n";
}

struct Remap {
  DimVector in_sizes, in_strides, mul, add;
  int modulo = 0, reflect = 0, clamp = 0;  // a bit per dim
  uint64_t fill = 0;
  int64_t in_offset = 0;  // elements from self's first element to the one read as 0
};

// out (fresh, dense in some order of its dims: flip and a crop-only pad keep
// self's layout, Note [Preserved layout]) from `self` read through `r` (one
// entry per out dim). The kernel walks out in memory order, so its dims (and
// r's entries) are passed outermost first.
void run_remap(const char* op, const Tensor& out, const Tensor& self, const Remap& r) {
  if (out.numel() == 0) return;
  const int64_t bytes = static_cast<int64_t>(out.element_size());
  const int nd = static_cast<int>(out.dim());
  KILN_CHECK(nd <= kMaxKernelDims, "[", op, "] expected at most ", kMaxKernelDims,
             " dims on cuda, got ", nd);
  KILN_INTERNAL_ASSERT(non_overlapping_and_dense(out), op,
                       ": expected a dense output, got strides ", out.strides());
  const DimVector order = dims_by_stride(out.strides());
  KilnDims sizes, in_sizes, in_st, mul, add;
  int modulo = 0, reflect = 0, clamp = 0;
  for (int i = 0; i < nd; ++i) {
    const int64_t d = order[i];
    sizes.v[i] = out.size(d);
    in_sizes.v[i] = r.in_sizes[d];
    in_st.v[i] = r.in_strides[d];
    mul.v[i] = r.mul[d];
    add.v[i] = r.add[d];
    modulo |= ((r.modulo >> d) & 1) << i;
    reflect |= ((r.reflect >> d) & 1) << i;
    clamp |= ((r.clamp >> d) & 1) << i;
  }
  cudaKernel_t k = load_kernel(
      remap_name(bytes), [&] { return remap_source(bytes); }, out.device().index());
  // A 0-dim input still needs a valid pointer even when nothing is read.
  KernelArgs a;
  const char* in =
      self.numel() > 0 ? static_cast<const char*>(self.data_ptr()) + r.in_offset * bytes : nullptr;
  a.ptr(out).ptr(in).i64(out.numel()).i32(nd);
  a.dims(sizes).dims(in_sizes).dims(in_st).dims(mul).dims(add).i32(modulo).i32(reflect);
  a.i32(clamp);
  const uint64_t fill = r.fill;
  a.i64(static_cast<int64_t>(fill));
  launch(k, out.device(), grid_for(out.numel(), 256 * 4), 256, 0, a);
  out.impl()->bump_version();
}

// Identity over `self`'s own dims.
Remap identity(const Tensor& self) {
  Remap r;
  r.in_sizes = DimVector(self.sizes());
  r.in_strides = DimVector(self.strides());
  r.mul = DimVector(self.dim(), 1);
  r.add = DimVector(self.dim(), 0);
  return r;
}

Tensor flip(const Tensor& self, IntArrayRef dims) {
  Tensor meta = kiln::flip(meta_of(self), dims);
  Tensor out = empty_strided_tensor(meta.sizes(), meta.strides(), meta.dtype(), self.device());
  Remap r = identity(self);
  for (int64_t d : dims) {
    if (self.dim() == 0) break;  // nothing to reverse
    const int64_t w = wrap_dim(d, self.dim(), "flip");
    r.mul[w] = -1;
    r.add[w] = self.size(w) - 1;
  }
  run_remap("flip", out, self, r);
  return out;
}

Tensor roll(const Tensor& self, IntArrayRef shifts, IntArrayRef dims) {
  Tensor meta = kiln::roll(meta_of(self), shifts, dims);
  Tensor out = empty_tensor(meta.sizes(), meta.dtype(), self.device());
  if (out.numel() == 0) return out;
  if (dims.empty()) {
    // Rolled flattened: the dense input as one dim, the result viewed back.
    Tensor flat = dense(self).reshape({self.numel()});
    const int64_t d0 = 0;
    Tensor rolled = cuda::roll(flat, shifts, IntArrayRef(&d0, 1));
    return rolled.view(self.sizes());
  }
  Remap r = identity(self);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], self.dim(), "roll");
    const int64_t n = self.size(d);
    r.add[d] = (r.add[d] - shifts[i] % n) % n;
    r.modulo |= 1 << d;
  }
  run_remap("roll", out, self, r);
  return out;
}

Tensor repeat(const Tensor& self, IntArrayRef repeats) {
  Tensor meta = kiln::repeat(meta_of(self), repeats);
  Tensor out = empty_tensor(meta.sizes(), meta.dtype(), self.device());
  const int64_t nd = self.dim(), nr = static_cast<int64_t>(repeats.size());
  Remap r;
  r.in_sizes = DimVector(nr, 1);
  r.in_strides = DimVector(nr, 0);
  r.mul = DimVector(nr, 1);
  r.add = DimVector(nr, 0);
  for (int64_t d = 0; d < nd; ++d) {
    r.in_sizes[nr - nd + d] = self.size(d);
    r.in_strides[nr - nd + d] = self.stride(d);
  }
  r.modulo = static_cast<int>((uint64_t{1} << std::min<int64_t>(nr, 30)) - 1);
  run_remap("repeat", out, self, r);
  return out;
}

Tensor constant_pad_nd(const Tensor& self, IntArrayRef pad, const Scalar& value) {
  static const TypedOp<Tensor(const Tensor&, IntArrayRef, const Scalar&)> op("constant_pad_nd");
  Tensor meta = op(meta_of(self), pad, value);
  Tensor out = empty_strided_tensor(meta.sizes(), meta.strides(), meta.dtype(), self.device());
  Remap r = identity(self);
  const int64_t nd = self.dim();
  const int64_t npad = static_cast<int64_t>(pad.size()) / 2;
  bool any_positive = false;
  for (int64_t d = nd - npad; d < nd; ++d) {
    const int64_t left = pad[2 * (nd - d - 1)], right = pad[2 * (nd - d - 1) + 1];
    r.add[d] = -left;
    any_positive = any_positive || left > 0 || right > 0;
  }
  // Only a padding result reads the value (the Meta kernel checked it then).
  if (any_positive) store_scalar(&r.fill, self.dtype(), value);
  run_remap("constant_pad_nd", out, self, r);
  return out;
}

// The reflect / replicate / circular pads: self's own dims, the padded ones
// mapped as Note [Pad modes] says.
Tensor pad_by_mode(const char* op, cpu::PadMode mode, const Tensor& self, IntArrayRef pad,
                   int64_t spatial) {
  const cpu::PadGeometry g = cpu::pad_mode_geometry(op, mode, meta_of(self), pad, spatial);
  Tensor out = empty_tensor(g.sizes, self.dtype(), self.device());
  Remap r = identity(self);
  for (const cpu::PadDim& p : g.dims) {
    const int bit = 1 << p.dim;
    r.in_sizes[p.dim] = p.n;
    r.add[p.dim] = -p.left - p.lo;
    r.in_offset += p.lo * self.stride(p.dim);
    if (mode == cpu::PadMode::Reflect) r.reflect |= bit;
    if (mode == cpu::PadMode::Replicate) r.clamp |= bit;
    if (mode == cpu::PadMode::Circular) r.modulo |= bit;
  }
  run_remap(op, out, self, r);
  return out;
}

Tensor reflection_pad1d(const Tensor& self, IntArrayRef pad) {
  return pad_by_mode("reflection_pad1d", cpu::PadMode::Reflect, self, pad, 1);
}
Tensor reflection_pad2d(const Tensor& self, IntArrayRef pad) {
  return pad_by_mode("reflection_pad2d", cpu::PadMode::Reflect, self, pad, 2);
}
Tensor reflection_pad3d(const Tensor& self, IntArrayRef pad) {
  return pad_by_mode("reflection_pad3d", cpu::PadMode::Reflect, self, pad, 3);
}
Tensor replication_pad1d(const Tensor& self, IntArrayRef pad) {
  return pad_by_mode("replication_pad1d", cpu::PadMode::Replicate, self, pad, 1);
}
Tensor replication_pad2d(const Tensor& self, IntArrayRef pad) {
  return pad_by_mode("replication_pad2d", cpu::PadMode::Replicate, self, pad, 2);
}
Tensor replication_pad3d(const Tensor& self, IntArrayRef pad) {
  return pad_by_mode("replication_pad3d", cpu::PadMode::Replicate, self, pad, 3);
}
Tensor pad_circular(const Tensor& self, IntArrayRef pad) {
  return pad_by_mode("_pad_circular", cpu::PadMode::Circular, self, pad, 0);
}

}  // namespace

NamedSources shape_source_samples() {
  NamedSources out;
  for (int64_t b : {1, 2, 4, 8}) out.emplace_back(remap_name(b), remap_source(b));
  return out;
}

KILN_LIBRARY_IMPL(kiln, CUDA, m) {
  m.impl("flip", &flip);
  m.impl("roll", &roll);
  m.impl("repeat", &repeat);
  m.impl("constant_pad_nd", &constant_pad_nd);
  m.impl("reflection_pad1d", &reflection_pad1d);
  m.impl("reflection_pad2d", &reflection_pad2d);
  m.impl("reflection_pad3d", &reflection_pad3d);
  m.impl("replication_pad1d", &replication_pad1d);
  m.impl("replication_pad2d", &replication_pad2d);
  m.impl("replication_pad3d", &replication_pad3d);
  m.impl("_pad_circular", &pad_circular);
}

}  // namespace kiln::jit::cuda
