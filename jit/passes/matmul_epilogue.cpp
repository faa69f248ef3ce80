#include "jit/passes/matmul_epilogue.h"

#include <algorithm>
#include <unordered_map>

#include "jit/passes/dead_code.h"
#include "kiln/logging.h"
#include "runtime/core/tensor_utils.h"

namespace kiln::jit {
namespace {

// Note [Norm prologues]
// On CUDA a LayerNorm or RMSNorm over the last dim whose output only a
// linear reads becomes that product's prologue when the rows are few
// (kNormPrologueRows: a decode step's, or one token's): the skinny kernel
// normalizes x on the fly (Note [Skinny matmul kernel]), each block
// recomputing the rows' statistics from L2 (a row of 768 halves is 1.5 KB),
// and no normalized tensor is written or read. Products the skinny kernel
// does not take run the norm as its own kernel first, as before. The fused
// node reads x, the norm's weight and bias where the product was: they must
// be final there.
constexpr int64_t kNormPrologueRows = 16;

bool is_one(const IValue& v) {
  return v.is_number() && v.to_scalar().to<double>() == 1.0;
}

// The activation `n` applies to its first argument, or null when it is none
// the epilogue can take.
const char* activation_of(const Node& n) {
  const std::string& name = n.op->name();
  if (name == "relu") return "relu";
  if (name == "gelu" && n.args.size() >= 2 && n.args[1].is_string() &&
      n.args[1].to_string() == "tanh") {
    return "gelu_tanh";
  }
  return nullptr;
}

const Tensor* defined_tensor(const IValue& v) {
  return v.is_tensor() && v.to_tensor().defined() ? &v.to_tensor() : nullptr;
}

// MatmulT: matmul(x, w.t()) with w a row-major [n, k] weight (GPT-2's tied
// LM head); it takes a norm prologue only, as linear_act(x, w).
enum class Product { None, Addmm, Linear, MatmulT };

// `t` is w.t() for a row-major 2-D w.
bool is_transposed_weight(const IValue& v) {
  const Tensor* t = v.is_tensor() && v.to_tensor().defined() ? &v.to_tensor() : nullptr;
  return t && t->dim() == 2 && t->size(0) > 1 && t->size(1) > 1 && t->stride(0) == 1 &&
         t->stride(1) == t->size(0) && t->impl()->storage();
}

// Which product `n` is, when it is one whose epilogue can absorb a reader.
Product product_kind(const Node& n, const OperatorEntry* addmm, const OperatorEntry* linear,
                     const OperatorEntry* matmul) {
  if (n.outputs.size() != 1 || !n.written.empty()) return Product::None;
  if (n.op == addmm && n.args.size() == 5 && defined_tensor(n.args[0]) && is_one(n.args[3]) &&
      is_one(n.args[4])) {
    return Product::Addmm;
  }
  if (n.op == linear && n.args.size() == 3) return Product::Linear;
  if (n.op == matmul && n.args.size() == 2 && n.device.is_cuda() && n.args[0].is_tensor() &&
      n.args[0].to_tensor().defined() && n.args[0].to_tensor().dim() >= 2 &&
      is_transposed_weight(n.args[1])) {
    return Product::MatmulT;
  }
  return Product::None;
}

// Who touches one storage of interest (a product's output, or an
// activation's output that may feed a residual add).
struct Uses {
  std::vector<size_t> readers;  // nodes reading it, one entry per argument
  int writers = 0;
  // Trace handles per TensorImpl on the storage (few: the output and its views).
  std::vector<std::pair<const TensorImpl*, int>> handles;
};

class EpilogueFolder {
 public:
  explicit EpilogueFolder(std::vector<Node>& nodes) : nodes_(nodes) {}

