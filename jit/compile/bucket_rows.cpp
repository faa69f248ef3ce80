// Whether a trace keeps the rows along a padded dim apart (Note [Rows along
// the padded dim]).

#include "jit/compile/bucket_rows.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "jit/record/decompose.h"
#include "kiln/dispatch.h"
#include "runtime/core/tensor_utils.h"

// GCC 12 warns falsely on std::string concatenation at -O3.
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"

namespace kiln::jit {
namespace {

using Marks = std::vector<bool>;  // per dim: its size follows the padded one

// Index-space points sampled per tensor past its corners.
constexpr int kRandomPoints = 32;
// Dims whose two ends are combined as corners (2^10 points); dims past them
// take one end or the other.
constexpr size_t kCornerDims = 10;

struct Geometry {
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
  bool operator==(const Geometry&) const = default;
};

Geometry geometry_of(const Tensor& t) {
  return {{t.sizes().begin(), t.sizes().end()},
          {t.strides().begin(), t.strides().end()},
          t.storage_offset()};
}

// How a buffer's elements are numbered: by the tensor that made it (an
// argument's stand-in, a node's fresh result), or by position where both
// traces read the same memory (a captured tensor).
struct Base {
  std::string role;  // "argument 0", "captured tensor 2", "buffer 5", "the number 2"
  bool flat = true;
  Geometry g;
};

// The index in `base` of the element at storage position `p`; false where
// none sits there. A base is dense or a slice of dense memory, so its dims
// taken by decreasing stride peel the position apart.
bool logical_index(const Base& base, int64_t p, std::vector<int64_t>* out) {
  if (!base.flat) return index_at_offset(base.g.sizes, base.g.strides, p - base.g.offset, out);
  out->assign(1, p);
  return true;
}

// The buffers of one trace, each with its role and base.
class Buffers {
 public:
  explicit Buffers(const Pristine& p) : p_(p) {
    for (size_t k = 0; k < p.stand_ins.size(); ++k)
      see(p.stand_ins[k], "argument " + std::to_string(k));
    for (const Node& n : p.nodes) {
      for (const IValue& v : n.args) {
        if (v.is_tensor()) see(v.to_tensor());
        if (v.is_tensor_list()) {
          for (const Tensor& t : v.to_tensor_list()) see(t);
        }
      }
      for (const Tensor& t : n.outputs) see(t);
    }
    for (const Tensor& t : p.outputs) see(t);
  }

  const Base& of(const Tensor& t) const { return by_storage_.at(t.impl()->storage().get()); }

 private:
  void see(const Tensor& t, std::string role = "") {
    if (!t.defined()) return;
    const StorageImpl* s = t.impl()->storage().get();
    if (by_storage_.count(s)) return;
    Base b;
    if (t.impl()->is_wrapped_number()) {
      // A number the function passed: the same role where its bytes agree.
      std::string bytes(static_cast<size_t>(s->nbytes()), '\0');
      if (s->data() && s->device().is_cpu()) {
        std::memcpy(bytes.data(), s->data(), bytes.size());
      } else {
        bytes = std::to_string(reinterpret_cast<uintptr_t>(s));  // not read: its own role
      }
      b.role = std::string("the number ") + dtype_name(t.dtype()) + ":" + bytes;
    } else if (!role.empty()) {
      b = {std::move(role), false, geometry_of(t)};
    } else if (p_.captured.count(s)) {
      // Both traces read the caller's tensors: the same storage is the same role.
      b.role = "captured memory " + std::to_string(reinterpret_cast<uintptr_t>(s));
    } else {
      b = {"buffer " + std::to_string(fresh_++), false, geometry_of(t)};
    }
    by_storage_.emplace(s, std::move(b));
  }

