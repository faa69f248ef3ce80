#include "runtime/cpu/reduce.h"

#include <bit>
#include <climits>

#include "runtime/cpu/tensor_iter.h"

namespace kiln::cpu {

uint64_t reduction_dims(IntArrayRef dims, int64_t ndim, const char* op) {
  KILN_CHECK(ndim <= kMaxReduceDims, "[", op, "] expected at most ", kMaxReduceDims, " dims, got ",
             ndim);
  if (dims.empty()) return ndim == 64 ? ~uint64_t{0} : (uint64_t{1} << ndim) - 1;
  uint64_t mask = 0;
  bool zero_dim_seen = false;
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, ndim, op);
    if (ndim == 0) {
      // A 0-dim tensor has one dim to name (0 or -1), once, as PyTorch counts it.
      KILN_CHECK(!zero_dim_seen, "[", op, "] dim 0 appears multiple times in the list of dims ",
                 dims);
      zero_dim_seen = true;
      continue;
    }
    KILN_CHECK(!((mask >> w) & 1), "[", op, "] dim ", w,
               " appears multiple times in the list of dims ", dims);
    mask |= uint64_t{1} << w;
  }
  return mask;
}

DimVector reduced_sizes(IntArrayRef sizes, uint64_t mask, bool keepdim) {
  DimVector out;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if ((mask >> d) & 1) {
      if (keepdim) out.push_back(1);
    } else {
      out.push_back(sizes[d]);
    }
  }
  return out;
}

int64_t reduced_count(IntArrayRef sizes, uint64_t mask) {
  int64_t n = 1;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if ((mask >> d) & 1) n *= sizes[d];
  }
  return n;
}

void check_reduced_nonempty(IntArrayRef sizes, uint64_t mask, const char* op) {
  for (size_t d = 0; d < sizes.size(); ++d) {
    KILN_CHECK(!((mask >> d) & 1) || sizes[d] != 0, "[", op, "] expected reduction dim ", d,
               " to have non-zero size, got sizes ", sizes);
  }
}

void check_cpu_or_meta(const Tensor& t, const char* op, const char* name) {
  check_defined(t, op, name);
  KILN_CHECK(t.device().is_cpu() || t.device().is_meta(), "[", op, "] expected '", name,
             "' on cpu or meta, got ", t.device());
}

Tensor reduction_result(const Tensor& self, IntArrayRef shape, DType dtype, const Tensor* out,
                        const char* op) {
  if (out == nullptr) return empty_tensor(shape, dtype, self.device());
  check_defined(*out, op, "out");
  KILN_CHECK(out->device() == self.device(), "[", op, "] expected 'out' on ", self.device(),
             " like the input, got ", out->device());
  if (!(out->sizes() == shape)) resize_out(*out, shape);
  // Elements written through one address would leave the result to the order
  // of the writes (PyTorch 1.13 refuses it for some out= ops, not all).
  for (int64_t d = 0; d < out->dim(); ++d) {
    KILN_CHECK(out->stride(d) != 0 || out->size(d) <= 1, "[", op,
               "] expected an out tensor without internal overlap, got sizes ", out->sizes(),
               " and strides ", out->strides());
  }
  return *out;
}

int reduce_threads() {
  return tbb::this_task_arena::max_concurrency();
}

namespace {

struct PlanDim {
  int64_t size;
  int64_t in;
  int64_t out[ReducePlan::kMaxOutputs];
};

// Innermost-first order by input stride; broadcast (stride-0) dims go outermost.
void sort_by_stride(std::vector<PlanDim>& dims) {
  auto key = [](const PlanDim& d) { return d.in == 0 ? INT64_MAX : d.in; };
  std::stable_sort(dims.begin(), dims.end(),
                   [&](const PlanDim& a, const PlanDim& b) { return key(a) < key(b); });
}

// Merges each dim into the next-inner one where their strides line up.
void coalesce(std::vector<PlanDim>& dims, int nout) {
  std::vector<PlanDim> merged;
  for (const PlanDim& d : dims) {
    if (!merged.empty()) {
      PlanDim& in = merged.back();
      bool ok = d.in == in.in * in.size;
      for (int k = 0; k < nout; ++k) ok = ok && d.out[k] == in.out[k] * in.size;
      if (ok) {
        in.size *= d.size;
        continue;
      }
    }
    merged.push_back(d);
  }
  dims = std::move(merged);
}

}  // namespace

ReducePlan::ReducePlan(const Tensor& in, uint64_t mask, ArrayRef<Tensor> outs, bool logical_order) {
  KILN_INTERNAL_ASSERT(!outs.empty() && outs.size() <= kMaxOutputs, "bad reduction outputs");
  nout = static_cast<int>(outs.size());
  in_data = static_cast<const char*>(in.data_ptr());
  const int64_t nd = in.dim();
  const int64_t kept = nd - std::popcount(mask);
  for (int k = 0; k < nout; ++k) {
    out_data[k] = static_cast<char*>(outs[k].data_ptr());
    KILN_INTERNAL_ASSERT(outs[k].dim() == nd || outs[k].dim() == kept,
                         "reduction output rank mismatch");
  }
  const int64_t isz = static_cast<int64_t>(in.element_size());
  std::vector<PlanDim> od, rd;  // innermost first
  int64_t out_dim = kept;
  for (int64_t d = nd - 1; d >= 0; --d) {
    PlanDim x{in.size(d), in.stride(d) * isz, {0, 0}};
    bool reduced = (mask >> d) & 1;
    if (!reduced) --out_dim;
    if (reduced) {
      reduce_size *= x.size;
      if (x.size != 1) rd.push_back(x);
      continue;
    }
    num_outputs *= x.size;
    for (int k = 0; k < nout; ++k) {
      int64_t od_index = outs[k].dim() == nd ? d : out_dim;
      x.out[k] = outs[k].stride(od_index) * static_cast<int64_t>(outs[k].element_size());
    }
    if (x.size != 1) od.push_back(x);
  }
  sort_by_stride(od);
  if (!logical_order) sort_by_stride(rd);
  coalesce(od, nout);
  coalesce(rd, nout);
  if (od.empty()) od.push_back({1, 0, {0, 0}});
  if (rd.empty()) rd.push_back({1, 0, {0, 0}});
  for (const PlanDim& d : od) {
    osize.push_back(d.size);
    ostride_in.push_back(d.in);
    for (int k = 0; k < nout; ++k) ostride_out[k].push_back(d.out[k]);
  }
  for (const PlanDim& d : rd) {
    rsize.push_back(d.size);
    rstride.push_back(d.in);
  }
}

}  // namespace kiln::cpu