  size_t run() {
    static const OperatorEntry* addmm = &find_op("addmm").entry();
    static const OperatorEntry* linear = &find_op("linear").entry();
    static const OperatorEntry* matmul = &find_op("matmul").entry();
    kinds_.assign(nodes_.size(), Product::None);
    for (size_t i = 0; i < nodes_.size(); ++i) {
      kinds_[i] = product_kind(nodes_[i], addmm, linear, matmul);
      if (kinds_[i] != Product::None) add_candidate(nodes_[i].outputs[0]);
    }
    if (candidate_.empty()) return 0;  // most traces hold no product
    // An activation of a product may be followed by a residual add: its
    // output is a candidate too. So is a CUDA norm's output (a prologue).
    static const OperatorEntry* layer_norm = &find_op("layer_norm").entry();
    static const OperatorEntry* rms_norm = &find_op("rms_norm").entry();
    for (size_t i = 0; i < nodes_.size(); ++i) {
      const Node& n = nodes_[i];
      if (n.outputs.size() == 1 && activation_of(n) && !n.args.empty() && n.args[0].is_tensor() &&
          uses_of(n.args[0].to_tensor())) {
        add_candidate(n.outputs[0]);
      }
      if ((n.op == layer_norm || n.op == rms_norm) && n.device.is_cuda() && n.outputs.size() == 1 &&
          n.outputs[0].defined() && n.outputs[0].impl()->storage()) {
        add_candidate(n.outputs[0]);
        norm_nodes_.emplace(n.outputs[0].impl(), i);
      }
    }
    count_uses();
    erased_.assign(nodes_.size(), false);
    size_t absorbed = 0;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (!erased_[i] && kinds_[i] != Product::None) absorbed += fold(i);
    }
    if (absorbed > 0) drop_erased(nodes_, erased_);
    return absorbed;
  }

 private:
  void add_candidate(const Tensor& y) {
    if (!y.defined() || !y.impl()->storage()) return;
    if (candidate_.emplace(y.impl()->storage().get(), uses_.size()).second) uses_.emplace_back();
  }

  Uses* uses_of(const Tensor& t) {
    if (!t.defined() || !t.impl()->storage()) return nullptr;
    auto it = candidate_.find(t.impl()->storage().get());
    return it == candidate_.end() ? nullptr : &uses_[it->second];
  }

  static void count_handle(Uses* u, const TensorImpl* impl) {
    for (auto& [i, c] : u->handles) {
      if (i == impl) {
        ++c;
        return;
      }
    }
    u->handles.emplace_back(impl, 1);
  }

  // Only the candidates' storages matter: count who touches those alone (the
  // rule of external_storages() restricted to them), rather than indexing
  // every storage of the trace on every flush.
  void count_uses() {
    for (size_t i = 0; i < nodes_.size(); ++i) {
      for_each_input(nodes_[i], [&](const Tensor& t) {
        if (Uses* u = uses_of(t)) {
          u->readers.push_back(i);
          count_handle(u, t.impl());
        }
      });
      for (const Tensor& t : nodes_[i].outputs) {
        if (Uses* u = uses_of(t)) count_handle(u, t.impl());
      }
      for (int w : nodes_[i].written) {
        if (!nodes_[i].args[w].is_tensor()) continue;
        if (Uses* u = uses_of(nodes_[i].args[w].to_tensor())) u->writers++;
      }
    }
  }

  // Held outside the trace: a handle the trace does not own, or a view made outside.
  static bool external(const StorageImpl* s, const Uses& u) {
    for (const auto& [impl, c] : u.handles) {
      if (impl->use_count() > c) return true;
    }
    return s->use_count() > static_cast<int32_t>(u.handles.size());
  }

  // The one node reading `y` (through `y` itself), when nothing else sees y.
  Node* sole_reader(const Tensor& y, size_t* index) {
    Uses* u = uses_of(y);
    if (!u || u->writers > 0 || u->readers.size() != 1) return nullptr;
    if (external(y.impl()->storage().get(), *u)) return nullptr;
    const size_t j = u->readers[0];
    if (erased_[j] || nodes_[j].outputs.size() != 1 || !nodes_[j].written.empty()) return nullptr;
    *index = j;
    return &nodes_[j];
  }

  // True when no node in (from, to) writes `t`'s storage: its value at `from`
  // is the one the node at `to` reads.
  bool final_between(const Tensor& t, size_t from, size_t to) const {
    const StorageImpl* s = t.impl()->storage().get();
    auto same = [&](const Tensor& x) {
      return x.defined() && x.impl()->storage() && x.impl()->storage().get() == s;
    };
    for (size_t k = from + 1; k < to; ++k) {
      for (const Tensor& o : nodes_[k].outputs) {
        if (same(o)) return false;
      }
      for (int w : nodes_[k].written) {
        if (nodes_[k].args[w].is_tensor() && same(nodes_[k].args[w].to_tensor())) return false;
      }
    }
    return true;
  }

