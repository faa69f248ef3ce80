// Must-fail cases of memory exhaustion: an op that runs out of host memory
// raises kiln::Error naming it (Note [Out of memory in a kernel]), never
// std::bad_alloc, and a product under a capped address space fails instead of
// hanging in OpenBLAS (Note [OpenBLAS under a memory cap]). The process goes
// on: after the memory comes back, the same calls succeed.
//
// The capped cases run in a child process (this binary, one test) with a
// watchdog, so a hang fails the test rather than the suite; sanitizer builds
// skip them, since the sanitizers' own mappings do not work under RLIMIT_AS.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "allocator/allocator.h"
#include "kiln/kiln.h"
#include "tests/support/testing.h"

extern char** environ;

namespace {

using kiln::Tensor;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

// A custom op whose kernel fails to allocate, as a kernel's scratch vector does.
Tensor throw_bad_alloc(const Tensor&) {
  throw std::bad_alloc();
}

constexpr int64_t kMoreThanTheMachine = int64_t{1} << 61;

// Custom ops whose kernels run out of memory inside another op, and after one.
Tensor empty_inside(const Tensor&) {
  return kiln::empty({kMoreThanTheMachine}, kiln::TensorOptions(kiln::kInt8));
}
Tensor allocate_after_an_op(const Tensor& x) {
  Tensor y = kiln::add(x, x);
  (void)kiln::alloc::cpu_allocator().allocate(static_cast<size_t>(kMoreThanTheMachine));
  return y;
}

// No Meta kernel: in lazy mode it runs at once, flushing the trace first.
Tensor same(const Tensor& x) {
  return x.clone();
}

KILN_LIBRARY(oomtest, m) {
  m.def("throw_bad_alloc(Tensor x) -> Tensor");
  m.def("same(Tensor x) -> Tensor");
  m.def("empty_inside(Tensor x) -> Tensor");
  m.def("allocate_after_an_op(Tensor x) -> Tensor");
}
KILN_LIBRARY_IMPL(oomtest, CPU, m) {
  m.impl("throw_bad_alloc", &throw_bad_alloc);
  m.impl("empty_inside", &empty_inside);
  m.impl("allocate_after_an_op", &allocate_after_an_op);
  m.impl("same", &same);
}

TEST(OutOfMemoryErrors, BadAllocInAKernelIsAKilnError) {
  static const kiln::TypedOp<Tensor(const Tensor&)> op("oomtest::throw_bad_alloc");
  Tensor x = kiln::ones({4});
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    EXPECT_KILN_ERROR(op(x),
                      "[oomtest::throw_bad_alloc] out of memory: expected the op's host "
                      "scratch memory to be available, got std::bad_alloc");
    EXPECT_KILN_ERROR(kiln::call_op("oomtest::throw_bad_alloc", {x}),
                      "[oomtest::throw_bad_alloc] out of memory");
    // The process goes on.
    EXPECT_TENSOR_CLOSE(kiln::add(x, x), kiln::full({4}, 2.0));
  }
}

