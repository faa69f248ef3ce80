// Padding calls up to a bucket and narrowing their results back (Note [Buckets]).

#include "jit/compile/buckets.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "jit/compile/bucket_rows.h"
#include "jit/compile/instance.h"
#include "jit/compile/tracing.h"
#include "kiln/logging.h"
#include "kiln/ops.h"
#include "runtime/core/tensor_utils.h"

// GCC 12 warns falsely on std::string concatenation at -O3.
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"

namespace kiln::jit {
namespace {

// The values floating arguments are padded with on a size's first call, past
// zeros (Note [Buckets]): far enough out on both sides that a maximum or a
// minimum over the padded dim takes them for most data (ones did not: a max
// over rows of 2s), and small enough that exp() of them stays finite in
// float16, where an infinity times a masked zero would look like mixing.
constexpr double kProbeFill = 8.0;

// Learned sizes kept at most (distinct argument descriptions); past it they
// are forgotten and learned again.
constexpr size_t kMaxLearned = 1024;

// What the results' sizes can depend on: each argument's kind, a tensor's
// dtype, device and sizes, a number's value.
std::vector<int64_t> describe(const std::vector<IValue>& args) {
  std::vector<int64_t> key;
  auto tensor = [&](const Tensor& t) {
    if (!t.defined()) {
      key.push_back(-1);
      return;
    }
    key.push_back(static_cast<int64_t>(t.dtype()));
    key.push_back(static_cast<int64_t>(t.device().type()) * 1024 + t.device().index());
    key.push_back(t.dim());
    for (int64_t s : t.sizes()) key.push_back(s);
  };
  for (const IValue& a : args) {
    key.push_back(static_cast<int64_t>(a.tag()));
    if (a.is_tensor()) {
      tensor(a.to_tensor());
    } else if (a.is_tensor_list()) {
      key.push_back(static_cast<int64_t>(a.to_tensor_list().size()));
      for (const Tensor& t : a.to_tensor_list()) tensor(t);
    } else {
      key.push_back(scalar_key(a));
    }
  }
  return key;
}

// Why a function that writes its arguments or captured tensors cannot run
// padded, or "": a write into an argument that padding copies would not
// reach the caller, and a write whose extent follows the padded dim would
// write the padded rows into the caller's memory (a KV cache's next slots).
std::string padded_writes_differ(const std::vector<IValue>& args, const std::vector<IValue>& padded,
                                 const Pristine& own, const Pristine& at_bucket) {
  const std::vector<const Tensor*> a = tensor_arguments(args), b = tensor_arguments(padded);
  const std::vector<VisibleWrite> exact = visible_writes(own);
  for (const VisibleWrite& w : exact) {
    // Padded index rows (zeros) or mask rows would write too: a KV cache's
    // slot 0 took a padded row's key.
    if (!w.positions_by.empty()) {
      return "it writes into its arguments or captured tensors at positions its values choose ('" +
             w.positions_by + "'), where padded rows would write too";
    }
    const auto k = static_cast<size_t>(w.argument);
    if (w.argument >= 0 && k < a.size() && k < b.size() && a[k]->impl() != b[k]->impl()) {
      return "it writes argument " + std::to_string(k) +
             ", which padding copies, so the write would not reach the caller";
    }
  }
  if (!(exact == visible_writes(at_bucket))) {
    return "what it writes into its arguments or captured tensors follows the padded size";
  }
  return "";
}

// A padded call's result `t` can be narrowed to `sizes`: the same rank, no
// size smaller (or both undefined).
bool fits(const Tensor& t, const std::optional<std::vector<int64_t>>& sizes) {
  if (t.defined() != sizes.has_value()) return false;
  if (!t.defined()) return true;
  if (static_cast<size_t>(t.dim()) != sizes->size()) return false;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if ((*sizes)[static_cast<size_t>(d)] > t.size(d)) return false;
  }
  return true;
}

// `t` narrowed to `sizes` in every dim where it is larger (fits() holds).
Tensor narrow_one(Tensor t, const std::optional<std::vector<int64_t>>& sizes) {
  if (!t.defined()) return t;
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t want = (*sizes)[static_cast<size_t>(d)];
    if (want < t.size(d)) t = t.narrow(d, 0, want);
  }
  return t;
}

