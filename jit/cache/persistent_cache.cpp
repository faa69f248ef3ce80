// Installs the kernel disk cache as runtime/'s persistent cache (Note
// [Persistent cache hook]): runtime/ may not include jit/.

#include "jit/cache/kernel_cache.h"
#include "runtime/core/hooks.h"

namespace kiln::jit {
namespace {

std::optional<std::vector<char>> load(const std::string& key) {
  return DiskCache::instance().load(key);
}

void store(const std::string& key, const std::vector<char>& payload) {
  DiskCache::instance().store(key, payload);
}

struct Install {
  Install() { set_persistent_cache({&load, &store}); }
} g_install;

}  // namespace
}  // namespace kiln::jit