// Note [Out of memory names the op]: the allocator's error leads with the op
// whose kernel asked, the innermost one where ops nest, and names the
// allocator after it; outside any op it is the allocator's own, as before.
TEST(OutOfMemoryErrors, TheAllocatorsErrorNamesTheOp) {
  auto touch = [](const Tensor& t) { (void)t.data_ptr(); };  // materializes a lazy result
  Tensor x = kiln::ones({4});
  static const kiln::TypedOp<Tensor(const Tensor&)> inside("oomtest::empty_inside");
  static const kiln::TypedOp<Tensor(const Tensor&)> after("oomtest::allocate_after_an_op");
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    EXPECT_KILN_ERROR(touch(kiln::empty({kMoreThanTheMachine}, kiln::TensorOptions(kiln::kInt8))),
                      "[empty] out of memory: tried to allocate 2305843009213693952 bytes, more "
                      "than this machine's ");
    EXPECT_KILN_ERROR(touch(kiln::empty({kMoreThanTheMachine}, kiln::TensorOptions(kiln::kInt8))),
                      " bytes of memory and swap (cpu allocator: ");
    // A product of 2^40 float32 elements: its kernel asks for 4 TiB.
    Tensor a = kiln::ones({int64_t{1} << 20, 1}), b = kiln::ones({1, int64_t{1} << 20});
    EXPECT_KILN_ERROR(touch(kiln::matmul(a, b)),
                      "[matmul] out of memory: tried to allocate 4398046511104 bytes");
    EXPECT_KILN_ERROR(touch(inside(x)), "[empty] out of memory");
    EXPECT_KILN_ERROR(touch(after(x)),
                      "[oomtest::allocate_after_an_op] out of memory: tried to allocate");
    // Outside any op, after ops that threw: the allocator's own message.
    EXPECT_KILN_ERROR(
        kiln::alloc::cpu_allocator().allocate(static_cast<size_t>(kMoreThanTheMachine)),
        "[cpu allocator] out of memory: tried to allocate 2305843009213693952 bytes, more than "
        "this machine's ");
    EXPECT_TENSOR_CLOSE(kiln::add(x, x), kiln::full({4}, 2.0));
  }
  // A flush that an op's lazy kernel starts runs other work than that op's:
  // a fused kernel's output (here 4 TiB) is the allocator's alone to name.
  static const kiln::TypedOp<Tensor(const Tensor&)> same("oomtest::same");
  Tensor y = kiln::ones({1}).expand({int64_t{1} << 40}) + 1.0;
  (void)same(x);
  EXPECT_KILN_ERROR(touch(y), "[cpu allocator] out of memory: tried to allocate 4398046511104");
}

// Note [Requests larger than the machine]: refused with the allocator's
// out-of-memory error before any counter adds them (a sanitizer build
// stopped at their int64 sum, or at its own allocator), and the process goes
// on. Found by CallOpFuzz with other seeds: linspace of 2^61 int8 steps, and
// chunk of an empty dim into 2^48 pieces.
TEST(OutOfMemoryErrors, RequestsLargerThanTheMachineAreRefused) {
  const int64_t huge = int64_t{1} << 61;
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    auto touch = [](const Tensor& t) { (void)t.data_ptr(); };  // materializes a lazy result
    EXPECT_KILN_ERROR(touch(kiln::empty({huge}, kiln::TensorOptions(kiln::kInt8))),
                      "out of memory: tried to allocate");
    EXPECT_KILN_ERROR(touch(kiln::linspace(0, 0, huge, kiln::TensorOptions(kiln::kInt8))),
                      "out of memory: tried to allocate");
    Tensor e = kiln::empty({1, 2, 0});
    EXPECT_KILN_ERROR(kiln::chunk(e, int64_t{1} << 48, -1), "[chunk] out of memory");
    EXPECT_EQ(kiln::chunk(e, 3, -1).size(), 3u);  // PyTorch's `chunks` empty pieces
    EXPECT_TENSOR_CLOSE(kiln::add(kiln::ones({4}), kiln::ones({4})), kiln::full({4}, 2.0));
  }
}

// A lazy contiguous() of a huge expanded view is an empty() and a copy_ into
// it: both fail for want of memory, and the error reaches the reader once.
// The copy's failure replaced the empty's on the storage the reader holds;
// the empty's used to be raised again, by the next unrelated read, as a
// failure nobody held.
TEST(OutOfMemoryErrors, AFailureReplacedOnAHeldStorageIsRaisedOnce) {
  auto touch = [](const Tensor& t) { (void)t.data_ptr(); };
  EXPECT_KILN_ERROR(touch(kiln::ones({1}).expand({int64_t{1} << 50}).contiguous()),
                    "out of memory: tried to allocate");
  EXPECT_EQ(kiln::ones({2}).sum().item<float>(), 2.0f);
  EXPECT_NO_THROW(kiln::sync());
}

// --- Capped address space, in a child process -------------------------------------

bool in_child() {
  return std::getenv("KILN_OOM_CHILD") != nullptr;
}

int64_t mapped_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmSize:", 0) == 0) return std::stoll(line.substr(7)) * 1024;
  }
  return -1;
}