std::string describe_sizes(const Tensor& t) {
  return t.defined() ? kiln::detail::str("sizes ", t.sizes()) : "no value";
}

std::string describe_sizes(const std::optional<std::vector<int64_t>>& s) {
  return s ? kiln::detail::str("sizes ", IntArrayRef(*s)) : "no value";
}

// "" when `got` (a padded call's result, narrowed to `want`'s sizes: fits()
// held) holds `want`'s values; else where they differ. Tolerances allow
// another summation order (the padded plan may pick other kernels), not a
// changed row. With `fill`, `got` is a probe padded with that value and
// `want` the same plan padded with zeros (Note [Buckets]): two runs of one
// plan, compared exactly.
std::string differs(const Tensor& got, const Tensor& want,
                    std::optional<double> fill = std::nullopt) {
  const bool exact = fill.has_value();
  if (!want.defined()) return "";
  EagerGuard eager;
  const Tensor a = got.to(kFloat64).cpu().contiguous();
  const Tensor b = want.to(kFloat64).cpu().contiguous();
  const double* x = a.data_ptr<double>();
  const double* y = b.data_ptr<double>();
  // Loose enough for a deep model's other kernel choices (a skinny product
  // at one size, cuBLASLt at the other), tight against a row that mixes (a
  // mean over 3 rows taken over 4 is off by a quarter).
  double rtol = 0, atol = 0;
  if (exact) {
  } else if (want.dtype() == kFloat16) {
    rtol = atol = 2e-2;
  } else if (want.dtype() == kBFloat16) {
    rtol = atol = 6e-2;
  } else if (want.is_floating_point()) {
    rtol = 1e-3;
    atol = 1e-4;
  }
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (std::isnan(x[i]) && std::isnan(y[i])) continue;
    if (x[i] == y[i]) continue;
    if (std::fabs(x[i] - y[i]) <= atol + rtol * std::fabs(y[i])) continue;
    return "element " + std::to_string(i) + " is " + std::to_string(x[i]) +
           (exact ? " padded with " + kiln::detail::str(*fill) + ", " : std::string(" padded, ")) +
           std::to_string(y[i]) + (exact ? " with zeros" : " at the call's own sizes");
  }
  return "";
}

// `r`, a view of `padded` (an argument padded: dense, in `arg`'s order of
// dims), as the same view of `arg` itself, where each of its dims steps
// through one dim of the argument; nullopt where it cannot be (a view that
// merges dims).
std::optional<Tensor> view_of_argument(const Tensor& r, const Tensor& padded, const Tensor& arg) {
  const int64_t n = padded.dim();
  std::vector<int64_t> at;
  if (!index_at_offset(padded.sizes(), padded.strides(),
                       r.storage_offset() - padded.storage_offset(), &at)) {
    return std::nullopt;
  }
  int64_t offset = arg.storage_offset();
  for (int64_t j = 0; j < n; ++j) {
    if (at[static_cast<size_t>(j)] >= arg.size(j)) return std::nullopt;
    offset += at[static_cast<size_t>(j)] * arg.stride(j);
  }
  std::vector<int64_t> strides(static_cast<size_t>(r.dim()));
  for (int64_t d = 0; d < r.dim(); ++d) {
    if (r.size(d) <= 1) {
      strides[static_cast<size_t>(d)] = r.stride(d);
      continue;
    }
    bool found = false;
    for (int64_t j = 0; j < n && !found; ++j) {
      const int64_t step = padded.stride(j);
      if (padded.size(j) <= 1 || step <= 0 || r.stride(d) % step != 0) continue;
      const int64_t k = r.stride(d) / step;
      // Within dim j of the argument from where the view starts.
      if (k <= 0 || at[static_cast<size_t>(j)] + k * (r.size(d) - 1) >= arg.size(j)) continue;
      // The next larger dim's step is not reached: the step is dim j's alone.
      bool alone = true;
      for (int64_t i = 0; i < n; ++i) {
        if (i != j && padded.size(i) > 1 && padded.stride(i) > step &&
            k * step >= padded.stride(i)) {
          alone = false;
        }
      }
      if (!alone) continue;
      strides[static_cast<size_t>(d)] = k * arg.stride(j);
      found = true;
    }
    if (!found) return std::nullopt;
  }
  return Tensor(IntrusivePtr<TensorImpl>::make(arg.impl()->storage(), r.dtype(), r.device(),
                                               r.sizes(), strides, offset));
}

