#include "jit/cache/kernel_cache.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "tests/support/testing.h"

namespace {

using kiln::jit::DiskCache;

std::string fresh_dir(const char* name) {
  return kiln::testing::temp_path(std::string("cache_") + name);
}

std::string entry_path(const DiskCache& c, const std::string& key) {
  char name[32];
  std::snprintf(name, sizeof name, "%016llx.bin",
                static_cast<unsigned long long>(kiln::jit::hash_bytes(key.data(), key.size())));
  return c.dir() + "/" + name;
}

TEST(KernelCache, StoresAndLoadsByKey) {
  DiskCache c(fresh_dir("roundtrip"));
  std::vector<char> payload = {'c', 'u', 'b', 'i', 'n', '\0', '\x7f'};
  EXPECT_FALSE(c.load("sm_90|kernel A").has_value());
  c.store("sm_90|kernel A", payload);
  auto got = c.load("sm_90|kernel A");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, payload);
  EXPECT_FALSE(c.load("sm_80|kernel A").has_value());  // the key is part of the lookup
}

TEST(KernelCache, CorruptFilesAreIgnored) {
  DiskCache c(fresh_dir("corrupt"));
  std::vector<char> payload(300, 'x');
  c.store("k", payload);
  // Flip one payload byte in the file on disk.
  char name[32];
  std::snprintf(name, sizeof name, "%016llx.bin",
                static_cast<unsigned long long>(kiln::jit::hash_bytes("k", 1)));
  std::string path = c.dir() + "/" + name;
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good());
    f.seekp(100);
    f.put('y');
  }
  EXPECT_FALSE(c.load("k").has_value());
  // Truncated.
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << "kilnkc01";
  }
  EXPECT_FALSE(c.load("k").has_value());
  c.store("k", payload);  // replaced by the next store
  EXPECT_TRUE(c.load("k").has_value());
}

TEST(KernelCache, AnUnwritableFolderOnlyCostsRecompiles) {
  DiskCache c("/proc/kiln_cannot_write_here");
  c.store("k", {'a'});
  EXPECT_FALSE(c.load("k").has_value());
}

// An entry that is not a regular file is a miss: no exception (a directory),
// no hang (a FIFO without a writer), no endless read (a device), and a file
// larger than any entry is not read to find out that it is not one.
TEST(KernelCache, EntriesThatAreNotRegularFilesAreMisses) {
  DiskCache c(fresh_dir("special"));
  c.store("seed", {'a'});  // creates the folder
  const std::string path = entry_path(c, "k");
  namespace fs = std::filesystem;

  ASSERT_EQ(mkdir(path.c_str(), 0755), 0);
  EXPECT_FALSE(c.load("k").has_value());
  c.store("k", {'b'});  // rename cannot replace a directory: skipped, not thrown
  EXPECT_FALSE(c.load("k").has_value());
  fs::remove(path);

  ASSERT_EQ(mkfifo(path.c_str(), 0644), 0);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(c.load("k").has_value());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  fs::remove(path);

  fs::create_symlink("/dev/zero", path);
  EXPECT_FALSE(c.load("k").has_value());
  fs::remove(path);

  {
    std::ofstream f(path, std::ios::binary);
    f << "kilnkc01";
  }
  fs::resize_file(path, uint64_t{2} << 30);  // sparse: costs no disk
  EXPECT_FALSE(c.load("k").has_value());
  fs::remove(path);

  c.store("k", {'c'});
  EXPECT_EQ(c.load("k"), std::vector<char>{'c'});
}

// A store whose write fails part way (here a file size limit; a full disk
// alike) keeps the entry it would have replaced, warns and leaves no
// temporary file behind.
TEST(KernelCache, AFailedWriteKeepsTheOldEntry) {
  DiskCache c(fresh_dir("short_write"));
  const std::vector<char> good(100, 'g');
  c.store("k", good);
  ASSERT_EQ(c.load("k"), good);

  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = saved;
  small.rlim_cur = 1024;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  ::testing::internal::CaptureStderr();
  // Smaller than a stream's buffer, so that the failure shows only when the
  // file is flushed and closed.
  c.store("k", std::vector<char>(4000, 'x'));
  std::string err = ::testing::internal::GetCapturedStderr();
  setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, old_handler);

  EXPECT_NE(err.find("a write failed"), std::string::npos) << err;
  EXPECT_EQ(c.load("k"), good);
  for (const auto& e : std::filesystem::directory_iterator(c.dir())) {
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
  }
}

