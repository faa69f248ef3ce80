#include "jit/passes/cse.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "jit/passes/dead_code.h"
#include "jit/record/decompose.h"
#include "jit/record/trace_buffer.h"
#include "kiln/logging.h"
#include "runtime/core/thread_cache.h"

namespace kiln::jit {
namespace {

// Two calls whose errors name different ops (Note [Composite ops name
// themselves]) stay apart: the kept one's error would name the other's op.
bool same_renames(const Node& a, const Node& b) {
  if (a.renames.size() != b.renames.size()) return false;
  for (size_t i = 0; i < a.renames.size(); ++i) {
    if (a.renames[i].op != b.renames[i].op || a.renames[i].inner != b.renames[i].inner) {
      return false;
    }
  }
  return true;
}

StorageImpl* storage_of(const Tensor& t) {
  return t.impl()->storage().get();
}

// Ops whose result is not a function of their arguments.
bool is_nondeterministic(const FunctionSchema& s) {
  const std::string& n = s.name;
  return draws_random(s) || n.compare(0, 5, "empty") == 0 || n.compare(0, 9, "new_empty") == 0;
}

// What CSE needs to know of an op, looked up once per run.
struct OpInfo {
  bool pure = false;     // deterministic, functional, kiln's own
  int dropout_arg = -1;  // "dropout_p": nonzero makes a call random
};

OpInfo op_info(const OperatorEntry& op) {
  const FunctionSchema& s = op.schema();
  OpInfo info;
  info.pure = s.ns == "kiln" && !s.is_mutable() && !is_nondeterministic(s);
  info.dropout_arg = s.argument_index("dropout_p");
  return info;
}

bool has_dropout(const Node& n, int arg) {
  if (arg < 0 || static_cast<size_t>(arg) >= n.args.size()) return false;
  const IValue& v = n.args[arg];
  return v.is_double() ? v.to_double() != 0.0 : !v.is_none();
}

// A wrapped number (`x * 2.0`) whose value can be read here: compared by value.
bool by_value(const Tensor& t) {
  return t.impl()->is_wrapped_number() && !t.is_pending() && t.impl()->has_storage() &&
         t.device().is_cpu();
}

// Hashes what makes two calls equal, a word at a time; equal calls hash equal.
class Hasher {
 public:
  template <class T>
  void raw(const T& v) {
    static_assert(sizeof(T) <= sizeof(uint64_t));
    uint64_t w = 0;
    std::memcpy(&w, &v, sizeof(T));
    word(w);
  }
  void ints(IntArrayRef v) {
    raw(v.size());
    for (int64_t x : v) raw(x);
  }

  void tensor(const Tensor& t) {
    if (!t.defined()) return raw('U');
    if (by_value(t)) {
      raw(t.dtype());
      uint64_t w = 0;
      std::memcpy(&w, t.impl()->data(), std::min(t.element_size(), sizeof(w)));
      return word(w);
    }
    raw(t.impl()->storage().get());
    raw(t.storage_offset());
    ints(t.sizes());
  }

  void value(const IValue& v) {
    raw(v.tag());
    switch (v.tag()) {
      case IValue::Tag::Tensor:
        return tensor(v.to_tensor());
      case IValue::Tag::Int:
        return raw(v.to_int());
      case IValue::Tag::Double:
        return raw(v.to_double());
      case IValue::Tag::Bool:
        return raw(v.to_bool());
      case IValue::Tag::Scalar:
        return raw(v.to_scalar().to_double());
      case IValue::Tag::IntList:
        return ints(v.to_int_list());
      case IValue::Tag::TensorList:
        for (const Tensor& t : v.to_tensor_list()) tensor(t);
        return;
      default:
        return;  // rarer kinds: compared exactly by same_value()
    }
  }

  uint64_t get() const { return h_; }