// An uninitialized tensor of `sizes`, dense, its dims in memory in the order
// of `like`'s strides (Note [Buckets]: a transposed argument padded stays
// transposed).
Tensor empty_in_order(const std::vector<int64_t>& sizes, const Tensor& like,
                      const TensorOptions& options) {
  const DimVector order = dims_by_stride(like.strides());
  std::vector<int64_t> in_memory(sizes.size()), back(sizes.size());
  for (size_t j = 0; j < order.size(); ++j) {
    in_memory[j] = sizes[static_cast<size_t>(order[j])];
    back[static_cast<size_t>(order[j])] = static_cast<int64_t>(j);
  }
  return kiln::empty(in_memory, options).permute(back);
}

}  // namespace

Buckets::Buckets(const Options& options, Report report)
    : options_(options), report_(std::move(report)) {}

bool Buckets::on() const {
  return !options_.buckets.empty() && !off_.load(std::memory_order_acquire);
}

void Buckets::forget() {
  std::unique_lock<std::shared_mutex> lock(mu_);
  sizes_.clear();
}

std::vector<Tensor> Buckets::onto_arguments(std::vector<Tensor> results,
                                            const std::vector<IValue>& args,
                                            const std::vector<IValue>& padded) const {
  const std::vector<const Tensor*> a = tensor_arguments(args), p = tensor_arguments(padded);
  for (Tensor& r : results) {
    if (!r.defined()) continue;
    for (size_t k = 0; k < a.size() && k < p.size(); ++k) {
      if (!p[k]->defined() || p[k]->impl() == a[k]->impl()) continue;  // not padded
      if (r.impl()->storage() != p[k]->impl()->storage()) continue;
      if (std::optional<Tensor> v = view_of_argument(r, *p[k], *a[k])) r = std::move(*v);
      break;
    }
  }
  return results;
}

void Buckets::turn_off(const std::string& why) {
  if (off_.exchange(true)) return;
  report_(options_.name + ": buckets are off: " + why +
          "; calls run at their own sizes from now on (a plan per size)");
}

std::optional<std::vector<Tensor>> Buckets::call(const std::vector<IValue>& args, boxed::Body body,
                                                 const Run& run, const Known& known) {
  int64_t size = 0, bucket = 0;
  std::vector<IValue> padded = pad(args, &size, &bucket);
  if (padded.empty()) return std::nullopt;
  const std::vector<int64_t> key = describe(args);
  if (known(padded)) {
    std::shared_lock<std::shared_mutex> lock(mu_);
    auto it = sizes_.find(key);
    if (it != sizes_.end()) {
      const std::shared_ptr<const Sizes> sizes = it->second;
      lock.unlock();  // run() may build an entry, which forgets what was learned
      return onto_arguments(narrow(run(padded, /*known=*/true), *sizes), args, padded);
    }
  }
  return first_call(args, padded, key, body, run);
}

std::string Buckets::rows_at_bucket(const std::vector<IValue>& args,
                                    const std::vector<IValue>& padded, const Pristine& own,
                                    boxed::Body body, bool writes) {
  Traced at_bucket;
  try {
    at_bucket = trace_function(padded, body, /*run_if_thrown=*/false);
  } catch (const std::exception& e) {
    return std::string("the function fails at the padded size (") + e.what() + ")";
  } catch (...) {
    return "the function fails at the padded size";
  }
  if (at_bucket.broken) {  // it ran, padded
    if (!writes) return "its trace breaks at the padded size (" + at_bucket.break_reason + ")";
    turn_off("its trace breaks at the padded size (" + at_bucket.break_reason + ")");
    throw Error("[jit::compile] " + options_.name +
                ": expected a function whose trace at a bucket's size does not break, "
                "got one that breaks (" +
                at_bucket.break_reason +
                "); it ran padded, and "
                "buckets are off for it from now on");
  }
  const Pristine bucket = make_pristine(std::move(at_bucket));
  // A write into the caller's memory is judged first: where it lands.
  std::string why = writes ? padded_writes_differ(args, padded, own, bucket) : "";
  if (why.empty()) why = padded_rows_mix(own, bucket);
  return why;
}

