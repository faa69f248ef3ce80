// Lazy ops run after main returns: from an atexit handler, after glibc has
// destroyed the main thread's thread_locals (Note [Thread caches at thread
// exit]), and from a global's destructor, after function-local statics made
// during main are destroyed (Note [Profile totals at exit]). Each runs in a
// child process of this binary, which must compute the values and exit 0.

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

extern char** environ;

namespace {

// A small lazy program whose value is known: relu(x @ w) + 1 summed, with
// x and w all ones (8x16 @ 16x16: each of 128 entries is 17).
float lazy_value() {
  kiln::Tensor x = kiln::ones({8, 16}), w = kiln::ones({16, 16});
  return (kiln::relu(kiln::matmul(x, w)) + 1).sum().item<float>();
}

void run_after_main(const char* when) {
  for (int i = 0; i < 5; ++i) {
    const float v = lazy_value();
    if (v != 2176.0f) {
      std::printf("%s: got %f, expected 2176\n", when, static_cast<double>(v));
      std::fflush(stdout);
      std::_Exit(3);
    }
  }
  std::printf("%s: computed after main\n", when);
  std::fflush(stdout);
}

struct LateUser {
  bool armed = false;
  ~LateUser() {
    if (armed) run_after_main("global destructor");
  }
} g_late_user;

// Runs TeardownChild.<name> of this binary in a child process with `env`
// added; "" when it exited 0 and printed `expect`, else what happened.
std::string run_child(const std::string& name, const std::string& expect,
                      const std::vector<std::string>& env = {}) {
  std::vector<std::string> all{"KILN_TEARDOWN_CHILD=1"};
  all.insert(all.end(), env.begin(), env.end());
  const kiln::testing::ChildRun r =
      kiln::testing::run_test_in_child("TeardownChild." + name, all, std::chrono::seconds(120));
  if (!r.error.empty()) return r.error + ":\n" + r.output;
  if (r.output.find(expect) == std::string::npos) {
    return "the child did not print '" + expect + "':\n" + r.output;
  }
  return "";
}

bool in_child() {
  return std::getenv("KILN_TEARDOWN_CHILD") != nullptr;
}

TEST(TeardownChild, AtexitHandler) {
  if (!in_child()) GTEST_SKIP() << "run by Teardown.LazyOpsInAnAtexitHandler";
  EXPECT_EQ(lazy_value(), 2176.0f);
  std::atexit([] { run_after_main("atexit handler"); });
}

TEST(TeardownChild, GlobalDestructor) {
  if (!in_child()) GTEST_SKIP() << "run by Teardown.LazyOpsInAGlobalDestructor";
  EXPECT_EQ(lazy_value(), 2176.0f);
  g_late_user.armed = true;
}

TEST(Teardown, LazyOpsInAnAtexitHandler) {
  const std::string r = run_child("AtexitHandler", "atexit handler: computed after main");
  EXPECT_TRUE(r.empty()) << r;
}

TEST(Teardown, LazyOpsInAGlobalDestructor) {
  const std::string r = run_child("GlobalDestructor", "global destructor: computed after main");
  EXPECT_TRUE(r.empty()) << r;
}

// The profiles' totals are counted by every flush, also those after main.
TEST(Teardown, LazyOpsInAGlobalDestructorWhileProfiling) {
  const std::string r = run_child("GlobalDestructor", "global destructor: computed after main",
                                  {"KILN_FLUSH_PROFILE=1", "KILN_COMPILE_PROFILE=1"});
  EXPECT_TRUE(r.empty()) << r;
}

}  // namespace