  const Pristine& p_;
  std::unordered_map<const StorageImpl*, Base> by_storage_;
  size_t fresh_ = 0;
};

bool same_value(const IValue& a, const IValue& b) {
  if (a.tag() != b.tag()) return false;
  if (a.is_int()) return a.to_int() == b.to_int();
  if (a.is_double()) {
    const double x = a.to_double(), y = b.to_double();
    return std::memcmp(&x, &y, sizeof x) == 0;
  }
  if (a.is_bool()) return a.to_bool() == b.to_bool();
  if (a.is_int_list()) return a.to_int_list() == b.to_int_list();
  if (a.is_double_list()) return a.to_double_list() == b.to_double_list();
  if (a.is_string()) return a.to_string() == b.to_string();
  if (a.is_dtype()) return a.to_dtype() == b.to_dtype();
  if (a.is_device()) return a.to_device() == b.to_device();
  return a.repr() == b.repr();  // Scalar, None
}

bool any_marked(const Marks& m) {
  return std::find(m.begin(), m.end(), true) != m.end();
}

bool marked(const Marks& m, int64_t d) {
  const auto n = static_cast<int64_t>(m.size());
  if (d < 0) d += n;
  return d >= 0 && d < n && m[static_cast<size_t>(d)];
}

// Ops that compute each element from the elements at its own index (after
// broadcasting) and that is_pointwise_op() does not list (extern kernels).
const std::unordered_set<std::string>& rowwise_ops() {
  static const std::unordered_set<std::string> ops = {
      "copy_",        "_to_copy", "clone",   "contiguous",  "where",       "masked_fill",
      "masked_fill_", "clamp",    "clamp_",  "nan_to_num",  "nan_to_num_", "round",
      "fill_",        "zero_",    "one_hot", "isnan",       "isinf",       "isfinite",
      "gelu",         "gelu_",    "elu",     "leaky_relu",  "hardtanh",    "hardsigmoid",
      "hardswish",    "softplus", "mish",    "log_sigmoid", "lerp",        "addcmul",
      "addcdiv",      "maximum",  "minimum", "pow"};
  return ops;
}

// Reductions, scans, sorts and softmaxes: each acts along the dims its `dim`
// (or `dims`) argument names, all of them when it names none.
const std::unordered_set<std::string>& along_dim_ops() {
  static const std::unordered_set<std::string> ops = {
      "sum",    "mean",    "prod",    "amax",        "amin",      "max",          "min",
      "argmax", "argmin",  "var",     "std",         "logsumexp", "all",          "any",
      "cumsum", "cumprod", "softmax", "log_softmax", "sort",      "argsort",      "topk",
      "norm",   "flip",    "roll",    "median",      "nansum",    "count_nonzero"};
  return ops;
}

// Factories whose values at a larger size begin with those at the smaller one.
const std::unordered_set<std::string>& prefix_factories() {
  static const std::unordered_set<std::string> ops = {"empty", "empty_strided", "zeros", "ones",
                                                      "full",  "arange",        "eye"};
  return ops;
}

const std::unordered_set<std::string>& random_ops() {
  static const std::unordered_set<std::string> ops = {
      "rand",        "randn",     "randint", "rand_like", "randn_like", "randint_like",
      "multinomial", "bernoulli", "normal",  "uniform_",  "normal_",    "randperm"};
  return ops;
}

// Walks the two traces side by side.
class Walk {
 public:
  Walk(const Pristine& own, const Pristine& at_bucket)
      : own_(own), bucket_(at_bucket), own_buffers_(own), bucket_buffers_(at_bucket) {}

  std::string run() {
    if (own_.nodes.size() != bucket_.nodes.size()) {
      return "its trace records " + std::to_string(own_.nodes.size()) +
             " ops at the call's sizes and " + std::to_string(bucket_.nodes.size()) +
             " at the bucket's";
    }
    for (size_t i = 0; i < own_.nodes.size(); ++i) {
      if (std::string why = node(i, own_.nodes[i], bucket_.nodes[i]); !why.empty()) return why;
    }
    if (own_.outputs.size() != bucket_.outputs.size()) {
      return "it returns " + std::to_string(own_.outputs.size()) +
             " results at the call's sizes and " + std::to_string(bucket_.outputs.size()) +
             " at the bucket's";
    }
    for (size_t i = 0; i < own_.outputs.size(); ++i) {
      Marks m;
      if (std::string why =
              compare(own_.outputs[i], bucket_.outputs[i], "result " + std::to_string(i), &m);
          !why.empty()) {
        return why;
      }
    }
    return "";
  }

