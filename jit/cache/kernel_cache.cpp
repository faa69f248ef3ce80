#include "jit/cache/kernel_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <stdexcept>
#include <string_view>

#include "kiln/logging.h"
#include "runtime/core/regular_file.h"

namespace kiln::jit {
namespace {

constexpr char kMagic[8] = {'k', 'i', 'l', 'n', 'k', 'c', '0', '1'};

// The largest entry load reads or store writes: a kernel image or an algorithm
// choice is far smaller, and a bigger file is not read to find that out.
constexpr int64_t kMaxEntryBytes = int64_t{256} << 20;

bool make_dirs(const std::string& path, mode_t mode = 0755) {
  std::string partial;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      if (!partial.empty() && mkdir(partial.c_str(), mode) != 0 && errno != EEXIST) return false;
    }
    if (i < path.size()) partial += path[i];
  }
  return true;
}

// "" when `path` is a folder only this user may write; else what is wrong.
std::string private_dir_problem(const std::string& path, bool may_be_link) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return path + " cannot be read: " + std::strerror(errno);
  if (S_ISLNK(st.st_mode)) {
    if (!may_be_link) return path + " is a link";
    if (stat(path.c_str(), &st) != 0) return path + " cannot be read: " + std::strerror(errno);
  }
  if (!S_ISDIR(st.st_mode)) return path + " is not a folder";
  if (st.st_uid != geteuid()) {
    return path + " belongs to user " + std::to_string(st.st_uid) + ", not this one (" +
           std::to_string(geteuid()) + ")";
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return path + " may be written by other users (mode " + mode + ")";
  }
  return "";
}

// Note [Stale temporary files]
// store() writes <entry>.tmp.<pid>.<n> and renames it over <entry>; a writer
// killed in between leaves its temporary file for good. The first store of
// each DiskCache (once per process for the process-wide one) removes those
// whose writer is gone: its pid names no process (kill(pid, 0) fails with
// ESRCH) and the file is a minute old, or the file is an hour old whatever
// the pid, which may have been reused. A write takes milliseconds, so no
// live writer's file is that old; the minute spares a writer that shares the
// folder from another pid namespace, where its pid names nothing here (were
// its file removed, its rename would fail: a lost entry and a warning).
// Only regular files named exactly so are removed, by name within the
// folder: a link is not followed nor removed, and nothing else is touched.
constexpr time_t kDeadWriterAge = 60;
constexpr time_t kAbandonedAge = 60 * 60;

// The writer's pid in a temporary file's name, "<16 hex digits>.bin.tmp.<pid>.<n>"
// as store() makes it; 0 when `name` is not one.
pid_t temporary_file_writer(std::string_view name) {
  constexpr std::string_view kInfix = ".bin.tmp.";
  auto digits = [](std::string_view s) {
    return !s.empty() && s.size() <= 20 &&
           s.find_first_not_of("0123456789") == std::string_view::npos;
  };
  if (name.size() < 16 + kInfix.size() ||
      name.substr(0, 16).find_first_not_of("0123456789abcdef") != std::string_view::npos ||
      name.substr(16, kInfix.size()) != kInfix) {
    return 0;
  }
  const std::string_view rest = name.substr(16 + kInfix.size());
  const size_t dot = rest.find('.');
  if (dot == std::string_view::npos || !digits(rest.substr(0, dot)) ||
      !digits(rest.substr(dot + 1)) || dot > 9) {
    return 0;
  }
  return static_cast<pid_t>(std::stol(std::string(rest.substr(0, dot))));
}

