// Stub CUDA glue for builds without the CUDA toolkit: queries say "no CUDA",
// everything that needs a device throws "kiln was built without CUDA".

#include <atomic>

#include "kiln/error.h"
#include "runtime/cuda/blas_lt.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/cuda_runtime.h"

namespace kiln::cuda {

namespace {
[[noreturn]] void no_cuda(const char* what) {
  KILN_FAIL("[", what, "] kiln was built without CUDA: expected a cpu device, got a cuda one");
}
}  // namespace

bool built() {
  return false;
}
bool is_available() {
  return false;
}
int device_count() {
  return 0;
}
void check_device(Device, const char* op) {
  no_cuda(op);
}
std::string device_name(int) {
  no_cuda("cuda device_name");
}
void device_capability(int, int*, int*) {
  no_cuda("cuda device_capability");
}
int64_t device_total_memory(int) {
  no_cuda("cuda device_total_memory");
}
double device_memory_peak_gbps(int) {
  no_cuda("cuda device_memory_peak_gbps");
}
int64_t device_l2_bytes(int) {
  no_cuda("cuda device_l2_bytes");
}
int device_multiprocessors(int) {
  no_cuda("cuda device_multiprocessors");
}
void synchronize(Device) {
  no_cuda("cuda synchronize");
}

// The flag alone: no product in this build reads it.
namespace {
std::atomic<bool> g_allow_tf32{false};
}
void start_blas_warmup(int) {}
LtCacheStats lt_cache_stats() {
  return {};
}
void set_allow_tf32(bool allow) {
  g_allow_tf32.store(allow);
}
bool allow_tf32() {
  return g_allow_tf32.load();
}
bool skinny_matmul_with_norm(const Tensor&, const Tensor&, const Tensor&, Activation, const Tensor*,
                             const Tensor*, int, const Tensor*, const Tensor*, double,
                             const std::function<void()>&) {
  no_cuda("skinny matmul");
}
MatmulTuning::MatmulTuning() {}
MatmulTuning::~MatmulTuning() {}
void set_skinny_path(SkinnyPath) {}
SkinnyPath skinny_path() {
  return SkinnyPath::Auto;
}
SkinnyStats skinny_stats() {
  return {};
}
int64_t skinny_norm_rows() {
  return 0;
}

bool capturing(Device) {
  return false;
}
Stream Stream::current(Device) {
  no_cuda("Stream::current");
}
Stream Stream::default_stream(Device) {
  no_cuda("Stream::default_stream");
}
Stream Stream::legacy(Device) {
  no_cuda("Stream::legacy");
}
Stream Stream::from_pool(Device) {
  no_cuda("Stream::from_pool");
}
Stream Stream::from_external(void*, Device) {
  no_cuda("Stream::from_external");
}
bool Stream::query() const {
  no_cuda("Stream::query");
}
void Stream::synchronize() const {
  no_cuda("Stream::synchronize");
}
void Stream::wait(const Event&) const {
  no_cuda("Stream::wait");
}
StreamGuard::StreamGuard(const Stream& s) : previous_(s), had_previous_(false) {
  no_cuda("StreamGuard");
}
StreamGuard::~StreamGuard() = default;

Event::Event(bool enable_timing) : timing_(enable_timing) {}
Event::~Event() = default;
Event::Event(Event&& o) noexcept : event_(o.event_), device_(o.device_), timing_(o.timing_) {}
Event& Event::operator=(Event&& o) noexcept {
  timing_ = o.timing_;
  return *this;
}
void Event::record(const Stream&) {
  no_cuda("Event::record");
}
void Event::wait(const Stream&) const {
  no_cuda("Event::wait");
}
bool Event::query() const {
  return true;
}
void Event::synchronize() const {}
float Event::elapsed_ms(const Event&) const {
  no_cuda("Event::elapsed_ms");
}

MemoryStats memory_stats(Device) {
  no_cuda("memory_stats");
}
std::string memory_summary(Device) {
  no_cuda("memory_summary");
}
void empty_cache() {}
MemorySnapshot memory_snapshot() {
  return {};
}
void set_memory_fraction(double, Device) {
  no_cuda("set_memory_fraction");
}
void reset_peak_memory_stats(Device) {
  no_cuda("reset_peak_memory_stats");
}
void record_stream(const Tensor&, const Stream&) {
  no_cuda("record_stream");
}
Tensor pin_memory(const Tensor&) {
  no_cuda("pin_memory");
}
bool is_pinned(const Tensor&) {
  return false;
}

alloc::DataPtr allocate(size_t, Device) {
  no_cuda("cuda allocate");
}
alloc::DeviceCachingAllocator& device_allocator(int) {
  no_cuda("cuda allocator");
}
alloc::HostCachingAllocator& pinned_allocator() {
  no_cuda("pinned allocator");
}
alloc::StreamId stream_id(const Stream& s) {
  return alloc::StreamId{reinterpret_cast<uintptr_t>(s.handle()), s.device().index()};
}
void copy_bytes(void*, Device, const void*, Device, size_t) {
  no_cuda("cuda copy");
}

namespace detail {
// Only reached by tests of the macros: no CUDA code runs in this build.
void fail_cuda(int status, const char* call, const char* file, int line, int device) {
  KILN_FAIL("[cuda] ", call, " failed at ", file, ":", line, " on cuda:", device, ": status ",
            status, " (kiln was built without CUDA)");
}
void fail_nvrtc(int status, const char* call, const char* file, int line) {
  KILN_FAIL("[nvrtc] ", call, " failed at ", file, ":", line, ": status ", status);
}
void fail_cublas(int status, const char* call, const char* file, int line, int device) {
  KILN_FAIL("[cublasLt] ", call, " failed at ", file, ":", line, " on cuda:", device, ": status ",
            status);
}
}  // namespace detail

}  // namespace kiln::cuda