 private:
  // One tensor the traces hold at the same place: `marks` gets its padded
  // dims; "" or why padding would change what it holds.
  std::string compare(const Tensor& a, const Tensor& b, const std::string& where, Marks* marks) {
    marks->clear();
    if (a.defined() != b.defined()) {
      return where + (a.defined() ? " has no value" : " has a value") + " at the bucket's sizes";
    }
    if (!a.defined()) return "";
    if (a.dtype() != b.dtype() || a.dim() != b.dim()) {
      return where + " is " + dtype_name(a.dtype()) + " of rank " + std::to_string(a.dim()) +
             " at the call's sizes and " + dtype_name(b.dtype()) + " of rank " +
             std::to_string(b.dim()) + " at the bucket's";
    }
    const Base& ba = own_buffers_.of(a);
    const Base& bb = bucket_buffers_.of(b);
    if (ba.role != bb.role) {
      return where + " is " + describe(ba) + " at the call's sizes and " + describe(bb) +
             " at the bucket's";
    }
    marks->assign(static_cast<size_t>(a.dim()), false);
    for (int64_t d = 0; d < a.dim(); ++d) {
      if (a.size(d) == b.size(d)) continue;
      if (b.size(d) < a.size(d)) {
        return where + " has size " + std::to_string(b.size(d)) + " in dim " + std::to_string(d) +
               " at the bucket's sizes and " + std::to_string(a.size(d)) + " at the call's";
      }
      (*marks)[static_cast<size_t>(d)] = true;
    }
    const Geometry ga = geometry_of(a), gb = geometry_of(b);
    const bool same_base = ba.flat == bb.flat && (ba.flat || ba.g == bb.g);
    if (ga == gb && same_base) return "";
    if (!same_elements(a, ga, ba, gb, bb)) {
      return where + " holds other elements of " + describe(ba) +
             " at the bucket's sizes (a view that picks rows from the end of the padded dim, "
             "or that interleaves it with another dim)";
    }
    return "";
  }

  // Whether every index inside `t`'s own sizes reaches the same element of
  // its base in both traces, and a real one: at the index space's corners and
  // at pseudo-random points.
  bool same_elements(const Tensor& t, const Geometry& ga, const Base& ba, const Geometry& gb,
                     const Base& bb) {
    const size_t n = ga.sizes.size();
    for (int64_t s : ga.sizes) {
      if (s == 0) return true;
    }
    std::vector<int64_t> idx(n, 0), la, lb;
    auto same = [&] {
      int64_t pa = ga.offset, pb = gb.offset;
      for (size_t k = 0; k < n; ++k) {
        pa += idx[k] * ga.strides[k];
        pb += idx[k] * gb.strides[k];
      }
      return logical_index(ba, pa, &la) && logical_index(bb, pb, &lb) && la == lb;
    };
    std::vector<size_t> wide;  // dims of more than one element
    for (size_t k = 0; k < n; ++k) {
      if (ga.sizes[k] > 1) wide.push_back(k);
    }
    const size_t corner_dims = std::min(wide.size(), kCornerDims);
    for (uint64_t c = 0; c < (uint64_t{1} << corner_dims); ++c) {
      for (size_t j = 0; j < wide.size(); ++j) {
        const bool high = j < corner_dims ? ((c >> j) & 1u) != 0 : ((c + j) & 1u) != 0;
        idx[wide[j]] = high ? ga.sizes[wide[j]] - 1 : 0;
      }
      if (!same()) return false;
    }
    uint64_t state = 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(t.numel());
    for (int r = 0; r < kRandomPoints; ++r) {
      for (size_t k = 0; k < n; ++k) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        idx[k] = static_cast<int64_t>((state >> 33) % static_cast<uint64_t>(ga.sizes[k]));
      }
      if (!same()) return false;
    }
    return true;
  }