void remove_stale_temporary_files(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  DIR* d = fdopendir(fd);
  if (d == nullptr) {
    ::close(fd);
    return;
  }
  const time_t now = std::time(nullptr);
  while (const dirent* e = readdir(d)) {
    const pid_t pid = temporary_file_writer(e->d_name);
    if (pid <= 0) continue;
    struct stat st {};
    if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    const time_t age = now - st.st_mtime;
    const bool writer_gone = ::kill(pid, 0) != 0 && errno == ESRCH;
    if ((writer_gone && age >= kDeadWriterAge) || age >= kAbandonedAge) {
      if (unlinkat(fd, e->d_name, 0) == 0) {
        KILN_LOG(Perf, "kernel cache: removed ", dir, "/", e->d_name, ", a temporary file ",
                 writer_gone ? "whose writer is gone" : "an hour old");
      }
    }
  }
  closedir(d);  // closes fd
}

void put_u64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}

uint64_t get_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

}  // namespace

uint64_t hash_bytes(const void* data, size_t n, uint64_t seed) {
  // FNV-1a 64, then a final avalanche.
  uint64_t h = 1469598103934665603ull ^ seed;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

CacheLocation default_cache_location() {
  if (const char* d = std::getenv("KILN_CACHE_DIR"); d && *d) {
    return {std::string(d) + "/kernels", ""};
  }
  const char* home = std::getenv("HOME");
  const std::string root =
      home && *home ? std::string(home) + "/.cache/kiln" : "/tmp/kiln-" + std::to_string(geteuid());
  return {root + "/kernels", root};
}

DiskCache& DiskCache::instance() {
  static DiskCache* cache = [] {
    CacheLocation where = default_cache_location();
    return new DiskCache(std::move(where.dir), std::move(where.private_root));
  }();
  return *cache;
}

DiskCache::DiskCache(std::string dir, std::string private_root)
    : dir_(std::move(dir)), private_root_(std::move(private_root)) {}

bool DiskCache::usable() const {
  std::call_once(checked_, [&] {
    std::string why;
    if (private_root_.empty()) {
      // The user's own choice: used as given, but an open folder is worth a word.
      for (const std::string& path : {dir_, dir_.substr(0, dir_.rfind('/'))}) {
        struct stat st {};
        if (!path.empty() && stat(path.c_str(), &st) == 0 && (st.st_mode & S_IWOTH) != 0) {
          std::fprintf(stderr,
                       "[kiln] kernel cache folder %s may be written by any user, who could put "
                       "code there that kiln runs (Note [Kernel cache location])\n",
                       path.c_str());
          break;
        }
      }
      return;
    }
    // Note [Kernel cache location]: made 0700 where missing (a failure shows
    // in store), then each folder from dir_ up to the root must be this
    // user's alone, the root in /tmp a folder and not a link.
    make_dirs(dir_, 0700);
    const bool in_tmp = private_root_.rfind("/tmp/", 0) == 0;
    for (std::string path = dir_;; path.resize(path.rfind('/'))) {
      why = private_dir_problem(path, /*may_be_link=*/!(in_tmp && path == private_root_));
      if (!why.empty() || path.size() <= private_root_.size()) break;
    }
    if (!why.empty()) {
      usable_ = false;
      std::fprintf(stderr,
                   "[kiln] kernel cache at %s is not used: %s; kernels will be recompiled in "
                   "each process\n",
                   dir_.c_str(), why.c_str());
    }
  });
  return usable_;
}

std::string DiskCache::path_for(const std::string& key) const {
  char name[32];
  std::snprintf(name, sizeof name, "%016llx.bin",
                static_cast<unsigned long long>(hash_bytes(key.data(), key.size())));
  return dir_ + "/" + name;
}

std::optional<std::vector<char>> DiskCache::load(const std::string& key) const {
  // Any failure is a miss: a cache entry is never worth an exception (Note [Kernel disk cache]).
  if (!usable()) return std::nullopt;
  const std::string path = path_for(key);
  auto bad = [&](const std::string& why) {
    KILN_LOG(Perf, "kernel cache: ignoring ", path, ": ", why);
    return std::nullopt;
  };
  try {
    RegularFile f(path);
    if (f.missing()) return std::nullopt;
    if (!f.ok()) return bad(f.problem());
    // magic | key size | key | payload size | payload | hash(key + payload)
    if (f.size() > kMaxEntryBytes) {
      return bad(std::to_string(f.size()) + " bytes, more than an entry may hold");
    }
    const auto size = static_cast<uint64_t>(f.size());
    char head[16];
    if (size < 8 + 8 + 8 + 8 || !f.read(head, sizeof head) || std::memcmp(head, kMagic, 8) != 0)
      return bad("bad magic");
    uint64_t key_size = get_u64(head + 8);
    if (key_size != key.size() || 16 + key_size + 16 > size) return bad("bad key size");
    std::vector<char> rest(size - 16);
    if (!f.read(rest.data(), rest.size())) return bad("a read failed");
    if (std::memcmp(rest.data(), key.data(), key_size) != 0) return bad("a different key");
    uint64_t payload_size = get_u64(rest.data() + key_size);
    if (24 + key_size + payload_size + 8 != size) return bad("truncated");
    const char* payload = rest.data() + 8 + key_size;
    uint64_t h = hash_bytes(key.data(), key.size());
    h = hash_bytes(payload, payload_size, h);
    if (h != get_u64(payload + payload_size)) return bad("integrity hash mismatch");
    return std::vector<char>(payload, payload + payload_size);
  } catch (const std::exception& e) {
    return bad(e.what());
  }
}

void DiskCache::store(const std::string& key, const std::vector<char>& payload) const {
  if (!usable()) return;
  auto fail = [&](const std::string& why) {
    if (!warned_.exchange(true)) {
      std::fprintf(stderr,
                   "[kiln] kernel cache at %s is not writable (%s); kernels will be "
                   "recompiled in each process\n",
                   dir_.c_str(), why.c_str());
    }
  };
  if (24 + key.size() + payload.size() + 8 > static_cast<uint64_t>(kMaxEntryBytes)) {
    KILN_LOG(Perf, "kernel cache: not storing a ", payload.size(),
             "-byte entry, more than an entry may hold");
    return;
  }
  if (!make_dirs(dir_)) return fail("cannot create the folder");
  std::call_once(swept_, [&] { remove_stale_temporary_files(dir_); });
  std::string final_path = path_for(key);
  // rename() replaces a file or a link but not a directory; an entry that is
  // not a regular file is someone else's, and is left alone.
  struct stat st {};
  if (lstat(final_path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
    KILN_LOG(Perf, "kernel cache: not storing ", final_path, ": ",
             S_ISDIR(st.st_mode) ? "a directory" : "a special file", " is in the way");
    return fail(final_path + " is not a regular file");
  }
  std::string blob(kMagic, 8);
  put_u64(blob, key.size());
  blob += key;
  put_u64(blob, payload.size());
  blob.append(payload.data(), payload.size());
  uint64_t h = hash_bytes(key.data(), key.size());
  h = hash_bytes(payload.data(), payload.size(), h);
  put_u64(blob, h);
  std::string tmp = final_path + ".tmp." + std::to_string(getpid()) + "." +
                    std::to_string(reinterpret_cast<uintptr_t>(&blob));
  // A write that fails (a full disk, a file size limit) must not rename a
  // short file over a good entry: the write and the close are both checked,
  // since a full disk may only show at the close.
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return fail(std::string("cannot create a file: ") + std::strerror(errno));
  bool written = write_all(fd, blob.data(), blob.size());
  int write_errno = errno;
  if (::close(fd) != 0 && written) {
    written = false;
    write_errno = errno;
  }
  if (!written) {
    std::remove(tmp.c_str());
    return fail(std::string("a write failed: ") + std::strerror(write_errno));
  }
  if (std::rename(tmp.c_str(), final_path.c_str()) != 0) {
    const int rename_errno = errno;
    std::remove(tmp.c_str());
    fail(std::string("rename failed: ") + std::strerror(rename_errno));
  }
}

}  // namespace kiln::jit
