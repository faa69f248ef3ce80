// The persistent cache that jit/ installs (Note [Persistent cache hook]).

#include "runtime/core/hooks.h"

#include <atomic>

namespace kiln {
namespace {

// Installed once at load time, read on cache misses only.
std::atomic<decltype(PersistentCache::load)> g_load{nullptr};
std::atomic<decltype(PersistentCache::store)> g_store{nullptr};

}  // namespace

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

}  // namespace kiln
