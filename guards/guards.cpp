#include "guards/guards.h"

#include <algorithm>
#include <cstring>

#include "kiln/autocast.h"
#include "kiln/cuda.h"
#include "kiln/dispatch.h"
#include "kiln/impl/small_vector.h"
#include "runtime/core/tensor_utils.h"

// GCC 12 warns falsely on std::string concatenation at -O3.
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"

namespace kiln::guards {
namespace {

constexpr int kMaxAlignLog2 = 6;  // 64 bytes: the widest vector access a kernel assumes

uint8_t align_log2_of(const Tensor& t) {
  if (!t.defined() || t.numel() == 0) return 0;
  const auto address = reinterpret_cast<uintptr_t>(t.data_ptr());
  if (address == 0) return 0;
  return static_cast<uint8_t>(std::min(__builtin_ctzll(address), kMaxAlignLog2));
}

// Row-major stride of dim d for `sizes`.
int64_t row_major_stride(IntArrayRef sizes, size_t d) {
  int64_t s = 1;
  for (size_t k = d + 1; k < sizes.size(); ++k) s *= sizes[k];
  return s;
}

// The dims that address memory (more than one element, a nonzero stride),
// outermost to innermost, where `strides` lay them out densely in that order
// up to a step (row-major, a transposed contiguous tensor, every other
// element of one, any of these expanded along other dims); empty where they
// do not.
DimVector dense_order(IntArrayRef sizes, IntArrayRef strides) {
  DimVector order;
  for (int64_t d : dims_by_stride(strides)) {
    if (sizes[d] != 1 && strides[d] != 0) order.push_back(d);
  }
  if (order.empty() || strides[order.back()] < 1) return {};
  int64_t expect = strides[order.back()];
  for (size_t k = order.size(); k-- > 0;) {
    if (strides[order[k]] != expect) return {};
    expect *= sizes[order[k]];
  }
  return order;
}

// Stride of dim d laid out densely in `order` for `sizes`, with the
// innermost dim's stride `step`.
int64_t dense_stride(IntArrayRef sizes, const DimVector& order, int64_t step, int64_t d) {
  int64_t s = step;
  for (size_t k = order.size(); k-- > 0 && order[k] != d;) s *= sizes[order[k]];
  return s;
}

std::string input_name(int input, int element, const std::vector<std::string>& names) {
  std::string s = "input " + std::to_string(input);
  if (input >= 0 && static_cast<size_t>(input) < names.size() && !names[input].empty()) {
    s += " '" + names[input] + "'";
  }
  if (element >= 0) s += "[" + std::to_string(element) + "]";
  return s;
}

std::string dims_string(IntArrayRef v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

const char* autocast_name(const std::optional<DType>& d) {
  return d ? dtype_name(*d) : "off";
}

// A scalar argument equal to the one traced (same kind, checked by the caller).
bool same_value(const IValue& a, const IValue& b) {
  switch (a.tag()) {
    case IValue::Tag::Int:
      return a.to_int() == b.to_int();
    case IValue::Tag::Double: {
      const double x = a.to_double(), y = b.to_double();
      return std::memcmp(&x, &y, sizeof x) == 0;  // -0.0 and NaN payloads count
    }
    case IValue::Tag::Bool:
      return a.to_bool() == b.to_bool();
    case IValue::Tag::None:
      return true;
    case IValue::Tag::DType:
      return a.to_dtype() == b.to_dtype();
    case IValue::Tag::Device:
      return a.to_device() == b.to_device();
    default:
      return a.repr() == b.repr();
  }
}

}  // namespace

bool DynamicDims::any() const {
  for (uint64_t d : dims) {
    if (d) return true;
  }
  for (bool s : scalars) {
    if (s) return true;
  }
  return false;
}

std::string describe_modes() {
  const LocalDispatchKeySet& l = detail::local_keys();
  const uint64_t ks = (l.included | detail::g_default_keys) & ~l.excluded;
  std::string s = "autocast ";
  s += autocast_name(autocast_dtype());
  s += (ks & key_bit(DispatchKey::Lazy)) ? ", lazy" : ", eager";
  if (cuda::allow_tf32()) s += ", tf32";
  return s;
}

GuardSet GuardSet::from_call(const std::vector<IValue>& args, const DynamicDims& dynamic) {
  GuardSet g;
  g.dynamic_ = dynamic;
  std::vector<const StorageImpl*> storages;
  auto add_tensor = [&](const Tensor& t, int input, int element, uint64_t dyn, bool dyn_offset) {
    TensorGuard tg;
    tg.input = input;
    tg.element = element;
    tg.defined = t.defined();
    if (tg.defined) {
      tg.dtype = t.dtype();
      tg.device = t.device();
      tg.sizes = DimVector(t.sizes());
      tg.strides = DimVector(t.strides());
      tg.dense_order = dense_order(t.sizes(), t.strides());
      tg.storage_offset = t.storage_offset();
      tg.dynamic_offset = dyn_offset;
      // 0 and 1 stay specialized: a dim seen at such a size is not dynamic.
      for (int64_t d = 0; d < t.dim() && d < 64; ++d) {
        if (((dyn >> d) & 1u) && t.size(d) >= 2) tg.dynamic |= uint64_t{1} << d;
      }
      tg.align_log2 = align_log2_of(t);
      const StorageImpl* s = t.impl()->storage().get();
      for (size_t k = 0; k < storages.size(); ++k) {
        if (s && storages[k] == s) {
          tg.alias_of = static_cast<int>(k);
          break;
        }
      }
      storages.push_back(s);
    } else {
      storages.push_back(nullptr);
    }
    g.tensors_.push_back(std::move(tg));
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const IValue& a = args[i];
    const int input = static_cast<int>(i);
    g.kinds_.push_back(a.tag());
    const uint64_t dyn = i < dynamic.dims.size() ? dynamic.dims[i] : 0;
    const bool dyn_offset = dynamic.offset_is_dynamic(i);
    if (a.is_tensor()) {
      add_tensor(a.to_tensor(), input, -1, dyn, dyn_offset);
    } else if (a.is_tensor_list()) {
      const auto& list = a.to_tensor_list();
      g.lists_.push_back({input, list.size()});
      for (size_t e = 0; e < list.size(); ++e) {
        add_tensor(list[e], input, static_cast<int>(e), dyn, dyn_offset);
      }
    } else {
      const bool dyn_scalar = i < dynamic.scalars.size() && dynamic.scalars[i];
      g.scalars_.push_back({input, a, dyn_scalar});
    }
  }
  // Tensors that share a storage move together or not at all (how they
  // overlap is part of the trace): each follows the first tensor on its
  // storage, whose offset is dynamic when its argument's is, at a distance
  // from it that stays guarded.
  for (TensorGuard& tg : g.tensors_) {
    if (tg.alias_of < 0) continue;
    const TensorGuard& first = g.tensors_[static_cast<size_t>(tg.alias_of)];
    tg.dynamic_offset = first.dynamic_offset;
    tg.distance = tg.storage_offset - first.storage_offset;
  }
  const LocalDispatchKeySet& l = detail::local_keys();
  g.mode_ = {l.included, l.excluded, detail::g_default_keys, autocast_dtype(), cuda::allow_tf32()};
  return g;
}

Captured::Captured(StorageImpl* s, int32_t outside, std::string w)
    : min_refs(outside), what(std::move(w)) {
  s->add_compiled_refs(1);  // before the reference is taken (Note [Guards])
  storage = IntrusivePtr<StorageImpl>::retain(s);
}

Captured::~Captured() {
  if (storage) storage->add_compiled_refs(-1);
}

CapturedObject::CapturedObject(TensorImpl* t, std::string w) : what(std::move(w)) {
  t->add_compiled_refs(1);  // before the reference is taken (Note [Guards])
  impl = IntrusivePtr<TensorImpl>::retain(t);
}

CapturedObject::~CapturedObject() {
  if (impl) impl->add_compiled_refs(-1);
}

void GuardSet::guard_captured_object(TensorImpl* t, int32_t own, std::string what) {
  if (t->use_count() - t->compiled_refs() - own <= 0) return;  // a temporary of the trace
  objects_.emplace_back(t, std::move(what));
}

bool GuardSet::guard_captured(StorageImpl* storage, std::string what) {
  // Nothing outside compiled functions holds it.
  if (storage->use_count() <= storage->compiled_refs()) return false;
  captured_sorted_.insert(
      std::upper_bound(captured_sorted_.begin(), captured_sorted_.end(), storage), storage);
  captured_.emplace_back(storage, 1, std::move(what));
  return true;
}

void GuardSet::require_storage(size_t k, StorageImpl* storage, std::string what) {
  required_.emplace_back(k, Captured(storage, 0, std::move(what)));
}

void GuardSet::require_held_references(const StorageImpl* storage, int32_t held) {
  for (Captured& c : captured_) {
    if (c.storage.get() == storage && held > 1)
      c.min_refs.fetch_add(held - 1, std::memory_order_relaxed);
  }
}

void GuardSet::keep_offsets(const std::vector<bool>& fixed) {
  for (size_t i = 0; i < tensors_.size() && i < fixed.size(); ++i) {
    if (!fixed[i]) continue;
    // The tensors sharing its storage move with it: they stay too.
    const int first = tensors_[i].alias_of >= 0 ? tensors_[i].alias_of : static_cast<int>(i);
    for (size_t j = 0; j < tensors_.size(); ++j) {
      if (static_cast<int>(j) == first || tensors_[j].alias_of == first) {
        tensors_[j].dynamic_offset = false;
      }
    }
  }
}

bool GuardSet::gather(const std::vector<IValue>& args, std::vector<const Tensor*>& out) const {
  if (args.size() != kinds_.size()) return false;
  size_t lg = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    const IValue& a = args[i];
    if (a.tag() != kinds_[i]) return false;
    if (a.is_tensor()) {
      out.push_back(&a.to_tensor());
    } else if (a.is_tensor_list()) {
      const auto& list = a.to_tensor_list();
      if (list.size() != lists_[lg++].length) return false;
      for (const Tensor& t : list) out.push_back(&t);
    }
  }
  return true;
}

Moved GuardSet::moved(const std::vector<IValue>& args) const {
  Moved m;
  std::vector<const Tensor*> ts;
  if (!gather(args, ts)) return m;
  // Tensors that share a storage move together (from_call): the first one
  // is listed when it moved and every other kept its distance from it.
  auto moves_together = [&](size_t first) {
    for (size_t j = first + 1; j < tensors_.size() && j < ts.size(); ++j) {
      if (tensors_[j].alias_of != static_cast<int>(first)) continue;
      if (ts[j]->storage_offset() - ts[first]->storage_offset() != tensors_[j].distance) {
        return false;
      }
    }
    return true;
  };
  for (size_t i = 0; i < ts.size() && i < tensors_.size(); ++i) {
    const TensorGuard& g = tensors_[i];
    const Tensor& t = *ts[i];
    if (!g.defined || !t.defined() || t.dtype() != g.dtype || !(t.device() == g.device) ||
        static_cast<size_t>(t.dim()) != g.sizes.size()) {
      continue;
    }
    for (int64_t d = 0; d < t.dim() && d < 64; ++d) {
      const std::pair<int, int64_t> dim{g.input, d};
      if (!((g.dynamic >> d) & 1u) && t.size(d) != g.sizes[d] &&
          std::find(m.dims.begin(), m.dims.end(), dim) == m.dims.end()) {
        m.dims.push_back(dim);
      }
    }
    if (!g.dynamic_offset && g.alias_of < 0 && t.storage_offset() != g.storage_offset &&
        moves_together(i) &&
        std::find(m.offsets.begin(), m.offsets.end(), g.input) == m.offsets.end()) {
      m.offsets.push_back(g.input);
    }
  }
  return m;
}

void GuardSet::cap_alignment(const GuardSet& before) {
  for (size_t i = 0; i < tensors_.size() && i < before.tensors_.size(); ++i) {
    TensorGuard& g = tensors_[i];
    const TensorGuard& b = before.tensors_[i];
    if (!g.dynamic_offset || !g.defined || !b.defined || b.input != g.input ||
        b.element != g.element || b.dtype != g.dtype) {
      continue;
    }
    if (b.dynamic_offset) {
      g.align_log2 = std::min(g.align_log2, b.align_log2);
      continue;
    }
    const int64_t step = g.storage_offset - b.storage_offset;
    if (step == 0) continue;
    const auto bytes = static_cast<uint64_t>(step < 0 ? -step : step) * itemsize(g.dtype);
    g.align_log2 = std::min<uint8_t>(
        g.align_log2, static_cast<uint8_t>(std::min(__builtin_ctzll(bytes), kMaxAlignLog2)));
  }
}

bool GuardSet::is_captured(const StorageImpl* storage) const {
  return std::binary_search(captured_sorted_.begin(), captured_sorted_.end(), storage);
}

bool GuardSet::misaligned(const TensorGuard& g, const Tensor& t) {
  const TensorImpl* impl = t.impl();
  if (g.align_log2 == 0 || impl->numel() == 0) return false;
  const auto address = reinterpret_cast<uintptr_t>(const_cast<TensorImpl*>(impl)->data());
  return (address & ((uintptr_t{1} << g.align_log2) - 1)) != 0;
}

bool GuardSet::tensor_holds(const TensorGuard& g, const Tensor& t) const {
  if (!t.defined()) return !g.defined;
  if (!g.defined) return false;
  const TensorImpl* impl = t.impl();
  if (impl->dtype() != g.dtype || !(impl->device() == g.device)) return false;
  IntArrayRef sizes = impl->sizes(), strides = impl->strides();
  const size_t rank = sizes.size();
  if (rank != g.sizes.size()) return false;
  if (!g.dynamic_offset && impl->storage_offset() != g.storage_offset) return false;
  if (g.dynamic == 0) {
    if (std::memcmp(sizes.data(), g.sizes.data(), rank * sizeof(int64_t)) != 0 ||
        std::memcmp(strides.data(), g.strides.data(), rank * sizeof(int64_t)) != 0) {
      return false;
    }
  } else {
    for (size_t d = 0; d < rank; ++d) {
      const bool dyn = (g.dynamic >> d) & 1u;
      if (dyn ? sizes[d] < 2 : sizes[d] != g.sizes[d]) return false;
      // Strides by pattern: zero; dense in the guard's order of dims and
      // step for the current sizes (row-major or another order); else
      // row-major for them where the guard's was, else exact. Each gives the
      // traced strides back at the traced sizes, so a plan (one per size)
      // always sees the strides it was traced for, except along dims of one
      // element, whose stride addresses nothing (index 0 only).
      if (g.sizes[d] == 1) continue;
      if (g.strides[d] == 0) {
        if (strides[d] != 0) return false;
      } else if (!g.dense_order.empty()) {
        const int64_t step = g.strides[g.dense_order.back()];
        if (strides[d] != dense_stride(sizes, g.dense_order, step, static_cast<int64_t>(d))) {
          return false;
        }
      } else if (g.strides[d] == row_major_stride(g.sizes, d)) {
        if (strides[d] != row_major_stride(sizes, d)) return false;
      } else if (strides[d] != g.strides[d]) {
        return false;
      }
    }
  }
  return !misaligned(g, t);
}

bool GuardSet::check(const std::vector<IValue>& args) const {
  if (args.size() != kinds_.size()) return false;
  const LocalDispatchKeySet& l = detail::local_keys();
  if (l.included != mode_.included || l.excluded != mode_.excluded ||
      detail::g_default_keys != mode_.default_keys || autocast_dtype() != mode_.autocast ||
      cuda::allow_tf32() != mode_.tf32) {
    return false;
  }
  SmallVector<const StorageImpl*, 8> storages;
  SmallVector<int64_t, 8> offsets;
  size_t tg = 0, sg = 0, lg = 0;
  auto holds = [&](const Tensor& t) {
    const size_t k = tg;
    const TensorGuard& g = tensors_[tg++];
    if (!tensor_holds(g, t)) return false;
    const StorageImpl* s = t.defined() ? t.impl()->storage().get() : nullptr;
    for (const auto& [index, c] : required_) {
      if (index == k && c.storage.get() != s) return false;
    }
    const int64_t offset = t.defined() ? t.storage_offset() : 0;
    // The aliasing the trace modeled (a moving group keeps its distances),
    // and no argument sharing a captured storage.
    if (g.alias_of >= 0 ? storages[g.alias_of] != s : false) return false;
    if (g.alias_of >= 0 && g.dynamic_offset && offset - offsets[g.alias_of] != g.distance) {
      return false;
    }
    for (int k = 0; k < static_cast<int>(storages.size()) && g.alias_of < 0 && s; ++k) {
      if (storages[k] == s) return false;
    }
    if (s && captured_arguments_fail_ && !captured_sorted_.empty() && is_captured(s)) return false;
    storages.push_back(s);
    offsets.push_back(offset);
    return true;
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const IValue& a = args[i];
    if (a.tag() != kinds_[i]) return false;
    if (a.is_tensor()) {
      if (!holds(a.to_tensor())) return false;
    } else if (a.is_tensor_list()) {
      const auto& list = a.to_tensor_list();
      if (list.size() != lists_[lg++].length) return false;
      for (const Tensor& t : list) {
        if (!holds(t)) return false;
      }
    } else {
      const ScalarGuard& g = scalars_[sg++];
      if (!g.dynamic && !same_value(a, g.value)) return false;
    }
  }
  for (const CapturedObject& o : objects_) {
    if (!o.holds()) return false;
  }
  for (const Captured& c : captured_) {
    if (!c.holds()) return false;
  }
  return true;
}

Failure GuardSet::explain(const std::vector<IValue>& args,
                          const std::vector<std::string>& names) const {
  Failure f;
  if (args.size() != kinds_.size()) {
    f.reason = "argument count mismatch: expected " + std::to_string(kinds_.size()) + ", got " +
               std::to_string(args.size());
    return f;
  }
  const LocalDispatchKeySet& l = detail::local_keys();
  if (autocast_dtype() != mode_.autocast) {
    f.reason = std::string("autocast mismatch: expected ") + autocast_name(mode_.autocast) +
               ", got " + autocast_name(autocast_dtype());
    return f;
  }
  if (cuda::allow_tf32() != mode_.tf32) {
    f.reason = std::string("allow_tf32 mismatch: expected ") + (mode_.tf32 ? "on" : "off") +
               ", got " + (mode_.tf32 ? "off" : "on");
    return f;
  }
  if (l.included != mode_.included || l.excluded != mode_.excluded ||
      detail::g_default_keys != mode_.default_keys) {
    f.reason = "dispatch mode mismatch (an EagerGuard, autocast or a key guard differs): now " +
               describe_modes();
    return f;
  }
  std::vector<const StorageImpl*> storages;
  std::vector<int64_t> offsets;
  size_t tg = 0, sg = 0, lg = 0;
  auto tensor_reason = [&](const Tensor& t) -> bool {
    const size_t k = tg;
    const TensorGuard& g = tensors_[tg++];
    f.input = g.input;
    const std::string who = input_name(g.input, g.element, names);
    if (t.defined() != g.defined) {
      f.reason = who + (g.defined ? " is undefined, expected a tensor"
                                  : " is a tensor, expected undefined");
      return true;
    }
    if (!t.defined()) {
      storages.push_back(nullptr);
      offsets.push_back(0);
      return false;
    }
    if (t.dtype() != g.dtype) {
      f.reason = who + " dtype mismatch: expected " + dtype_name(g.dtype) + ", got " +
                 dtype_name(t.dtype());
      return true;
    }
    if (!(t.device() == g.device)) {
      f.reason = who + " device mismatch: expected " + g.device.str() + ", got " + t.device().str();
      return true;
    }
    if (static_cast<size_t>(t.dim()) != g.sizes.size()) {
      f.reason = who + " rank mismatch: expected " + std::to_string(g.sizes.size()) + ", got " +
                 std::to_string(t.dim());
      return true;
    }
    for (int64_t d = 0; d < t.dim(); ++d) {
      const bool dyn = (g.dynamic >> d) & 1u;
      if (dyn ? t.size(d) < 2 : t.size(d) != g.sizes[d]) {
        f.size_dim = d;
        f.reason =
            who + " size mismatch at dim " + std::to_string(d) + ": expected " +
            (dyn ? std::string("a size of 2 or more (dynamic)") : std::to_string(g.sizes[d])) +
            ", got " + std::to_string(t.size(d));
        return true;
      }
    }
    if (!tensor_holds(g, t)) {
      if (!g.dynamic_offset && t.storage_offset() != g.storage_offset) {
        f.offset = true;
        f.reason = who + " storage offset mismatch: expected " + std::to_string(g.storage_offset) +
                   ", got " + std::to_string(t.storage_offset());
      } else if (misaligned(g, t)) {
        f.reason = who + " alignment mismatch: expected data aligned to " +
                   std::to_string(1u << g.align_log2) + " bytes";
      } else {
        f.reason = who + " stride mismatch: expected " + dims_string(g.strides) + ", got " +
                   dims_string(t.strides());
      }
      return true;
    }
    const StorageImpl* s = t.impl()->storage().get();
    for (const auto& [index, c] : required_) {
      if (index == k && c.storage.get() != s) {
        f.reason = who + " is no longer the tensor the function captured (" + c.what + ")";
        return true;
      }
    }
    int shares = -1;
    for (size_t k = 0; k < storages.size() && shares < 0; ++k) {
      if (s && storages[k] == s) shares = static_cast<int>(k);
    }
    if (shares != g.alias_of) {
      f.reason = who + (g.alias_of >= 0 ? " no longer shares its storage with another input"
                                        : " shares its storage with another input");
      return true;
    }
    if (g.alias_of >= 0 && g.dynamic_offset &&
        t.storage_offset() - offsets[static_cast<size_t>(g.alias_of)] != g.distance) {
      f.reason = who + " moved apart from the tensor it shares a storage with: expected its " +
                 "offset " + std::to_string(g.distance) + " elements from it, got " +
                 std::to_string(t.storage_offset() - offsets[static_cast<size_t>(g.alias_of)]);
      return true;
    }
    if (s && captured_arguments_fail_ && is_captured(s)) {
      f.reason = who + " shares its storage with a tensor the function captured";
      return true;
    }
    storages.push_back(s);
    offsets.push_back(t.storage_offset());
    return false;
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const IValue& a = args[i];
    const int input = static_cast<int>(i);
    if (a.tag() != kinds_[i]) {
      f.input = input;
      f.reason = input_name(input, -1, names) + " kind mismatch: expected " +
                 IValue::tag_name(kinds_[i]) + ", got " + a.type_name();
      return f;
    }
    if (a.is_tensor()) {
      if (tensor_reason(a.to_tensor())) return f;
    } else if (a.is_tensor_list()) {
      const auto& list = a.to_tensor_list();
      const size_t expect = lists_[lg++].length;
      if (list.size() != expect) {
        f.input = input;
        f.reason = input_name(input, -1, names) + " list length mismatch: expected " +
                   std::to_string(expect) + ", got " + std::to_string(list.size());
        return f;
      }
      for (const Tensor& t : list) {
        if (tensor_reason(t)) return f;
      }
    } else {
      const ScalarGuard& g = scalars_[sg++];
      if (!g.dynamic && !same_value(a, g.value)) {
        f.input = input;
        f.reason = input_name(input, -1, names) + " value mismatch: expected " + g.value.repr() +
                   ", got " + a.repr();
        return f;
      }
    }
  }
  for (const CapturedObject& o : objects_) {
    if (!o.holds()) {
      f.reason = "captured tensor (" + o.what +
                 ") was replaced or released: nothing outside the function holds the tensor "
                 "it read any more";
      return f;
    }
  }
  for (const Captured& c : captured_) {
    if (!c.holds()) {
      f.reason = "captured tensor (" + c.what +
                 ") lost a reference held outside the function: it was replaced or released";
      return f;
    }
  }
  f.reason = "no guard failed";
  return f;
}

std::vector<std::string> GuardSet::describe(const std::vector<std::string>& names) const {
  std::vector<std::string> lines;
  for (const TensorGuard& g : tensors_) {
    std::string s = input_name(g.input, g.element, names) + ": ";
    if (!g.defined) {
      lines.push_back(s + "undefined");
      continue;
    }
    s += std::string(dtype_name(g.dtype)) + " on " + g.device.str() + ", sizes [";
    for (size_t d = 0; d < g.sizes.size(); ++d) {
      s += d ? ", " : "";
      s += ((g.dynamic >> d) & 1u) ? std::string("dynamic") : std::to_string(g.sizes[d]);
    }
    s += "], strides " + dims_string(g.strides) + ", offset " +
         (g.dynamic_offset ? std::string("dynamic") : std::to_string(g.storage_offset)) +
         ", aligned to " + std::to_string(1u << g.align_log2) + " bytes";
    if (g.alias_of >= 0) {
      s += ", shares storage with tensor " + std::to_string(g.alias_of);
      if (g.dynamic_offset) s += " (" + std::to_string(g.distance) + " elements from it)";
    }
    lines.push_back(std::move(s));
  }
  for (const ListGuard& g : lists_) {
    lines.push_back(input_name(g.input, -1, names) + ": list of " + std::to_string(g.length));
  }
  for (const ScalarGuard& g : scalars_) {
    lines.push_back(
        input_name(g.input, -1, names) + ": " +
        (g.dynamic ? std::string("dynamic ") + g.value.type_name() : "== " + g.value.repr()));
  }
  lines.push_back(
      std::string("modes: autocast ") + autocast_name(mode_.autocast) +
      (((mode_.included | mode_.default_keys) & ~mode_.excluded & key_bit(DispatchKey::Lazy))
           ? ", lazy"
           : ", eager") +
      (mode_.tf32 ? ", tf32" : ""));
  for (const CapturedObject& o : objects_) {
    lines.push_back("captured: " + o.what + ", the tensor object itself held outside");
  }
  for (const Captured& c : captured_) {
    lines.push_back("captured: " + c.what + ", " + std::to_string(c.storage->nbytes()) +
                    " bytes, at least " + std::to_string(c.min_refs.load()) +
                    " references held outside compiled functions");
  }
  return lines;
}

}  // namespace kiln::guards