 private:
  void word(uint64_t w) {
    h_ = (h_ ^ w) * 0x9e3779b97f4a7c15ull;
    h_ ^= h_ >> 29;
  }
  uint64_t h_ = 0xcbf29ce484222325ull;
};

template <class T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;  // doubles by bits: -0.0 and NaNs stay apart
}

bool same_tensor(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  if (by_value(a) || by_value(b)) {
    return by_value(a) && by_value(b) && a.dtype() == b.dtype() &&
           std::memcmp(a.impl()->data(), b.impl()->data(), a.element_size()) == 0;
  }
  return a.impl()->storage().get() == b.impl()->storage().get() && a.dtype() == b.dtype() &&
         a.storage_offset() == b.storage_offset() && a.sizes() == b.sizes() &&
         a.strides() == b.strides() &&
         a.impl()->is_wrapped_number() == b.impl()->is_wrapped_number();
}

bool same_value(const IValue& a, const IValue& b) {
  if (a.tag() != b.tag()) return false;
  switch (a.tag()) {
    case IValue::Tag::None:
      return true;
    case IValue::Tag::Tensor:
      return same_tensor(a.to_tensor(), b.to_tensor());
    case IValue::Tag::Int:
      return a.to_int() == b.to_int();
    case IValue::Tag::Double:
      return same_bits(a.to_double(), b.to_double());
    case IValue::Tag::Bool:
      return a.to_bool() == b.to_bool();
    case IValue::Tag::Scalar: {
      Scalar x = a.to_scalar(), y = b.to_scalar();
      if (x.kind() != y.kind()) return false;
      return x.is_floating_point() ? same_bits(x.to_double(), y.to_double())
                                   : x.to_int() == y.to_int();
    }
    case IValue::Tag::String:
      return a.to_string() == b.to_string();
    case IValue::Tag::IntList:
      return a.to_int_list() == b.to_int_list();
    case IValue::Tag::DoubleList: {
      const auto &x = a.to_double_list(), &y = b.to_double_list();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!same_bits(x[i], y[i])) return false;
      }
      return true;
    }
    case IValue::Tag::TensorList: {
      const auto &x = a.to_tensor_list(), &y = b.to_tensor_list();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!same_tensor(x[i], y[i])) return false;
      }
      return true;
    }
    case IValue::Tag::DType:
      return a.to_dtype() == b.to_dtype();
    case IValue::Tag::Device:
      return a.to_device() == b.to_device();
  }
  return false;
}

bool same_geometry(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.device() == b.device() && a.sizes() == b.sizes() &&
         a.strides() == b.strides() && a.storage_offset() == b.storage_offset() &&
         storage_of(a)->nbytes() == storage_of(b)->nbytes();
}

// `t`'s geometry over `target`'s storage.
Tensor rebase(const Tensor& t, const Tensor& target) {
  auto impl = IntrusivePtr<TensorImpl>::make(target.impl()->storage(), t.dtype(), t.device(),
                                             t.sizes(), t.strides(), t.storage_offset());
  impl->set_wrapped_number(t.impl()->is_wrapped_number());
  return Tensor(std::move(impl));
}

}  // namespace

