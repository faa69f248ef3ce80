#include "jit/codegen_cuda/kernel_loader.h"

#include <tbb/parallel_for.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "jit/cache/kernel_cache.h"
#include "jit/codegen_cuda/device_prelude.h"
#include "jit/codegen_cuda/launch_cuda.h"
#include "jit/codegen_cuda/nvrtc.h"
#include "kiln/error.h"
#include "kiln/logging.h"
#include "runtime/core/env.h"
#include "runtime/cuda/device_guard.h"

namespace kiln::jit::cuda {
namespace {

// One kernel on one device. `kernel` is published (release) once loaded, so a
// hit reads it without taking `mu`.
struct Entry {
  std::mutex mu;
  std::atomic<cudaKernel_t> kernel{nullptr};
  cudaLibrary_t library = nullptr;
};

struct Loader {
  std::mutex mu;                                                    // guards `entries` and `stats`
  std::unordered_map<std::string, std::unique_ptr<Entry>> entries;  // "<device>|<name>"
  KernelLoaderStats stats;                                          // but for `launches`
  std::atomic<int64_t> launches{0};  // every eager op launch counts: no lock
};

Loader& loader() {
  static auto* l = new Loader();  // leaked: libraries stay loaded for the process
  return *l;
}

Entry& entry_for(const std::string& key) {
  Loader& l = loader();
  std::lock_guard<std::mutex> lock(l.mu);
  std::unique_ptr<Entry>& e = l.entries[key];
  if (!e) e = std::make_unique<Entry>();
  return *e;
}

// The binary for `source`, from the disk cache or NVRTC.
std::vector<char> build(const std::string& name, const std::string& source, int arch) {
  // The disk key names everything the binary depends on (Note [Kernel disk cache]).
  const std::string disk_key = "cuda|sm_" + std::to_string(arch) + "|nvrtc " +
                               std::to_string(nvrtc_version()) + "|kiln " KILN_VERSION "|" + source;
  if (auto hit = DiskCache::instance().load(disk_key)) {
    std::lock_guard<std::mutex> lock(loader().mu);
    loader().stats.disk_hits++;
    return std::move(*hit);
  }
  CompiledKernel ck = nvrtc_compile(source, name, arch);
  {
    std::lock_guard<std::mutex> lock(loader().mu);
    loader().stats.compiled++;
    loader().stats.compile_ms += ck.compile_ms;
  }
  KILN_LOG(OutputCode, "CUDA kernel ", name, " (sm_", arch, ", ", ck.compile_ms, " ms):\n", source);
  std::vector<char> image = std::move(ck.image);
  if (!ck.is_ptx) image.push_back('\0');  // PTX is text; keep both terminated alike
  DiskCache::instance().store(disk_key, image);
  return image;
}

}  // namespace

// Note [Kernels compiled side by side]: what a KernelDiscovery keeps.
struct KernelDiscovery::Impl {
  struct Kept {
    std::string name, source;
    int device = 0;
  };
  std::vector<Kept> kept;
  std::unordered_set<std::string> keys;  // "<device>|<name>" of each kept
  Impl* previous = nullptr;              // the thread's discovery before this one
  bool active = false;
};

namespace {

thread_local KernelDiscovery::Impl* t_discovery = nullptr;

// load_kernel builds on this thread while one is alive, then keeps again.
class BuildingHere {
 public:
  BuildingHere() : saved_(t_discovery) { t_discovery = nullptr; }
  ~BuildingHere() { t_discovery = saved_; }
  BuildingHere(const BuildingHere&) = delete;
  BuildingHere& operator=(const BuildingHere&) = delete;

