#include "kiln/impl/tensor_impl.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <set>

#include "allocator/allocator.h"
#include "kiln/dispatch.h"
#include "runtime/core/hooks.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/cuda/cuda_runtime.h"

namespace kiln {

namespace {

// Note [Impl pools]
// Every eager op makes a TensorImpl and a StorageImpl for its output and
// frees those of its temporaries, and malloc plus free of the two costs about
// a sixth of a small op. Each thread keeps freed objects of each class for
// reuse: up to a lazy trace's worth, since a trace frees its nodes' outputs
// all at once when it runs and the next trace records as many again (Note
// [Node buffers] in jit/record/trace_buffer.h). An object freed on another thread joins that
// thread's pool; one freed after its thread's pool is gone (thread exit) goes back to the heap.
// Sanitized builds skip the pools so that use-after-free is still caught.
#if defined(__SANITIZE_ADDRESS__)
constexpr size_t kPoolDepth = 0;
#else
constexpr size_t kPoolDepth = 2048;
#endif

thread_local bool t_pools_gone = false;

template <class T>
struct ImplPool {
  // Allocated once: returning an object to the pool never allocates.
  std::unique_ptr<void* []> items { new void*[kPoolDepth > 0 ? kPoolDepth : 1] };
  size_t count = 0;
  ~ImplPool() {
    while (count > 0) ::operator delete(items[--count]);
    t_pools_gone = true;
  }
  static ImplPool& get() {
    static thread_local ImplPool pool;
    return pool;
  }
};

template <class T>
void* pooled_new(size_t nbytes) {
  if constexpr (kPoolDepth > 0) {
    if (nbytes == sizeof(T) && !t_pools_gone) {
      ImplPool<T>& pool = ImplPool<T>::get();
      if (pool.count > 0) return pool.items[--pool.count];
    }
  }
  return ::operator new(nbytes);
}

template <class T>
void pooled_delete(void* p, size_t nbytes) {
  if constexpr (kPoolDepth > 0) {
    if (nbytes == sizeof(T) && !t_pools_gone) {
      ImplPool<T>& pool = ImplPool<T>::get();
      if (pool.count < kPoolDepth) {
        pool.items[pool.count++] = p;
        return;
      }
    }
  }
  ::operator delete(p);
}

}  // namespace

void* StorageImpl::operator new(size_t nbytes) {
  return pooled_new<StorageImpl>(nbytes);
}
void StorageImpl::operator delete(void* p, size_t nbytes) {
  pooled_delete<StorageImpl>(p, nbytes);
}
void* TensorImpl::operator new(size_t nbytes) {
  return pooled_new<TensorImpl>(nbytes);
}
void TensorImpl::operator delete(void* p, size_t nbytes) {
  pooled_delete<TensorImpl>(p, nbytes);
}

// ---------------------------------------------------------------------------
// StorageImpl

StorageImpl::~StorageImpl() {
  if (PendingValue* p = pending_.load(std::memory_order_relaxed)) p->release();
  if (deleter_) deleter_(ctx_, data_);
}

namespace {
// Held while a thread reads a marker and takes a reference to it, and while
// one is replaced, so that no marker is freed between the two (Note [Pending
// storage]). Never held while acquiring another lock or releasing a
// reference (releasing may free a trace).
std::mutex& pending_mutex() {
  static auto* mu = new std::mutex();  // leaked: storages die at exit
  return *mu;
}
}  // namespace

IntrusivePtr<PendingValue> StorageImpl::pending() const {
  if (!has_pending()) return nullptr;
  std::lock_guard<std::mutex> lock(pending_mutex());
  return IntrusivePtr<PendingValue>::retain(pending_.load(std::memory_order_acquire));
}

void StorageImpl::set_pending(IntrusivePtr<PendingValue> p) {
  if (!p && !has_pending()) return;  // nothing to clear (a compiled call's storages, each run)
  PendingValue* old;
  {
    std::lock_guard<std::mutex> lock(pending_mutex());
    old = pending_.exchange(p.detach(), std::memory_order_acq_rel);
  }
  if (old) old->release();
}

bool StorageImpl::replace_pending(const PendingValue* expected, IntrusivePtr<PendingValue> p) {
  PendingValue* want = const_cast<PendingValue*>(expected);
  if (!pending_.compare_exchange_strong(want, p.get(), std::memory_order_acq_rel)) return false;
  (void)p.detach();  // the storage's reference now
  // The caller keeps `expected` alive: this never frees it.
  if (want) want->release();
  return true;
}

void StorageImpl::pending_barrier() {
  std::lock_guard<std::mutex> lock(pending_mutex());
}

void StorageImpl::set_data(void* data, void* ctx, Deleter deleter) {
  KILN_INTERNAL_ASSERT(data_ == nullptr || nbytes_ == 0, "storage already has memory");
  data_ = data;
  ctx_ = ctx;
  deleter_ = deleter;
}

// Note [Memory wrapped twice]
// from_blob over memory another live from_blob storage already wraps (the
// same buffer wrapped twice, or overlapping parts of it) makes two storages
// for one set of bytes. Eagerly that is harmless; lazy mode and jit::compile
// order reads and writes by storage, and fused a write through one with a
// read through the other as independent (the read saw the old values). So
// every live wrapped range is registered, and a new one that meets another
// marks both storages as sharing memory: lazy mode runs each op touching such
// a storage at its call, after what was recorded before it (record order is
// then program order), and a compiled function given one runs uncompiled.
// The mark stays for the storage's life. Storages kiln allocates never overlap, and views of one
// storage are ordered by it: neither is registered or marked.
std::atomic<bool> StorageImpl::any_shares_memory_{false};

namespace {
struct BlobContext;
// Live wrapped ranges by (device, first byte).
using BlobMap = std::multimap<std::pair<int, uintptr_t>, BlobContext*>;

struct BlobContext {
  std::function<void(void*)> deleter;
  StorageImpl* owner = nullptr;  // while registered (adopt_data moves it)
  uintptr_t begin = 0, end = 0;
  BlobMap::iterator at;  // while registered
};

// A new range meets those that begin inside it, and those that begin before
// it by less than the longest live range's length (so a from_blob costs
// O(log n) among n live ranges that do not nest, not O(n)).
struct BlobRegistry {
  std::mutex mu;
  BlobMap live;
  std::multiset<uintptr_t> lengths;
};

BlobRegistry& blobs() {
  static auto* r = new BlobRegistry;  // left alive: storages may die during exit
  return *r;
}

int blob_device_key(const Device& d) {
  return static_cast<int>(d.type()) * 65536 + d.index();
}

void delete_blob(void* ctx, void* data) {
  auto* c = static_cast<BlobContext*>(ctx);
  if (c->owner) {
    std::lock_guard<std::mutex> lock(blobs().mu);
    blobs().live.erase(c->at);
    blobs().lengths.erase(blobs().lengths.find(c->end - c->begin));
  }
  if (c->deleter) c->deleter(data);
  delete c;
}
}  // namespace

void StorageImpl::adopt_data(StorageImpl& other) {
  KILN_INTERNAL_ASSERT(other.nbytes_ >= nbytes_ && other.device_ == device_,
                       "adopting memory of the wrong size or device");
  if (deleter_) deleter_(ctx_, data_);
  data_ = other.data_;
  ctx_ = other.ctx_;
  deleter_ = other.deleter_;
  other.data_ = nullptr;
  other.ctx_ = nullptr;
  other.deleter_ = nullptr;
  if (deleter_ == &delete_blob) {  // wrapped memory changes hands (Note [Memory wrapped twice])
    auto* c = static_cast<BlobContext*>(ctx_);
    std::lock_guard<std::mutex> lock(blobs().mu);
    if (c->owner) c->owner = this;
    if (other.shares_memory()) mark_shares_memory();
  }
}

void StorageImpl::reset_data() {
  void* data = data_;
  void* ctx = ctx_;
  Deleter deleter = deleter_;
  data_ = nullptr;
  ctx_ = nullptr;
  deleter_ = nullptr;
  if (deleter) deleter(ctx, data);
}

IntrusivePtr<StorageImpl> StorageImpl::allocate(size_t nbytes, Device device) {
  alloc::DataPtr p;
  switch (device.type()) {
    case DeviceType::CPU:
      p = alloc::cpu_allocator().allocate(nbytes);
      break;
    case DeviceType::CUDA:
      p = cuda::allocate(nbytes, device);
      break;
    case DeviceType::Meta:
      KILN_FAIL("[storage] meta tensors have no data: expected a cpu or cuda device, got meta");
  }
  return IntrusivePtr<StorageImpl>::make(p.ptr, nbytes, device, p.ctx, p.deleter);
}

bool StorageImpl::wraps_caller_memory() const {
  return deleter_ == &delete_blob;
}

IntrusivePtr<StorageImpl> StorageImpl::from_blob(void* data, size_t nbytes, Device device,
                                                 std::function<void(void*)> deleter) {
  auto* ctx = new BlobContext{std::move(deleter)};
  auto s = IntrusivePtr<StorageImpl>::make(data, nbytes, device, ctx, &delete_blob);
  if (data && nbytes > 0) {
    ctx->begin = reinterpret_cast<uintptr_t>(data);
    ctx->end = ctx->begin + nbytes;
    const int dk = blob_device_key(device);
    BlobRegistry& r = blobs();
    std::lock_guard<std::mutex> lock(r.mu);
    ctx->owner = s.get();
    // `other`'s owner is alive: its deleter waits for this lock to leave the registry.
    auto meet = [&](BlobContext* other) {
      other->owner->mark_shares_memory();
      s->mark_shares_memory();
    };
    const auto first = r.live.lower_bound({dk, ctx->begin});
    for (auto it = first;
         it != r.live.end() && it->first.first == dk && it->first.second < ctx->end; ++it) {
      meet(it->second);
    }
    const uintptr_t longest = r.lengths.empty() ? 0 : *r.lengths.rbegin();
    for (auto it = first; it != r.live.begin();) {
      --it;
      if (it->first.first != dk || it->first.second + longest <= ctx->begin) break;
      if (it->second->end > ctx->begin) meet(it->second);
    }
    ctx->at = r.live.emplace(std::make_pair(dk, ctx->begin), ctx);
    r.lengths.insert(nbytes);
  }
  return s;
}

// ---------------------------------------------------------------------------
// TensorImpl

TensorImpl::TensorImpl(IntrusivePtr<StorageImpl> storage, DType dtype, Device device,
                       IntArrayRef sizes, IntArrayRef strides, int64_t storage_offset)
    : sizes_(sizes),
      strides_(strides),
      storage_offset_(storage_offset),
      storage_(std::move(storage)),
      key_bits_(key_bit(backend_key(device))),
      dtype_(dtype),
      device_(device) {
  refresh();
}

TensorImpl::TensorImpl(IntrusivePtr<StorageImpl> storage, DType dtype, Device device,
                       IntArrayRef sizes, IntArrayRef strides, RowMajor row_major)
    : sizes_(sizes),
      strides_(strides),
      numel_(row_major.numel),
      storage_(std::move(storage)),
      key_bits_(key_bit(backend_key(device))),
      dtype_(dtype),
      device_(device) {
  KILN_INTERNAL_ASSERT(sizes_.size() == strides_.size(), "sizes and strides differ in rank");
}

TensorImpl::TensorImpl(DType dtype, Device device, IntArrayRef sizes, IntArrayRef strides,
                       int64_t storage_offset)
    : TensorImpl(IntrusivePtr<StorageImpl>(), dtype, device, sizes, strides, storage_offset) {}

void TensorImpl::set_geometry(IntArrayRef sizes, IntArrayRef strides, int64_t storage_offset) {
  sizes_ = sizes;
  strides_ = strides;
  storage_offset_ = storage_offset;
  refresh();
}

void TensorImpl::refresh() {
  KILN_INTERNAL_ASSERT(sizes_.size() == strides_.size(), "sizes and strides differ in rank");
  // Views only narrow geometry that was checked when made (Note [Checked size
  // arithmetic]), so an overflow here is a view kernel's bug.
  int64_t n = 1;
  for (int64_t s : sizes_) {
    KILN_INTERNAL_ASSERT(s >= 0 && !__builtin_mul_overflow(n, s, &n), "a view of sizes ", sizes(),
                         " whose element count does not fit int64");
  }
  numel_ = n;
  is_contiguous_ = compute_contiguous(sizes_, strides_);
}

std::atomic<int> TensorImpl::reads_watched_{0};

void* TensorImpl::data_slow() {
  if (KILN_UNLIKELY(host_reads_watched())) {
    if (HostReadHook hook = host_read_hook()) hook(this);
  }
  if (storage_ && storage_->has_pending()) {
    MaterializeHook hook = materialize_hook();
    KILN_INTERNAL_ASSERT(hook != nullptr, "a pending tensor with no materialize hook");
    // Returns once this thread may read the memory: the value exists, or a
    // plan running on this thread computes it in record order (the marker
    // then stays until the plan is done: Note [Pending state across threads]).
    try {
      hook(storage_.get());
    } catch (const std::bad_alloc&) {
      // Kernels' own failures are kiln::Error already (Note [Out of memory in
      // a kernel]); this is the trace machinery's.
      KILN_FAIL(
          "[materialize] out of memory: expected host memory to run the lazy trace, got "
          "std::bad_alloc");
    }
  }
  if (KILN_UNLIKELY(device_.is_meta())) {
    // Inside an op, a meta argument mixed with tensors on a device: name the
    // op (Note [The op being run]), not data_ptr.
    const char* op = detail::current_op();
    KILN_FAIL("[", op ? op : "data_ptr", "] expected a tensor with data, got a meta tensor",
              op ? " (meta tensors do not mix with tensors on a device here)" : "");
  }
  if (!storage_) return nullptr;
  return static_cast<char*>(storage_->data()) +
         storage_offset_ * static_cast<int64_t>(itemsize(dtype_));
}

}  // namespace kiln