std::vector<Tensor> Buckets::first_call(const std::vector<IValue>& args,
                                        const std::vector<IValue>& padded,
                                        const std::vector<int64_t>& key, boxed::Body body,
                                        const Run& run) {
  Traced traced = trace_function(args, body);
  if (traced.broken) {  // it ran (lazily): its results are the call's
    turn_off("its trace breaks (" + traced.break_reason + "), so it runs uncompiled");
    return std::move(traced.outputs);
  }
  Pristine own = make_pristine(std::move(traced));
  own.caller_objects.clear();  // held, they would count as held outside while the entry builds
  Sizes sizes;
  for (const Tensor& t : own.outputs) {
    if (t.defined()) {
      sizes.emplace_back(std::vector<int64_t>(t.sizes().begin(), t.sizes().end()));
    } else {
      sizes.emplace_back(std::nullopt);
    }
  }
  const bool writes = !visible_writes(own).empty();
  // Note [Rows along the padded dim]: decided before anything runs padded.
  if (std::string why = rows_at_bucket(args, padded, own, body, writes); !why.empty()) {
    turn_off(why);
    return run(args, /*known=*/false);
  }
  std::vector<Tensor> results;
  if (!writes) {  // it can run once more unseen
    // The trace at the call's own sizes gives the exact results; padding must not change them.
    Instance exact_run(own, {.graphs = false, .name = options_.name + ": at the call's own sizes"});
    std::vector<Tensor> exact = exact_run.run(args);
    std::vector<Tensor> got;
    std::vector<std::vector<Tensor>> probes;  // padded with +kProbeFill, then -kProbeFill
    try {
      got = run(padded, /*known=*/false);
      // The same plan padded with each probe value, then with zeros again:
      // runs past the first, which may choose kernels as it goes (Note
      // [Buckets]). Nothing floating padded: the values would change nothing.
      int64_t size = 0, bucket = 0;
      bool filled = false;
      for (double fill : {kProbeFill, -kProbeFill}) {
        std::vector<IValue> probe = pad(args, &size, &bucket, fill, &filled);
        if (!filled) break;
        probes.push_back(run(probe, /*known=*/false));
      }
      if (!probes.empty()) got = run(padded, /*known=*/false);
    } catch (const std::exception& e) {
      turn_off(std::string("the function fails at the padded size (") + e.what() + ")");
      return exact;
    }
    std::string why;
    bool same_count = got.size() == exact.size();
    for (const auto& p : probes) same_count = same_count && p.size() == exact.size();
    if (!same_count) {
      why = "it returned " + std::to_string(got.size()) + " results, not " +
            std::to_string(exact.size());
    }
    for (size_t i = 0; i < exact.size() && why.empty(); ++i) {
      bool fit = fits(got[i], sizes[i]);
      for (const auto& p : probes) fit = fit && fits(p[i], sizes[i]);
      if (!fit) {
        why = "result " + std::to_string(i) + " has " + describe_sizes(got[i]) + " padded and " +
              describe_sizes(exact[i]) + " at the call's own sizes";
      } else if (std::string d = differs(narrow_one(got[i], sizes[i]), exact[i]); !d.empty()) {
        why = "result " + std::to_string(i) + " changed (" + d + "): its rows mix";
      }
      for (size_t k = 0; k < probes.size() && why.empty(); ++k) {
        const std::string e =
            differs(narrow_one(probes[k][i], sizes[i]), narrow_one(got[i], sizes[i]),
                    k == 0 ? kProbeFill : -kProbeFill);
        if (!e.empty()) {
          why = "result " + std::to_string(i) + " follows the padding's values (" + e +
                "): its rows mix";
        }
      }
    }
    if (!why.empty()) {
      turn_off("padding to a bucket changed the results, " + why);
      return exact;
    }
    results = onto_arguments(narrow(std::move(got), sizes), args, padded);
  } else {
    std::vector<Tensor> got;
    try {
      got = run(padded, /*known=*/false);
    } catch (const std::exception& e) {
      // What it wrote before failing stays written: nothing to run again.
      turn_off(std::string("the function fails at the padded size (") + e.what() + ")");
      throw;
    }
    results = onto_arguments(narrow(std::move(got), sizes), args, padded);
  }
  std::unique_lock<std::shared_mutex> lock(mu_);
  if (sizes_.size() >= kMaxLearned) sizes_.clear();
  sizes_.emplace(key, std::make_shared<const Sizes>(std::move(sizes)));
  return results;
}