// Note [Stale temporary files]: the first store removes the temporary
// files of writers that are gone (killed between the write and the rename):
// a pid that names no process on a file a minute old, or any file an hour
// old. A live writer's file, files named otherwise, links (and what they
// point at) and folders stay.
TEST(KernelCache, StaleTemporaryFilesAreRemoved) {
  namespace fs = std::filesystem;
  const std::string dir = fresh_dir("stale");
  fs::create_directories(dir);
  // A pid that names no process: a child's, exited and reaped.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  const std::string gone = std::to_string(child), me = std::to_string(getpid());
  const std::string entry = "0123456789abcdef.bin.tmp.";
  auto make = [&](const std::string& name, int minutes_old) {
    const std::string path = dir + "/" + name;
    std::ofstream(path) << "half an entry";
    const timespec when{time(nullptr) - 60 * minutes_old, 0};
    const timespec times[2] = {when, when};
    EXPECT_EQ(utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW), 0);
    return path;
  };
  const std::vector<std::string> removed = {
      make(entry + gone + ".140723", 2),  // its writer was killed
      make(entry + me + ".1", 61),        // a live pid, but an hour old: a reused pid
  };
  const std::vector<std::string> kept = {
      make(entry + me + ".2", 0),    // this process's, in progress
      make(entry + "1.3", 0),        // another live process's (init's), in progress
      make(entry + gone + ".4", 0),  // too young to judge (Note [Stale temporary files])
      make("notes" + entry.substr(16) + gone + ".1", 120),
      make("0123456789abcdeg.bin.tmp." + gone + ".1", 120),
      make(entry + gone, 120),
      make(entry + gone + ".", 120),
      make(entry + gone + ".1.bak", 120),
      make(entry + "x" + gone + ".1", 120),
      make(entry + "0.1", 120),
      make("0123456789abcdef.bin", 120),
  };
  const std::string target = make("target", 120);
  const std::string link = dir + "/" + entry + gone + ".5";
  fs::create_symlink(target, link);
  const std::string folder = dir + "/" + entry + gone + ".6";
  fs::create_directory(folder);

  DiskCache c(dir);
  EXPECT_FALSE(c.load("k").has_value());
  for (const std::string& p : removed) EXPECT_TRUE(fs::exists(p)) << p;  // not by a load
  c.store("k", {'a'});
  for (const std::string& p : removed) EXPECT_FALSE(fs::exists(p)) << p;
  for (const std::string& p : kept) EXPECT_TRUE(fs::exists(p)) << p;
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_TRUE(fs::exists(target));
  EXPECT_TRUE(fs::is_directory(folder));
  EXPECT_EQ(c.load("k"), std::vector<char>{'a'});
}

using kiln::testing::EnvScope;

// Note [Kernel cache location]: with HOME unset the cache is per user in
// /tmp, not /tmp/.cache/kiln, which any local user could make first.
TEST(KernelCacheLocation, DefaultIsTheUsersOwn) {
  EnvScope no_dir("KILN_CACHE_DIR", nullptr);
  {
    EnvScope no_home("HOME", nullptr);
    const kiln::jit::CacheLocation where = kiln::jit::default_cache_location();
    const std::string root = "/tmp/kiln-" + std::to_string(geteuid());
    EXPECT_EQ(where.private_root, root);
    EXPECT_EQ(where.dir, root + "/kernels");
  }
  const std::string home = fresh_dir("home_new");
  EnvScope with_home("HOME", home.c_str());
  const kiln::jit::CacheLocation where = kiln::jit::default_cache_location();
  EXPECT_EQ(where.private_root, home + "/.cache/kiln");
  EXPECT_EQ(where.dir, home + "/.cache/kiln/kernels");
  DiskCache c(where.dir, where.private_root);
  c.store("k", {'a'});
  EXPECT_EQ(c.load("k"), std::vector<char>{'a'});
  struct stat st {};
  ASSERT_EQ(stat(where.private_root.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 077, 0u) << std::oct << st.st_mode;
  {
    EnvScope explicit_dir("KILN_CACHE_DIR", "/somewhere/else");
    const kiln::jit::CacheLocation chosen = kiln::jit::default_cache_location();
    EXPECT_EQ(chosen.dir, "/somewhere/else/kernels");
    EXPECT_EQ(chosen.private_root, "");
  }
}

// A default cache folder that others may write, or that another user owns,
// is not used: its entries could be anyone's code.
TEST(KernelCacheLocation, AFolderOthersMayWriteIsRefused) {
  const std::string home = fresh_dir("home_open");
  const std::string root = home + "/.cache/kiln";
  std::filesystem::create_directories(root + "/kernels");
  ASSERT_EQ(chmod(root.c_str(), 0777), 0);
  {
    DiskCache c(root + "/kernels", root);
    ::testing::internal::CaptureStderr();
    c.store("k", {'a'});
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("may be written by other users (mode 0777)"), std::string::npos) << err;
    EXPECT_FALSE(c.load("k").has_value());
    EXPECT_TRUE(std::filesystem::is_empty(root + "/kernels"));
  }
  // A forged entry already there is not loaded either.
  DiskCache writer(root + "/kernels");
  writer.store("k", {'x'});
  {
    DiskCache c(root + "/kernels", root);
    ::testing::internal::CaptureStderr();
    EXPECT_FALSE(c.load("k").has_value());
    (void)::testing::internal::GetCapturedStderr();
  }
  ASSERT_EQ(chmod(root.c_str(), 0700), 0);
  if (geteuid() == 0) {  // only root can hand the folder to another user
    ASSERT_EQ(chown((root + "/kernels").c_str(), 65534, 65534), 0);
    DiskCache c(root + "/kernels", root);
    ::testing::internal::CaptureStderr();
    EXPECT_FALSE(c.load("k").has_value());
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("belongs to user 65534"), std::string::npos) << err;
  }
}

}  // namespace