  static std::string describe(const Base& b) {
    if (b.role.rfind("the number ", 0) == 0) return "a number";
    if (b.role.rfind("captured", 0) == 0) return "a captured tensor";
    return b.role;
  }

  std::string node(size_t i, const Node& a, const Node& b) {
    const std::string who = "op " + std::to_string(i) + " '" + a.op->name() + "'";
    if (a.op != b.op) {
      return "its trace records " + who + " at the call's sizes and '" + b.op->name() +
             "' there at the bucket's";
    }
    if (a.args.size() != b.args.size() || a.outputs.size() != b.outputs.size()) {
      return who + " takes other arguments at the bucket's sizes";
    }
    const auto& params = a.op->schema().arguments;
    args_.assign(a.args.size(), Marks{});
    lists_.assign(a.args.size(), std::vector<Marks>{});
    names_.assign(a.args.size(), std::string());
    node_ = &a;
    bool any_in = false;
    for (size_t k = 0; k < a.args.size(); ++k) {
      names_[k] = k < params.size() ? params[k].name : std::to_string(k);
      const std::string where = "argument '" + names_[k] + "' of " + who;
      const IValue &x = a.args[k], &y = b.args[k];
      if (x.tag() != y.tag()) return where + " is of another kind at the bucket's sizes";
      if (x.is_tensor()) {
        if (std::string why = compare(x.to_tensor(), y.to_tensor(), where, &args_[k]);
            !why.empty()) {
          return why;
        }
        any_in = any_in || any_marked(args_[k]);
      } else if (x.is_tensor_list()) {
        const auto &xs = x.to_tensor_list(), &ys = y.to_tensor_list();
        if (xs.size() != ys.size())
          return where + " is a list of another length at the bucket's sizes";
        lists_[k].resize(xs.size());
        for (size_t j = 0; j < xs.size(); ++j) {
          if (std::string why =
                  compare(xs[j], ys[j], where + "[" + std::to_string(j) + "]", &lists_[k][j]);
              !why.empty()) {
            return why;
          }
          any_in = any_in || any_marked(lists_[k][j]);
        }
      } else if (!same_value(x, y)) {
        if (!prefix_factories().count(a.op->schema().name)) {
          return where + " follows the padded size (" + x.repr() + " at the call's sizes, " +
                 y.repr() + " at the bucket's)";
        }
      }
    }
    bool any_out = false;
    for (size_t k = 0; k < a.outputs.size(); ++k) {
      Marks m;
      if (std::string why =
              compare(a.outputs[k], b.outputs[k], who + "'s result " + std::to_string(k), &m);
          !why.empty()) {
        return why;
      }
      any_out = any_out || any_marked(m);
    }
    if (!any_in && !any_out) return "";
    return rule(who, a, any_in);
  }

  // The marks of tensor argument `name` (null when it has none or is undefined).
  const Marks* arg(const std::string& name) const {
    for (size_t k = 0; k < names_.size(); ++k) {
      if (names_[k] == name && node_->args[k].is_tensor() && node_->args[k].to_tensor().defined()) {
        return &args_[k];
      }
    }
    return nullptr;
  }
  const IValue* value(const std::string& name) const {
    for (size_t k = 0; k < names_.size(); ++k) {
      if (names_[k] == name) return &node_->args[k];
    }
    return nullptr;
  }
  bool marked_arg(const std::string& name) const {
    const Marks* m = arg(name);
    return m && any_marked(*m);
  }
  // The dims a `dim` / `dims` argument names; every dim of `rank` when it names none.
  std::vector<int64_t> dims_of(const IValue* v, int64_t rank) const {
    std::vector<int64_t> dims;
    if (v && v->is_int()) dims.push_back(v->to_int());
    if (v && v->is_int_list()) dims = v->to_int_list();
    if (dims.empty()) {
      dims.resize(static_cast<size_t>(rank));
      std::iota(dims.begin(), dims.end(), int64_t{0});
    }
    return dims;
  }
  // The first tensor argument's marks (the op's input).
  const Marks& first() const {
    for (size_t k = 0; k < args_.size(); ++k) {
      if (node_->args[k].is_tensor() && node_->args[k].to_tensor().defined()) return args_[k];
    }
    static const Marks none;
    return none;
  }