std::vector<Tensor> Buckets::narrow(std::vector<Tensor> results, const Sizes& sizes) {
  std::string why;
  if (results.size() != sizes.size()) {
    why = "returned " + std::to_string(results.size()) + " results padded and " +
          std::to_string(sizes.size()) + " at the call's own sizes";
  }
  for (size_t i = 0; i < results.size() && why.empty(); ++i) {
    if (!fits(results[i], sizes[i])) {
      why = "result " + std::to_string(i) + " has " + describe_sizes(results[i]) + " padded and " +
            describe_sizes(sizes[i]) + " at the call's own sizes";
    }
  }
  if (!why.empty()) {
    // The padded call ran (its writes happened): nothing exact to return.
    turn_off("its results depend on the padded size: " + why);
    throw Error("[jit::compile] " + options_.name + ": expected results that padding only " +
                "makes larger, got a function whose " + why +
                "; buckets are off for it from now on");
  }
  for (size_t i = 0; i < results.size(); ++i) results[i] = narrow_one(results[i], sizes[i]);
  return results;
}

std::vector<IValue> Buckets::pad(const std::vector<IValue>& args, int64_t* size, int64_t* bucket,
                                 double fill, bool* filled) const {
  *size = *bucket = 0;
  // What to pad: (argument, element of a list argument or -1, dim).
  struct Target {
    size_t input;
    int64_t element;
    int64_t dim;
  };
  std::vector<Target> targets;
  auto consider = [&](const Tensor& t, size_t input, int64_t element, int64_t want) {
    if (!t.defined()) return;
    const int64_t dim = want < 0 ? want + t.dim() : want;
    if (dim < 0 || dim >= t.dim()) return;
    if (targets.empty()) *size = t.size(dim);
    if (t.size(dim) == *size) targets.push_back({input, element, dim});
  };
  for (const DynamicDim& dd : options_.dynamic) {
    if (dd.input < 0 || static_cast<size_t>(dd.input) >= args.size()) continue;
    const size_t input = static_cast<size_t>(dd.input);
    if (args[input].is_tensor()) consider(args[input].to_tensor(), input, -1, dd.dim);
    if (args[input].is_tensor_list()) {
      const std::vector<Tensor>& list = args[input].to_tensor_list();
      for (size_t k = 0; k < list.size(); ++k) {
        consider(list[k], input, static_cast<int64_t>(k), dd.dim);
      }
    }
  }
  if (targets.empty()) return {};
  int64_t best = -1;  // the smallest bucket that holds the size
  for (int64_t b : options_.buckets) {
    if (b >= *size && (best < 0 || b < best)) best = b;
  }
  *bucket = best < 0 ? *size : best;
  if (*bucket == *size) return {};
  std::vector<IValue> padded = args;
  std::unordered_map<size_t, std::vector<Tensor>> lists;  // padded list arguments
  EagerGuard eager;
  for (const Target& target : targets) {
    // The tensor as padded so far (two dims of one tensor may be dynamic).
    Tensor* t = nullptr;
    Tensor single;
    if (target.element < 0) {
      single = padded[target.input].to_tensor();
      t = &single;
    } else {
      auto [it, fresh] = lists.try_emplace(target.input);
      if (fresh) it->second = args[target.input].to_tensor_list();
      t = &it->second[static_cast<size_t>(target.element)];
    }
    std::vector<int64_t> sizes(t->sizes().begin(), t->sizes().end());
    sizes[static_cast<size_t>(target.dim)] = *bucket;
    const TensorOptions options = TensorOptions(t->dtype()).device(t->device());
    const bool fills = fill != 0 && t->is_floating_point();
    if (fills && filled) *filled = true;
    Tensor p = empty_in_order(sizes, *t, options);
    if (fills) {
      p.fill_(fill);
    } else {
      p.zero_();
    }
    p.narrow(target.dim, 0, *size).copy_(*t);
    *t = std::move(p);
    if (target.element < 0) padded[target.input] = IValue(std::move(single));
  }
  for (auto& [input, list] : lists) padded[input] = IValue(std::move(list));
  return padded;
}

}  // namespace kiln::jit
