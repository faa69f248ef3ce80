#include "jit/passes/cse.h"

#include <cstring>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "jit/decompose.h"
#include "jit/passes/dead_code.h"
#include "kiln/logging.h"

namespace kiln::jit {
namespace {

StorageImpl* storage_of(const Tensor& t) {
  return t.impl()->storage().get();
}

// Ops whose result is not a function of their arguments.
bool is_nondeterministic(const FunctionSchema& s) {
  const std::string& n = s.name;
  for (std::string_view prefix :
       {"rand", "bernoulli", "dropout", "native_dropout", "normal", "uniform", "multinomial",
        "exponential", "poisson", "empty", "new_empty"}) {
    if (n.compare(0, prefix.size(), prefix) == 0) return true;
  }
  return false;
}

bool has_dropout(const Node& n) {
  int i = n.op->schema().argument_index("dropout_p");
  if (i < 0 || static_cast<size_t>(i) >= n.args.size()) return false;
  const IValue& v = n.args[i];
  return v.is_double() ? v.to_double() != 0.0 : !v.is_none();
}

// Serializes what makes two calls equal into `key`.
class KeyWriter {
 public:
  explicit KeyWriter(const std::unordered_map<const StorageImpl*, uint64_t>& epoch)
      : epoch_(epoch) {}

  template <class T>
  void raw(const T& v) {
    key_.append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  void ints(IntArrayRef v) {
    raw(v.size());
    for (int64_t x : v) raw(x);
  }

  void tensor(const Tensor& t) {
    if (!t.defined()) {
      key_ += 'U';
      return;
    }
    if (t.impl()->is_wrapped_number() && !t.is_pending() && t.impl()->has_storage() &&
        t.device().is_cpu()) {
      key_ += 'W';
      raw(t.dtype());
      key_.append(static_cast<const char*>(t.impl()->data()), t.element_size());
      return;
    }
    key_ += 'T';
    const StorageImpl* s = storage_of(t);
    raw(s);
    auto it = epoch_.find(s);
    raw(it == epoch_.end() ? uint64_t{0} : it->second);
    raw(t.dtype());
    raw(t.storage_offset());
    ints(t.sizes());
    ints(t.strides());
  }

  void value(const IValue& v) {
    raw(v.tag());
    switch (v.tag()) {
      case IValue::Tag::None:
        break;
      case IValue::Tag::Tensor:
        tensor(v.to_tensor());
        break;
      case IValue::Tag::Int:
        raw(v.to_int());
        break;
      case IValue::Tag::Double:
        raw(v.to_double());  // by bits: -0.0 and NaN payloads stay apart, which is safe
        break;
      case IValue::Tag::Bool:
        raw(v.to_bool());
        break;
      case IValue::Tag::Scalar: {
        Scalar s = v.to_scalar();
        raw(s.kind());
        if (s.is_floating_point()) {
          raw(s.to_double());
        } else {
          raw(s.to_int());
        }
        break;
      }
      case IValue::Tag::String:
        raw(v.to_string().size());
        key_ += v.to_string();
        break;
      case IValue::Tag::IntList:
        ints(v.to_int_list());
        break;
      case IValue::Tag::DoubleList:
        raw(v.to_double_list().size());
        for (double d : v.to_double_list()) raw(d);
        break;
      case IValue::Tag::TensorList:
        raw(v.to_tensor_list().size());
        for (const Tensor& t : v.to_tensor_list()) tensor(t);
        break;
      case IValue::Tag::DType:
        raw(v.to_dtype());
        break;
      case IValue::Tag::Device:
        raw(v.to_device().type());
        raw(v.to_device().index());
        break;
    }
  }

  std::string take() { return std::move(key_); }

 private:
  const std::unordered_map<const StorageImpl*, uint64_t>& epoch_;
  std::string key_;
};

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
  std::unordered_map<const StorageImpl*, uint64_t> epoch;   // writes seen so far
  std::unordered_map<const StorageImpl*, Tensor> redirect;  // merged output -> kept output
  std::unordered_map<std::string, size_t> first;            // key -> earliest node
  const OperatorEntry* copy_op = nullptr;

  auto redirected = [&](const Tensor& t, Tensor* out) {
    if (!t.defined() || !t.impl()->has_storage()) return false;
    auto it = redirect.find(storage_of(t));
    if (it == redirect.end()) return false;
    *out = rebase(t, it->second);
    return true;
  };

  for (size_t idx : live) {
    Node& n = nodes[idx];
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

    const FunctionSchema& schema = n.op->schema();
    bool eligible = n.written.empty() && !n.outputs.empty() && schema.ns == "kiln" &&
                    !schema.is_mutable() && !is_nondeterministic(schema) && !has_dropout(n);
    if (eligible) {
      std::unordered_set<const StorageImpl*> inputs;
      for_each_input(n, [&](const Tensor& t) {
        if (t.defined() && t.impl()->has_storage()) inputs.insert(storage_of(t));
      });
      for (const Tensor& o : n.outputs) {
        eligible = eligible && o.defined() && o.impl()->has_storage() &&
                   !inputs.count(storage_of(o)) && !written.count(storage_of(o));
      }
    }
    if (eligible) {
      KeyWriter key(epoch);
      key.raw(n.op);
      key.raw(n.device.type());
      key.raw(n.device.index());
      for (const IValue& v : n.args) key.value(v);
      auto [it, inserted] = first.emplace(key.take(), idx);
      if (!inserted) {
        const Node& kept = nodes[it->second];
        bool match = kept.outputs.size() == n.outputs.size();
        for (size_t k = 0; match && k < n.outputs.size(); ++k) {
          match = same_geometry(kept.outputs[k], n.outputs[k]);
        }
        bool held = false;
        for (const Tensor& o : n.outputs) held = held || external.count(storage_of(o));
        // A user-held extern becomes a copy; a node with several outputs cannot.
        bool to_copy = held && !find_decomposition(n);
        if (match && to_copy && n.outputs.size() != 1) match = false;
        if (match) {
          for (size_t k = 0; k < n.outputs.size(); ++k) {
            redirect[storage_of(n.outputs[k])] = kept.outputs[k];
          }
          ++result.merged;
          KILN_LOG(Fusion, "cse: ", schema.full_name(), " (node ", n.id, ") reuses node ", kept.id,
                   held ? (to_copy ? "; its output is held outside: copied"
                                   : "; its output is held outside: still computed")
                        : "");
          if (to_copy) {
            if (!copy_op) copy_op = &find_op("copy_").entry();
            Tensor dst = n.outputs[0];
            Node copy;
            copy.op = copy_op;
            copy.args = {IValue(dst), IValue(kept.outputs[0]), IValue(false)};
            copy.outputs = {dst};
            copy.written = {0};
            copy.device = n.device;
            copy.id = n.id;
            n = std::move(copy);
            ++result.copies;
          }
          continue;
        }
      }
    }
    for (int w : n.written) {
      if (n.args[w].is_tensor()) ++epoch[storage_of(n.args[w].to_tensor())];
    }
  }
  return result;
}

}  // namespace kiln::jit