 private:
  KernelDiscovery::Impl* saved_;
};

// Launches nothing a caller can see: the stand-in for a kernel kept.
cudaKernel_t placeholder(int device) {
  return load_kernel(
      "kiln_discovery_placeholder",
      [] {
        return std::string(kDevicePrelude) +
               "extern \"C\" __global__ void kiln_discovery_placeholder() { kiln_grid_enter(); }\n";
      },
      device);
}

}  // namespace

KernelDiscovery::KernelDiscovery() : impl_(std::make_unique<Impl>()) {
  impl_->previous = t_discovery;
  impl_->active = true;
  t_discovery = impl_.get();
}

KernelDiscovery::~KernelDiscovery() {
  stop();
}

void KernelDiscovery::stop() {
  if (!impl_->active) return;
  impl_->active = false;
  t_discovery = impl_->previous;
}

size_t KernelDiscovery::kept() const {
  return impl_->kept.size();
}

size_t KernelDiscovery::build_kept() {
  stop();
  const std::vector<Impl::Kept>& kept = impl_->kept;
  std::atomic<size_t> built{0};
  tbb::parallel_for(size_t{0}, kept.size(), [&](size_t i) {
    BuildingHere building;  // a worker may run inside another discovery
    try {
      load_kernel(
          kept[i].name, [&] { return kept[i].source; }, kept[i].device);
      built.fetch_add(1, std::memory_order_relaxed);
    } catch (...) {
      // Left for the step that needs it, which builds it again and reports.
    }
  });
  return built.load();
}

bool keeping_kernels() {
  return t_discovery != nullptr;
}

bool parallel_build_enabled() {
  static const bool on = env_flag("KILN_PARALLEL_BUILD", true);
  return on;
}

cudaKernel_t load_kernel(const std::string& name, const std::function<std::string()>& make_source,
                         int device) {
  const std::string key = std::to_string(device) + "|" + name;
  Entry& e = entry_for(key);
  if (cudaKernel_t k = e.kernel.load(std::memory_order_acquire)) return k;
  if (KernelDiscovery::Impl* d = t_discovery) {
    // Note [Kernels compiled side by side]: kept, and a placeholder launched.
    if (d->keys.insert(key).second) d->kept.push_back({name, make_source(), device});
    BuildingHere building;
    return placeholder(device);
  }
  std::lock_guard<std::mutex> lock(e.mu);
  if (cudaKernel_t k = e.kernel.load(std::memory_order_relaxed)) return k;  // another thread won
  const auto t0 = std::chrono::steady_clock::now();
  const cudaDeviceProp& prop = kiln::cuda::device_properties(device);
  const int arch = prop.major * 10 + prop.minor;
  const std::string source = make_source();
  KILN_INTERNAL_ASSERT(source.find("kiln_grid_enter();") != std::string::npos, "generated kernel ",
                       name, " does not call kiln_grid_enter() (Note [Early launch])");
  std::vector<char> image = build(name, source, arch);
  kiln::cuda::DeviceGuard guard(device);
  cudaLibrary_t library = nullptr;
  KILN_CUDA_CHECK_DEVICE(
      cudaLibraryLoadData(&library, image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
      device);
  cudaKernel_t kernel = nullptr;
  const cudaError_t got = cudaLibraryGetKernel(&kernel, library, name.c_str());
  if (got != cudaSuccess) {
    (void)cudaLibraryUnload(library);
    KILN_CUDA_CHECK_DEVICE(got, device);
  }
  e.library = library;
  e.kernel.store(kernel, std::memory_order_release);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  {
    std::lock_guard<std::mutex> stats_lock(loader().mu);
    loader().stats.ready_ms += ms;
  }
  return kernel;
}

namespace {

bool early_launch_enabled() {
  static const bool on = env_flag("KILN_PDL", true);
  return on;
}

}  // namespace

bool launches_early(int device) {
  return early_launch_enabled() && kiln::cuda::device_properties(device).major >= 9;
}

cudaError_t launch_generated(const void* kernel, dim3 grid, dim3 block, size_t shared_bytes,
                             void** params, cudaStream_t stream, int device) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute early{};
  early.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  early.val.programmaticStreamSerializationAllowed = 1;
  if (launches_early(device)) {
    config.attrs = &early;
    config.numAttrs = 1;
  }
  return cudaLaunchKernelExC(&config, kernel, params);
}

KernelLoaderStats kernel_loader_stats() {
  KernelLoaderStats out;
  {
    std::lock_guard<std::mutex> lock(loader().mu);
    out = loader().stats;
  }
  out.launches = loader().launches.load(std::memory_order_relaxed);
  return out;
}

void record_launch() {
  loader().launches.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace kiln::jit::cuda