// Caps the address space at what is mapped now plus `headroom`, for the scope.
class AddressCap {
 public:
  explicit AddressCap(int64_t headroom) {
    getrlimit(RLIMIT_AS, &saved_);
    rlimit r = saved_;
    r.rlim_cur = static_cast<rlim_t>(mapped_bytes() + headroom);
    EXPECT_EQ(setrlimit(RLIMIT_AS, &r), 0);
  }
  ~AddressCap() { setrlimit(RLIMIT_AS, &saved_); }

 private:
  rlimit saved_;
};

// Runs OutOfMemoryChild.<name> of this binary in a child process, killing it
// after `timeout`; "" when it passed, else what happened and its output.
std::string run_child(const std::string& name, std::chrono::seconds timeout) {
  const kiln::testing::ChildRun r =
      kiln::testing::run_test_in_child("OutOfMemoryChild." + name, {"KILN_OOM_CHILD=1"}, timeout);
  if (!r.error.empty()) return r.error + ":\n" + r.output;
  if (r.output.find("[  PASSED  ] 1 test") == std::string::npos) {
    return "the child ran no test:\n" + r.output;
  }
  return "";
}

TEST(OutOfMemoryErrors, TopkUnderAddressCap) {
  if (kSanitized) GTEST_SKIP() << "sanitizers cannot run under RLIMIT_AS";
  const std::string r = run_child("TopkUnderAddressCap", std::chrono::seconds(120));
  EXPECT_TRUE(r.empty()) << r;
}

TEST(OutOfMemoryErrors, MatmulUnderAddressCap) {
  if (kSanitized) GTEST_SKIP() << "sanitizers cannot run under RLIMIT_AS";
  const std::string r = run_child("MatmulUnderAddressCap", std::chrono::seconds(120));
  EXPECT_TRUE(r.empty()) << r;
}

// The children: skipped unless run by the tests above.

// topk's values, computed (in lazy mode the work runs here).
Tensor top4(const Tensor& x) {
  Tensor values = std::get<0>(kiln::topk(x, 4));
  (void)values.data_ptr();
  return values;
}

TEST(OutOfMemoryChild, TopkUnderAddressCap) {
  if (!in_child()) GTEST_SKIP() << "run by OutOfMemoryErrors.TopkUnderAddressCap";
  const int64_t n = int64_t{1} << 23;  // topk's scratch: n (value, index) pairs, 128 MiB
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    Tensor x = kiln::arange(n, kiln::TensorOptions(kiln::kFloat32)).contiguous();
    kiln::sync();
    {
      AddressCap cap(int64_t{48} << 20);
      EXPECT_KILN_ERROR(top4(x), "[topk] out of memory");
    }
    EXPECT_TENSOR_CLOSE(top4(x), kiln::tensor({8388607.f, 8388606.f, 8388605.f, 8388604.f}));
  }
}

TEST(OutOfMemoryChild, MatmulUnderAddressCap) {
  if (!in_child()) GTEST_SKIP() << "run by OutOfMemoryErrors.MatmulUnderAddressCap";
  kiln::EagerGuard eager;
  kiln::manual_seed(17);
  const int64_t n = 4096;
  Tensor a = kiln::randn({n, n}), b = kiln::randn({n, n});
  {
    // Room for the 64 MiB result, not for OpenBLAS's 128 MiB work buffer.
    AddressCap cap(int64_t{96} << 20);
    EXPECT_KILN_ERROR(kiln::matmul(a, b), "[gemm] out of memory");
  }
  // Uncapped, the product runs: check a few entries against float64 sums.
  Tensor c = kiln::matmul(a, b);
  for (int64_t i : {int64_t{0}, int64_t{1234}, n - 1}) {
    const double ref =
        kiln::sum(a[i].to(kiln::kFloat64) * b.select(1, i).to(kiln::kFloat64)).item<double>();
    EXPECT_NEAR(c[i][i].item<double>(), ref, 1e-3 * std::sqrt(static_cast<double>(n)));
  }
}

}  // namespace