  // The residual of `add` when it is y + r or r + y with alpha 1 and a result
  // of y's shape and dtype (r then has them too).
  static const Tensor* residual_of(const Node& add, const Tensor& y) {
    static const OperatorEntry* add_op = &find_op("add.Tensor").entry();
    if (add.op != add_op || add.args.size() != 3 || !is_one(add.args[2])) return nullptr;
    const Tensor* a = defined_tensor(add.args[0]);
    const Tensor* b = defined_tensor(add.args[1]);
    if (!a || !b) return nullptr;
    const Tensor* r = a->is_same(y) ? b : b->is_same(y) ? a : nullptr;
    if (!r || r->is_same(y) || !r->impl()->storage()) return nullptr;
    if (r->impl()->storage().get() == y.impl()->storage().get()) return nullptr;
    const Tensor& out = add.outputs[0];
    if (r->dtype() != y.dtype() || out.dtype() != y.dtype()) return nullptr;
    if (!(r->sizes() == y.sizes()) || !(out.sizes() == y.sizes())) return nullptr;
    return r;
  }

  // The norm a linear's input comes from, when it can be the product's
  // prologue (Note [Norm prologues]).
  struct NormPrologue {
    size_t node = 0;
    const char* kind = nullptr;  // "layer_norm" or "rms_norm"
    IValue weight, bias;
    double eps = 0;
  };
  bool norm_prologue(size_t i, NormPrologue* out) {
    static const OperatorEntry* layer_norm = &find_op("layer_norm").entry();
    const Node& p = nodes_[i];
    if ((kinds_[i] != Product::Linear && kinds_[i] != Product::MatmulT) || !p.device.is_cuda() ||
        !p.args[0].is_tensor()) {
      return false;
    }
    const Tensor& y = p.args[0].to_tensor();
    if (!y.defined()) return false;
    auto it = norm_nodes_.find(y.impl());
    if (it == norm_nodes_.end() || it->second >= i || erased_[it->second]) return false;
    size_t reader = 0;
    if (!sole_reader(y, &reader) || reader != i) return false;
    const Node& n = nodes_[it->second];
    if (!n.written.empty() || !n.args[0].is_tensor() || !n.args[1].is_int_list()) return false;
    const Tensor& x = n.args[0].to_tensor();
    if (!x.defined() || x.dim() < 1) return false;
    const int64_t k = x.size(-1);
    const std::vector<int64_t> shape = n.args[1].to_int_list();
    if (shape.size() != 1 || shape[0] != k || k == 0) return false;
    if (x.numel() / k > kNormPrologueRows) return false;
    const bool layer = n.op == layer_norm;
    const Tensor* w = defined_tensor(n.args[2]);
    const Tensor* b = layer ? defined_tensor(n.args[3]) : nullptr;
    // rms_norm's weight multiplies with type promotion: only x's dtype keeps the result's.
    if (w && w->dtype() != x.dtype()) return false;
    for (const Tensor* t : {&x, w, b}) {
      if (t && !final_between(*t, it->second, i)) return false;
    }
    out->node = it->second;
    out->kind = layer ? "layer_norm" : "rms_norm";
    out->weight = w ? IValue(*w) : IValue();
    out->bias = b ? IValue(*b) : IValue();
    const IValue& eps = n.args[layer ? 4 : 3];
    out->eps = eps.is_none() ? machine_epsilon(x.dtype()) : eps.to_double();
    return true;
  }

