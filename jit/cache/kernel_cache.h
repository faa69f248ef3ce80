#pragma once

// Note [Kernel disk cache]
// Compiled kernels are kept on disk under $KILN_CACHE_DIR (default
// ~/.cache/kiln)/kernels/, one file per key. The key names everything the
// binary depends on: the group's structure and layouts, the target (sm_90,
// avx512), the compiler's version and kiln's. A file holds a magic word, the
// key, the payload and a 64-bit hash of both; it is written to a temporary
// name and renamed, so readers see whole files or none. A file that fails any
// check is ignored (and replaced by the next store), never trusted. Loading
// never throws: an entry that is not a regular file (a directory, a FIFO, a
// link to a device), is larger than any entry or cannot be read is a miss,
// logged on the perf channel (Note [Reading untrusted paths]). A store that
// cannot write its whole file leaves the previous entry in place.

#include <atomic>
#include <optional>
#include <string>
#include <vector>

namespace kiln::jit {

class DiskCache {
 public:
  // The process-wide cache at $KILN_CACHE_DIR/kernels (created on first store).
  static DiskCache& instance();
  explicit DiskCache(std::string dir);

  std::optional<std::vector<char>> load(const std::string& key) const;
  // Best effort: a cache that cannot be written only costs recompiles (logged once).
  void store(const std::string& key, const std::vector<char>& payload) const;
  const std::string& dir() const { return dir_; }

 private:
  std::string path_for(const std::string& key) const;
  std::string dir_;
  mutable std::atomic<bool> warned_{false};  // the "not writable" warning, once per cache
};

uint64_t hash_bytes(const void* data, size_t n, uint64_t seed = 0);

}  // namespace kiln::jit