CseResult eliminate_common_subexpressions(std::vector<Node>& nodes, const std::vector<size_t>& live,
                                          const std::unordered_set<const StorageImpl*>& external) {
  CseResult result;
  if (live.size() < 2) return result;
  // Storages some live node writes through an argument: their outputs never merge.
  std::unordered_set<const StorageImpl*> written;
  for (size_t i : live) {
    for (int w : nodes[i].written) {
      if (nodes[i].args[w].is_tensor()) written.insert(storage_of(nodes[i].args[w].to_tensor()));
    }
  }
  // Position (in `live`) of the last write to each storage so far.
  std::unordered_map<const StorageImpl*, size_t> last_write;
  std::unordered_map<const StorageImpl*, Tensor> redirect;  // merged output -> kept output
  std::unordered_map<uint64_t, std::vector<size_t>> seen;   // call hash -> positions in `live`
  seen.reserve(live.size());
  // Per op, kept across runs: the registry outlives every trace. At thread
  // exit the cache may be gone (Note [Thread caches at thread exit]).
  using OpInfos = std::unordered_map<const OperatorEntry*, OpInfo>;
  OpInfos uncached;
  OpInfos* cached = ThreadCache<OpInfos, struct OpInfosTag>::get();
  OpInfos& ops = cached ? *cached : uncached;
  const OperatorEntry* copy_op = nullptr;

  auto redirected = [&](const Tensor& t, Tensor* out) {
    if (!t.defined() || !t.impl()->has_storage()) return false;
    if (redirect.empty()) return false;
    auto it = redirect.find(storage_of(t));
    if (it == redirect.end()) return false;
    *out = rebase(t, it->second);
    return true;
  };

  std::vector<const StorageImpl*> inputs;
  for (size_t pos = 0; pos < live.size(); ++pos) {
    Node& n = nodes[live[pos]];
    // Consumers of merged nodes read the kept outputs.
    for (IValue& v : n.args) {
      Tensor r;
      if (v.is_tensor()) {
        if (redirected(v.to_tensor(), &r)) v = IValue(std::move(r));
      } else if (v.is_tensor_list()) {
        std::vector<Tensor> list = v.to_tensor_list();
        bool changed = false;
        for (Tensor& t : list) {
          if (redirected(t, &r)) {
            t = std::move(r);
            changed = true;
          }
        }
        if (changed) v = IValue(std::move(list));
      }
    }

    auto info = ops.find(n.op);
    if (info == ops.end()) info = ops.emplace(n.op, op_info(*n.op)).first;
    bool eligible = n.written.empty() && !n.outputs.empty() && info->second.pure &&
                    !has_dropout(n, info->second.dropout_arg);
    if (eligible) {
      inputs.clear();
      for_each_input(n, [&](const Tensor& t) {
        if (t.defined() && t.impl()->has_storage()) inputs.push_back(storage_of(t));
      });
      for (const Tensor& o : n.outputs) {
        eligible = eligible && o.defined() && o.impl()->has_storage() &&
                   std::find(inputs.begin(), inputs.end(), storage_of(o)) == inputs.end() &&
                   !written.count(storage_of(o));
      }
    }
    if (eligible) {
      Hasher h;
      h.raw(n.op);
      h.raw(n.device.type());
      h.raw(n.device.index());
      for (const IValue& v : n.args) h.value(v);
      std::vector<size_t>& candidates = seen[h.get()];
      // The earliest equal call that no write separates from this one.
      const Node* kept = nullptr;
      for (size_t c : candidates) {
        const Node& k = nodes[live[c]];
        bool same = k.op == n.op && k.device == n.device && k.args.size() == n.args.size() &&
                    k.outputs.size() == n.outputs.size() && same_renames(k, n);
        for (size_t i = 0; same && i < n.args.size(); ++i) same = same_value(k.args[i], n.args[i]);
        for (const StorageImpl* s : inputs) {
          auto w = last_write.find(s);
          same = same && (w == last_write.end() || w->second < c);
        }
        for (size_t i = 0; same && i < n.outputs.size(); ++i) {
          same = same_geometry(k.outputs[i], n.outputs[i]);
        }
        if (same) {
          kept = &k;
          break;
        }
      }
      bool held = false;
      for (const Tensor& o : n.outputs) held = held || external.count(storage_of(o));
      // A user-held extern becomes a copy; a node with several outputs cannot.
      bool to_copy = kept && held && !find_decomposition(n);
      if (kept && !(to_copy && n.outputs.size() != 1)) {
        for (size_t k = 0; k < n.outputs.size(); ++k) {
          redirect[storage_of(n.outputs[k])] = kept->outputs[k];
        }
        ++result.merged;
        KILN_LOG(Fusion, "cse: ", n.op->name(), " (node ", n.id, ") reuses node ", kept->id,
                 held ? (to_copy ? "; its output is held outside: copied"
                                 : "; its output is held outside: still computed")
                      : "");
        if (to_copy) {
          if (!copy_op) copy_op = &find_op("copy_").entry();
          Tensor dst = n.outputs[0];
          Node copy;
          copy.op = copy_op;
          copy.args = {IValue(dst), IValue(kept->outputs[0]), IValue(false)};
          copy.outputs = {dst};
          copy.written = {0};
          copy.device = n.device;
          copy.id = n.id;
          n = std::move(copy);
          ++result.copies;
        }
        continue;
      }
      candidates.push_back(pos);
    }
    for (int w : n.written) {
      if (n.args[w].is_tensor()) last_write[storage_of(n.args[w].to_tensor())] = pos;
    }
  }
  return result;
}

}  // namespace kiln::jit
