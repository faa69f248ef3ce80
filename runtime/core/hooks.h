#pragma once

// Points where higher layers plug into runtime/ without runtime including them.

#include <optional>
#include <string>
#include <vector>

namespace kiln {

class StorageImpl;

// Computes a storage's pending (lazy) contents; installed by jit/.
using MaterializeHook = void (*)(StorageImpl* storage);
void set_materialize_hook(MaterializeHook hook);

// Runs every pending (lazy) computation; installed by jit/.
using SyncHook = void (*)();
void set_sync_hook(SyncHook hook);

// Note [Persistent cache hook]
// A few answers in runtime/ are worth keeping across processes (cuBLASLt's
// algorithm choices: Note [cuBLASLt algorithm disk cache]), but the disk cache
// belongs to jit/ (Note [Kernel disk cache]). jit/ installs it at load time;
// until then every lookup misses and stores are dropped.
struct PersistentCache {
  std::optional<std::vector<char>> (*load)(const std::string& key) = nullptr;
  void (*store)(const std::string& key, const std::vector<char>& payload) = nullptr;
};
void set_persistent_cache(PersistentCache cache);
std::optional<std::vector<char>> persistent_load(const std::string& key);
void persistent_store(const std::string& key, const std::vector<char>& payload);

}  // namespace kiln