  std::string rule(const std::string& who, const Node& n, bool any_in) const {
    const std::string& base = n.op->schema().name;
    const std::string& full = n.op->name();
    const std::string padded = " over a padded dim";
    if (random_ops().count(base)) return who + " draws random numbers, which padding would shift";
    if (base == "dropout") {
      const IValue* p = value("p");
      const IValue* train = value("train");
      if (train && train->is_bool() && train->to_bool() && p && p->is_double() &&
          p->to_double() > 0) {
        return who + " draws random numbers, which padding would shift";
      }
      return "";
    }
    if (!any_in) {
      // A result whose size follows the padded one from no padded input: a factory.
      if (prefix_factories().count(base)) return "";
      return who + " makes a tensor whose size follows the padded one";
    }
    if (full == "max.other" || full == "min.other" || is_pointwise_op(n.op) ||
        rowwise_ops().count(base)) {
      return "";
    }
    const Marks& in = first();
    const auto rank = static_cast<int64_t>(in.size());
    if (along_dim_ops().count(base)) {
      const IValue* d = value("dim");
      if (!d) d = value("dims");
      for (int64_t k : dims_of(d, rank)) {
        if (marked(in, k)) return who + " reduces, scans or sorts" + padded;
      }
      return "";
    }
    if (base == "layer_norm" || base == "rms_norm") {
      const IValue* shape = value("normalized_shape");
      const auto normalized =
          shape && shape->is_int_list() ? static_cast<int64_t>(shape->to_int_list().size()) : rank;
      for (int64_t k = rank - normalized; k < rank; ++k) {
        if (marked(in, k)) return who + " normalizes" + padded;
      }
      if (marked_arg("weight") || marked_arg("bias"))
        return "the weight or bias of " + who + " is padded";
      return "";
    }
    // Products: padding a contracted dim, or a weight, mixes rows.
    auto contracts = [&](const std::string& a, int64_t da, const std::string& b, int64_t db) {
      const Marks* ma = arg(a);
      const Marks* mb = arg(b);
      return (ma && marked(*ma, da)) || (mb && marked(*mb, mb->size() == 1 ? 0 : db));
    };
    if (base == "linear" || base == "linear_act") {
      if (marked(in, -1) || marked_arg("weight") || marked_arg("bias")) {
        return who + " multiplies" + padded;
      }
      return "";
    }
    if (base == "mm" || base == "matmul" || base == "mv") {
      const std::string other = base == "mm" ? "mat2" : base == "mv" ? "vec" : "other";
      if (contracts("self", -1, other, -2)) return who + " contracts a padded dim";
      return "";
    }
    if (base == "bmm")
      return contracts("self", 2, "mat2", 1) ? who + " contracts a padded dim" : "";
    if (base == "addmm" || base == "addmm_act") {
      if (contracts("mat1", 1, "mat2", 0) || marked_arg("mat2")) {
        return who + " contracts a padded dim";
      }
      return "";
    }
    if (base == "baddbmm") {
      return contracts("batch1", 2, "batch2", 1) ? who + " contracts a padded dim" : "";
    }
    if (base == "outer") return "";
    if (base == "embedding") return marked_arg("weight") ? who + " looks up a padded table" : "";
    // Gathers and scatters: along a padded dim the positions reach padded rows.
    if (base == "index_select" || base == "gather") {
      const IValue* d = value("dim");
      return d && d->is_int() && marked(in, d->to_int()) ? who + " gathers along a padded dim" : "";
    }
    if (base == "scatter" || base == "scatter_" || base == "scatter_add" ||
        base == "scatter_add_" || base == "scatter_reduce" || base == "scatter_reduce_" ||
        base == "index_add" || base == "index_add_" || base == "index_copy" ||
        base == "index_copy_") {
      const IValue* d = value("dim");
      if (!d || !d->is_int()) return who + " scatters" + padded;
      for (const char* name : {"self", "index", "src", "source"}) {
        const Marks* m = arg(name);
        if (m && marked(*m, d->to_int())) return who + " scatters along a padded dim";
      }
      return "";
    }
    if (base == "cat") {
      const IValue* d = value("dim");
      const int64_t dim = d && d->is_int() ? d->to_int() : 0;
      for (const auto& list : lists_) {
        for (const Marks& m : list) {
          if (marked(m, dim)) return who + " concatenates along a padded dim";
        }
      }
      return "";
    }
    if (base == "stack") return "";
    if (base == "tril" || base == "triu") {
      return marked(in, -1) || marked(in, -2) ? who + " masks by position" + padded : "";
    }
    if (base == "constant_pad_nd" || base == "pad" || base == "_pad_circular") {
      const IValue* pad = value("pad");
      if (!pad || !pad->is_int_list()) return who + " pads" + padded;
      const std::vector<int64_t>& p = pad->to_int_list();
      for (size_t j = 0; j + 1 < p.size(); j += 2) {
        const int64_t dim = rank - 1 - static_cast<int64_t>(j / 2);
        if ((p[j] != 0 || p[j + 1] != 0) && marked(in, dim)) return who + " pads a padded dim";
      }
      return "";
    }
    if (base == "repeat") {
      const IValue* r = value("repeats");
      if (!r || !r->is_int_list()) return who + " repeats" + padded;
      const std::vector<int64_t>& reps = r->to_int_list();
      const auto lead = static_cast<int64_t>(reps.size()) - rank;
      for (int64_t k = 0; k < rank; ++k) {
        if (marked(in, k) && reps[static_cast<size_t>(k + lead)] != 1) {
          return who + " repeats a padded dim";
        }
      }
      return "";
    }
    if (base == "scaled_dot_product_attention") return attention(who);
    if (base == "conv1d" || base == "conv2d" || base == "avg_pool1d" || base == "avg_pool2d" ||
        base == "interpolate") {
      // Batch rows are apart; channels and positions are mixed.
      for (int64_t k = 1; k < rank; ++k) {
        if (marked(in, k)) return who + " mixes a padded dim other than the batch";
      }
      if (marked_arg("weight") || marked_arg("bias"))
        return "the weight or bias of " + who + " is padded";
      return "";
    }
    return who + " is not known to keep the rows of a padded dim apart";
  }

