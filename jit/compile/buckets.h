#pragma once

// Note [Buckets]
// With Options::buckets, the dims listed in Options::dynamic are padded up to
// the smallest bucket that holds them (zeros after the argument's values), so
// that one plan (one CUDA graph) serves every size up to its bucket. Sizes
// past the largest bucket, and sizes that are a bucket, run as they are.
// Padding copies the padded arguments once per call (a fill and a copy
// kernel each): meant for small per-request tensors (token ids, positions).
//
// A padded call must still return what the function returns at the call's
// own sizes, and padding is only sound for a function whose rows along the
// padded dim do not mix (no reduction over it, no product contracting it).
// So the first call at each set of argument sizes traces the function at
// those sizes without running it, which gives its results' sizes; a padded
// result is narrowed wherever its size differs (any dim, not only dim 0, and
// never a result that does not follow the padded dim, such as a weight's
// view). It also traces the function at the bucket's sizes and compares the
// two traces op by op (Note [Rows along the padded dim] in bucket_rows.h):
// an op that mixes rows, a function that fails or branches at the padded
// size, turns buckets off before anything ran padded. The padded arguments
// keep the caller's order of dims in memory, so that a function that copies
// a transposed argument does so at both sizes. Past that proof, the data
// checks below stay, for what a trace cannot show. When the trace writes
// nothing but its own results, that first call
// also runs the trace at the call's sizes and compares: a result that
// padding changed (rows that mix), or a padded call that fails, turns
// buckets off for the function, said once on the recompile log and in
// explain(), and every call from then on runs at its own sizes (a plan per
// size, Note [Compiled instances]). The comparison allows another
// summation order (the padded plan may pick other kernels), so a row that
// mixes with padded ones by little could pass it (a log_softmax over the
// padded dim of values near 5 moved by 3e-4 with zero rows, under the 1e-3
// allowed). So the first call runs the padded plan four times: with zeros
// (its first run, which may still choose kernels: Mode::MaxAutotune times
// them), with floating arguments padded with +8, with -8, and with zeros
// again. The last three run the same kernels and sum in the same order, so
// a result whose real rows differ at all between them follows the padded
// rows and turns buckets off too (even a sum that zeros leave exact; a
// maximum over rows below 8, a minimum over rows above -8: padded with
// ones, a maximum over rows of 2s passed, and every later call with
// negative rows returned 0). Finite values rather than NaN: a causal
// attention multiplies the masked keys' values by 0, and 0 * NaN would look
// like mixing. Integer and bool arguments (token ids, positions, masks) are
// padded with zeros every time, and where no floating argument is padded
// the extra runs are skipped. The check tests data, it proves nothing (a
// maximum over rows above 8 passes it): buckets are for functions whose
// rows do not mix. A function
// that writes its arguments or captured tensors (a KV cache) is not run
// twice, so its rows are taken to be independent, as a batch of requests
// is; its results are still narrowed by the traced sizes, and a padded call
// of it that fails raises (and turns buckets off). Its first call at each
// size also traces it at the bucket's sizes (nothing runs) and compares
// where the two traces write into its arguments and captured tensors: a
// write into an argument that padding copies (which would never reach the
// caller), a written region that follows the padded size (the padded rows
// written into the next slots of a KV cache), or a write whose positions
// an index, mask or position operand chooses (index_copy_ at positions
// passed in: the padded rows' zero positions would write slot 0), turns
// buckets off before anything ran padded, and the call runs at its own
// sizes.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <vector>

#include "kiln/jit.h"

namespace kiln::jit {

struct Pristine;

class Buckets {
 public:
  // Runs arguments (padded or not) through the compiled function's cache;
  // `known`: the Known callback below has just said yes for these very
  // arguments, and nothing ran since (its entry may serve them unchecked).
  using Run = std::function<std::vector<Tensor>(const std::vector<IValue>&, bool known)>;
  // Says why buckets were turned off (the compiled function's recompile log).
  using Report = std::function<void(const std::string&)>;

  Buckets(const Options& options, Report report);

  // Whether calls are padded: buckets were given and not turned off.
  bool on() const;
  // Whether an entry's guards hold for these arguments (no new entry to build).
  using Known = std::function<bool(const std::vector<IValue>&)>;

  // The call's results, computed padded through `run`; nullopt when the call
  // is not padded (no dynamic dim, past the largest bucket, a bucket's size).
  // Sizes learned for an entry serve only arguments that `known` says reach
  // one: a new entry (a captured tensor replaced) learns them again.
  std::optional<std::vector<Tensor>> call(const std::vector<IValue>& args, boxed::Body body,
                                          const Run& run, const Known& known);
  // Forgets the results' sizes learned so far (a new entry may give others).
  void forget();

 private:
  // Per result: its sizes at the call's own sizes (nullopt: undefined).
  using Sizes = std::vector<std::optional<std::vector<int64_t>>>;

  // `args` with their dynamic dims padded to the bucket: zeros, or `fill`
  // in floating tensors (the first call's second padded run; `filled` says
  // whether one took it).
  std::vector<IValue> pad(const std::vector<IValue>& args, int64_t* size, int64_t* bucket,
                          double fill = 0, bool* filled = nullptr) const;
  // Why the function cannot run padded (Note [Rows along the padded dim]),
  // from its trace at the bucket's sizes, or "". `writes`: `own` writes the
  // caller's memory.
  std::string rows_at_bucket(const std::vector<IValue>& args, const std::vector<IValue>& padded,
                             const Pristine& own, boxed::Body body, bool writes);
  std::vector<Tensor> first_call(const std::vector<IValue>& args, const std::vector<IValue>& padded,
                                 const std::vector<int64_t>& key, boxed::Body body, const Run& run);
  // `results` of a padded call narrowed to `sizes`; raises kiln::Error (and
  // turns buckets off) where padding made a result smaller or of another rank.
  std::vector<Tensor> narrow(std::vector<Tensor> results, const Sizes& sizes);
  // Results that are views of a padded argument, made views of the caller's
  // argument itself (as unpadded calls return them), where they can be.
  std::vector<Tensor> onto_arguments(std::vector<Tensor> results, const std::vector<IValue>& args,
                                     const std::vector<IValue>& padded) const;
  void turn_off(const std::string& why);

  const Options& options_;
  Report report_;
  std::atomic<bool> off_{false};
  mutable std::shared_mutex mu_;
  std::map<std::vector<int64_t>, std::shared_ptr<const Sizes>>
      sizes_;  // by the arguments' description
};

}  // namespace kiln::jit