  // matmul(norm(x), w.t()) -> linear_act(x, w, norm=...): the norm only.
  size_t fold_matmul_t(size_t i) {
    static const OperatorEntry* linear_act = &find_op("linear_act").entry();
    NormPrologue norm;
    if (!norm_prologue(i, &norm)) return 0;
    Node& p = nodes_[i];
    const Tensor& wt = p.args[1].to_tensor();
    Tensor w =
        make_view(wt, {wt.size(1), wt.size(0)}, {wt.stride(1), wt.stride(0)}, wt.storage_offset());
    KILN_LOG(Fusion, "matmul epilogue: matmul by a transposed weight absorbs ", norm.kind,
             " as its prologue");
    p.args = {nodes_[norm.node].args[0],
              IValue(std::move(w)),
              IValue(),
              IValue(std::string("none")),
              IValue(),
              IValue(std::string(norm.kind)),
              norm.weight,
              norm.bias,
              IValue(norm.eps)};
    p.op = linear_act;
    erased_[norm.node] = true;
    return 1;
  }

  // Absorbs what follows product i; returns how many nodes it absorbed.
  // Tensors are looked at through the nodes' own handles, never copied, so
  // that the use counts external() reads stay the trace's.
  size_t fold(size_t i) {
    static const OperatorEntry* addmm_act = &find_op("addmm_act").entry();
    static const OperatorEntry* linear_act = &find_op("linear_act").entry();
    Node& p = nodes_[i];
    if (!p.device.is_cuda()) return 0;  // nothing folds on the CPU (matmul_epilogue.h)
    if (kinds_[i] == Product::MatmulT) return fold_matmul_t(i);
    const bool is_linear = kinds_[i] == Product::Linear;
    const char* act = "none";
    const Tensor* residual = nullptr;
    std::vector<size_t> absorbed;
    size_t last = i;  // the node whose output the next absorbed node reads
    while (!residual) {
      const Tensor& y = nodes_[last].outputs[0];
      size_t j = 0;
      Node* r = sole_reader(y, &j);
      if (!r) break;
      const char* a = activation_of(*r);
      if (a && absorbed.empty() && r->args[0].is_tensor() && r->args[0].to_tensor().is_same(y)) {
        act = a;
      } else if (const Tensor* res = residual_of(*r, y);
                 res && is_linear && final_between(*res, i, j)) {
        residual = res;
      } else {
        break;
      }
      KILN_LOG(Fusion, "matmul epilogue: ", p.op->name(), " absorbs ", r->op->name(),
               residual ? " as its residual" : "");
      absorbed.push_back(j);
      last = j;
    }
    NormPrologue norm;
    const bool has_norm = norm_prologue(i, &norm);
    if (absorbed.empty() && !has_norm) return 0;
    if (has_norm) {
      KILN_LOG(Fusion, "matmul epilogue: ", p.op->name(), " absorbs ", norm.kind,
               " as its prologue");
    }
    // The fused node takes the product's place, so its operands are read when
    // they were before (a write between the two nodes cannot slip in), and
    // produces the last absorbed node's output, which no node reads before it.
    Stack args;
    if (is_linear) {
      const IValue input = has_norm ? nodes_[norm.node].args[0] : p.args[0];
      args = {input,
              p.args[1],
              p.args[2],
              IValue(std::string(act)),
              residual ? IValue(*residual) : IValue(),
              IValue(std::string(has_norm ? norm.kind : "none")),
              norm.weight,
              norm.bias,
              IValue(norm.eps)};
      p.op = linear_act;
    } else {
      args = {p.args[0], p.args[1], p.args[2], IValue(std::string(act))};
      p.op = addmm_act;
    }
    p.args = std::move(args);
    if (!absorbed.empty()) {
      p.outputs = std::move(nodes_[last].outputs);
      p.device = nodes_[last].device;
    }
    if (has_norm) absorbed.push_back(norm.node);
    for (size_t j : absorbed) erased_[j] = true;
    return absorbed.size();
  }

  std::vector<Node>& nodes_;
  std::unordered_map<const TensorImpl*, size_t> norm_nodes_;  // CUDA norm output -> its node
  std::vector<Product> kinds_;
  std::vector<bool> erased_;
  std::unordered_map<const StorageImpl*, size_t> candidate_;  // storage -> index in uses_
  std::vector<Uses> uses_;
};

}  // namespace

size_t fuse_matmul_epilogues(std::vector<Node>& nodes) {
  return EpilogueFolder(nodes).run();
}

}  // namespace kiln::jit