  // Queries attend to keys: padded keys are seen unless the attention is
  // causal over one padded sequence (a real query's keys are real).
  std::string attention(const std::string& who) const {
    const Marks* q = arg("query");
    const Marks* k = arg("key");
    const Marks* v = arg("value");
    if (!q || !k || !v) return who + " attends" + " over a padded dim";
    if (marked(*q, -1) || marked(*k, -1) || marked(*v, -1))
      return who + " attends over padded features";
    if (marked_arg("attn_mask")) return "the mask of " + who + " is padded";
    const IValue* p = value("dropout_p");
    if (p && p->is_double() && p->to_double() > 0) {
      return who + " draws random numbers, which padding would shift";
    }
    if (!marked(*k, -2) && !marked(*v, -2)) return "";
    const IValue* causal = value("is_causal");
    const bool is_causal = causal && causal->is_bool() && causal->to_bool();
    const Tensor& query = node_->args[0].to_tensor();
    const Tensor& key = node_->args[1].to_tensor();
    if (is_causal && marked(*q, -2) && marked(*k, -2) && marked(*v, -2) &&
        query.size(-2) == key.size(-2)) {
      return "";
    }
    return who + " attends over padded keys";
  }

  const Pristine& own_;
  const Pristine& bucket_;
  Buffers own_buffers_, bucket_buffers_;
  // The node being judged: its arguments' names and marks.
  const Node* node_ = nullptr;
  std::vector<std::string> names_;
  std::vector<Marks> args_;
  std::vector<std::vector<Marks>> lists_;
};

}  // namespace

std::string padded_rows_mix(const Pristine& own, const Pristine& at_bucket) {
  return Walk(own, at_bucket).run();
}

}  // namespace kiln::jit
