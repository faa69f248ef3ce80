// The slots jit/ fills (Note [Runtime hooks]). Each is a constant-initialized
// atomic, so a static initializer in any translation unit may set it.

#include "runtime/core/hooks.h"

#include <atomic>

namespace kiln {
namespace {

std::atomic<MaterializeHook> g_materialize{nullptr};
std::atomic<SyncHook> g_sync{nullptr};
std::atomic<AbsoluteViewHook> g_absolute_view{nullptr};
std::atomic<ViewHook> g_view{nullptr};
std::atomic<HostReadHook> g_host_read{nullptr};
std::atomic<decltype(PersistentCache::load)> g_load{nullptr};
std::atomic<decltype(PersistentCache::store)> g_store{nullptr};
std::atomic<cuda::IntMatmulKernel> g_int_matmul{nullptr};
std::atomic<cuda::DeviceCopyKernel> g_device_copy{nullptr};
std::atomic<decltype(cuda::SkinnyMatmulKernel::takes)> g_skinny_takes{nullptr};
std::atomic<decltype(cuda::SkinnyMatmulKernel::run)> g_skinny_run{nullptr};
std::atomic<decltype(cuda::SkinnyMatmulKernel::preferred)> g_skinny_preferred{nullptr};

}  // namespace

void set_materialize_hook(MaterializeHook hook) {
  g_materialize.store(hook);
}
MaterializeHook materialize_hook() {
  return g_materialize.load();
}

void set_sync_hook(SyncHook hook) {
  g_sync.store(hook);
}
SyncHook sync_hook() {
  return g_sync.load();
}

void set_absolute_view_hook(AbsoluteViewHook hook) {
  g_absolute_view.store(hook);
}
AbsoluteViewHook absolute_view_hook() {
  return g_absolute_view.load();
}

void set_view_hook(ViewHook hook) {
  g_view.store(hook);
}
ViewHook view_hook() {
  return g_view.load(std::memory_order_acquire);
}

void set_host_read_hook(HostReadHook hook) {
  g_host_read.store(hook);
}
HostReadHook host_read_hook() {
  return g_host_read.load(std::memory_order_acquire);
}

void set_persistent_cache(PersistentCache cache) {
  g_load.store(cache.load);
  g_store.store(cache.store);
}

std::optional<std::vector<char>> persistent_load(const std::string& key) {
  auto load = g_load.load();
  return load ? load(key) : std::nullopt;
}

void persistent_store(const std::string& key, const std::vector<char>& payload) {
  if (auto store = g_store.load()) store(key, payload);
}

namespace cuda {

void set_int_matmul_kernel(IntMatmulKernel kernel) {
  g_int_matmul.store(kernel);
}
IntMatmulKernel int_matmul_kernel() {
  return g_int_matmul.load();
}

void set_device_copy_kernel(DeviceCopyKernel kernel) {
  g_device_copy.store(kernel);
}
DeviceCopyKernel device_copy_kernel() {
  return g_device_copy.load();
}

void set_skinny_matmul_kernel(SkinnyMatmulKernel kernel) {
  g_skinny_takes.store(kernel.takes);
  g_skinny_run.store(kernel.run);
  g_skinny_preferred.store(kernel.preferred);
}
SkinnyMatmulKernel skinny_matmul_kernel() {
  return {g_skinny_takes.load(), g_skinny_run.load(), g_skinny_preferred.load()};
}

}  // namespace cuda
}  // namespace kiln
