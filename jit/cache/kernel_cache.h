#pragma once

// Note [Kernel disk cache]
// Compiled kernels are kept on disk under $KILN_CACHE_DIR (default
// ~/.cache/kiln: Note [Kernel cache location])/kernels/, one file per key. The key names everything
// the binary depends on: the group's structure and layouts, the target (sm_90, avx512), the
// compiler's version and kiln's. A file holds a magic word, the key, the payload and a 64-bit hash
// of both; it is written to a temporary name and renamed, so readers see whole files or none. A
// file that fails any check is ignored (and replaced by the next store), never trusted. Loading
// never throws: an entry that is not a regular file (a directory, a FIFO, a
// link to a device), is larger than any entry or cannot be read is a miss,
// logged on the perf channel (Note [Reading untrusted paths]). A store that
// cannot write its whole file leaves the previous entry in place; temporary
// files a killed writer left are removed later (Note [Stale temporary files]).
//
// Note [Kernel cache location]
// An entry is machine code that kiln loads and runs, checked only against its
// key and an unkeyed hash: whoever may write the folder may make a process run
// their code. So the default folder is the user's alone: $HOME/.cache/kiln,
// or with HOME unset /tmp/kiln-<uid> (a fixed path in /tmp, as
// /tmp/.cache/kiln was, can be made first by another local user). Folders
// kiln makes there are 0700, and when one of them exists but another user owns
// it, or group or others may write it (or, in /tmp, it is a link), the cache
// is off for the process, with a warning once. An explicit KILN_CACHE_DIR is
// the user's choice and is used as given, with a warning when anyone may write
// it.

#include <atomic>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace kiln::jit {

class DiskCache {
 public:
  // The process-wide cache (Note [Kernel cache location]); never destroyed, so
  // that work after main returns may still use it.
  static DiskCache& instance();
  // A cache in `dir`. With `private_root` (an ancestor of `dir`, or `dir`):
  // the folders from it down to `dir` are made 0700, and checked to be this
  // user's alone on first use; the cache is off when they are not.
  explicit DiskCache(std::string dir, std::string private_root = "");

  std::optional<std::vector<char>> load(const std::string& key) const;
  // Best effort: a cache that cannot be written only costs recompiles (logged once).
  void store(const std::string& key, const std::vector<char>& payload) const;
  const std::string& dir() const { return dir_; }

 private:
  std::string path_for(const std::string& key) const;
  // Whether the cache may be used (checks the folders once: Note [Kernel cache location]).
  bool usable() const;
  std::string dir_;
  std::string private_root_;
  mutable std::once_flag checked_;
  mutable bool usable_ = true;
  mutable std::atomic<bool> warned_{false};  // the "not writable" warning, once per cache
  mutable std::once_flag swept_;             // Note [Stale temporary files], in kernel_cache.cpp
};

// Where the process-wide cache lives: `dir` from KILN_CACHE_DIR, HOME and the
// user id, and the root of the folders that must be the user's alone ("" for
// an explicit KILN_CACHE_DIR). Note [Kernel cache location].
struct CacheLocation {
  std::string dir;
  std::string private_root;
};
CacheLocation default_cache_location();

uint64_t hash_bytes(const void* data, size_t n, uint64_t seed = 0);

}  // namespace kiln::jit
