// layer_norm / rms_norm groups on the CPU over one long row split across
// workers (Note [Long rows] in jit/codegen_cpu/reduce_cpu.cpp), and outer
// softmax / log_softmax / var groups whose prologue stores members (Note
// [Storing prologues]): they run as one reduction group, match eager (stored
// members bit for bit), give the same bits for any worker count, and do so at
// both ISAs.

#include <gtest/gtest.h>
#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "jit/codegen_cpu/emitter.h"
#include "jit/codegen_cpu/reduce_cpu.h"
#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using namespace kiln::jit::cpu;
using Outputs = std::vector<Tensor>;

struct Tol {
  double rtol, atol;
};

Tol tolerance(kiln::DType t) {
  if (t == kiln::kFloat32) return {1e-5, 1e-5};
  return {1e-2, 1e-2};
}

bool same_bits(const Tensor& a, const Tensor& b) {
  kiln::EagerGuard g;
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return false;
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.numel() * ca.element_size()) == 0;
}

struct Counters {
  int64_t runs = cpu_reductions_run();
  int64_t refused = cpu_reductions_refused();
  int64_t long_rows = cpu_long_rows_split();
  int64_t storing = cpu_outer_storing_runs();
};

// What a lazy run of f did: one fused group, none refused; `long_rows` rows
// split across workers, `storing` outer groups with a storing prologue (-1:
// either).
struct Expect {
  int64_t long_rows = 0;
  int64_t storing = 0;
};

// Runs f eagerly and lazily; the first `stored` outputs (members the group
// stores) must be bit-identical, the rest within tolerance.
Outputs expect_fused_match(const std::function<Outputs()>& f, kiln::DType dt, Expect e,
                           size_t stored = 0) {
  Outputs want;
  {
    kiln::EagerGuard g;
    want = f();
  }
  const Counters before;
  Outputs got = f();
  kiln::sync();
  EXPECT_EQ(cpu_reductions_run() - before.runs, 1) << "not fused";
  EXPECT_EQ(cpu_reductions_refused() - before.refused, 0);
  if (tbb::this_task_arena::max_concurrency() > 1) {
    EXPECT_EQ(cpu_long_rows_split() - before.long_rows, e.long_rows);
  }
  if (e.storing >= 0) {
    EXPECT_EQ(cpu_outer_storing_runs() - before.storing, e.storing);
  }
  EXPECT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size() && k < want.size(); ++k) {
    SCOPED_TRACE(::testing::Message() << "output " << k);
    if (k < stored) {
      EXPECT_TRUE(same_bits(got[k], want[k])) << "a stored member differs from eager";
    } else {
      EXPECT_TENSOR_CLOSE_TOL(got[k], want[k], tolerance(dt).rtol, tolerance(dt).atol);
    }
  }
  return got;
}

// f's lazy results with TBB capped at 1 and at 2 workers: the same bits.
void expect_worker_independent(const std::function<Outputs()>& f) {
  Outputs one, two;
  {
    tbb::global_control c(tbb::global_control::max_allowed_parallelism, 1);
    one = f();
    kiln::sync();
  }
  {
    tbb::global_control c(tbb::global_control::max_allowed_parallelism, 2);
    two = f();
    kiln::sync();
  }
  ASSERT_EQ(one.size(), two.size());
  for (size_t k = 0; k < one.size(); ++k) {
    EXPECT_TRUE(same_bits(one[k], two[k])) << "output " << k << " depends on the worker count";
  }
}

using kiln::testing::IsaScope;

Tensor random(std::vector<int64_t> shape, kiln::DType dt, const char* layout, uint64_t seed,
              double lo = -3, double hi = 3) {
  kiln::EagerGuard g;
  return kiln::testing::random_tensor(shape, dt, layout, seed, lo, hi);
}

constexpr int64_t kLong = 300001;  // past kLongRow, not a multiple of the pieces or the lanes

// Layer norm and rms norm over one long row (split) and two (a row per
// worker, the same piece arithmetic): plain, with weight and bias, with a
// prologue that stores a member, on dense, sliced and strided rows.
void long_norm_rows(kiln::DType dt, const char* isa_tag) {
  uint64_t seed = 11;
  for (int64_t rows : {1, 2}) {
    for (const char* layout : {"contiguous", "offset", "strided", "transposed"}) {
      const std::vector<int64_t> shape{rows, kLong};
      SCOPED_TRACE(::testing::Message()
                   << isa_tag << " " << dt << " rows " << rows << " " << layout);
      Tensor x = random(shape, dt, layout, seed++, -4, 6);
      Tensor w = random({kLong}, dt, "contiguous", seed++);
      Tensor b = random({kLong}, dt, "contiguous", seed++);
      const int64_t split = rows < tbb::this_task_arena::max_concurrency() ? rows : 0;
      const Expect e{split, 0};
      auto ln = [&] { return Outputs{kiln::layer_norm(x, {kLong})}; };
      auto rms = [&] { return Outputs{kiln::rms_norm(x, {kLong})}; };
      expect_fused_match(ln, dt, e);
      expect_fused_match(rms, dt, e);
      expect_fused_match([&] { return Outputs{kiln::layer_norm(x, {kLong}, w, b)}; }, dt, e);
      expect_fused_match([&] { return Outputs{kiln::rms_norm(x, {kLong}, w, 1e-6)}; }, dt, e);
      // h is stored by the group's prologue (the first sweep's only).
      auto stored = [&] {
        Tensor h = x * 2.0 + 1.0;
        return Outputs{h, kiln::layer_norm(h, {kLong}, w, b)};
      };
      expect_fused_match(stored, dt, e, 1);
      expect_fused_match(
          [&] {
            Tensor h = x - 0.25;
            return Outputs{h, kiln::rms_norm(h, {kLong}) * 2.0};
          },
          dt, e, 1);
      if (std::string(layout) == "contiguous") {
        expect_worker_independent(ln);
        expect_worker_independent(rms);
        expect_worker_independent(stored);
      }
    }
  }
}

TEST(CpuNormRows, LongRowsMatchEager) {
  for (kiln::DType dt : {kiln::kFloat32, kiln::kFloat16, kiln::kBFloat16}) long_norm_rows(dt, "");
}

TEST(CpuNormRows, LongRowsAvx2) {
  if (!isa_supported(Isa::kAvx2)) GTEST_SKIP() << "this CPU lacks AVX2";
  IsaScope isa("avx2");
  long_norm_rows(kiln::kFloat32, "avx2");
}

// Cancellation: a large common offset, a small spread. The float64 piece
// sums must keep the variance as a row in one piece does.
TEST(CpuNormRows, LongRowLargeMean) {
  Tensor x;
  {
    kiln::EagerGuard g;
    x = kiln::testing::random_tensor({1, kLong}, kiln::kFloat32, "contiguous", 5, -1, 1) + 1000.0;
  }
  const int64_t split = tbb::this_task_arena::max_concurrency() > 1 ? 1 : 0;
  expect_fused_match([&] { return Outputs{kiln::layer_norm(x, {kLong})}; }, kiln::kFloat32,
                     {split, 0});
  expect_fused_match([&] { return Outputs{kiln::rms_norm(x, {kLong})}; }, kiln::kFloat32,
                     {split, 0});
}

// softmax / log_softmax / var over a non-last dim of h = x * 2 + 1, h also an
// output: one group, h stored once and bit-identical to eager.
void outer_storing(kiln::DType dt, const char* isa_tag) {
  uint64_t seed = 101;
  struct Case {
    std::vector<int64_t> shape;
    const char* layout;
    int64_t dim;
    int outer;  // runs the outer schedule: 1, 0 (rows, gathered) or -1 (either)
  };
  // "permuted": [T, B, C] seen as [B, T, C] (dims 0 and 1 swapped), reduced
  // over dim 1; C stays dense. A size-1 kept dim runs as rows; a transposed
  // [C, T] reduced over dim 1 as rows or outer, as the layout chosen for the
  // stored members makes it.
  const Case cases[] = {
      {{37, 100}, "contiguous", 0, 1},  {{3, 17}, "offset", 0, 1},
      {{2, 9, 33}, "contiguous", 1, 1}, {{2, 9, 33}, "offset", 0, 1},
      {{5, 11, 40}, "permuted", 1, 1},  {{40, 24}, "transposed", 1, -1},
      {{64, 1}, "contiguous", 0, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << isa_tag << " " << dt << " " << kiln::IntArrayRef(c.shape)
                                      << " " << c.layout << " dim " << c.dim);
    Tensor x;
    if (std::string(c.layout) == "permuted") {
      x = random({c.shape[1], c.shape[0], c.shape[2]}, dt, "contiguous", seed++, -4, 4);
      kiln::EagerGuard g;
      x = x.transpose(0, 1);
    } else {
      x = random(c.shape, dt, c.layout, seed++, -4, 4);
    }
    Tensor w = random({c.shape.back()}, dt, "contiguous", seed++);
    const Expect e{0, c.outer};
    auto sm = [&] {
      Tensor h = x * 2.0 + 1.0;
      return Outputs{h, kiln::softmax(h, c.dim)};
    };
    expect_fused_match(sm, dt, e, 1);
    expect_fused_match(
        [&] {
          Tensor h = x * 2.0 + 1.0;
          return Outputs{h, kiln::log_softmax(h, c.dim)};
        },
        dt, e, 1);
    // Two stored members, an epilogue with a broadcast operand.
    expect_fused_match(
        [&] {
          Tensor h = x - 0.5, g = h * h;
          return Outputs{h, g, kiln::softmax(g + h, c.dim) * w + 1.0};
        },
        dt, e, 2);
    expect_fused_match(
        [&] {
          Tensor h = x * 2.0 + 1.0;
          return Outputs{h, kiln::var(h, {c.dim})};
        },
        dt, e, 1);
    expect_worker_independent(sm);
  }
}

TEST(CpuNormRows, OuterStoringPrologueMatchesEager) {
  for (kiln::DType dt : {kiln::kFloat32, kiln::kFloat16, kiln::kBFloat16}) outer_storing(dt, "");
}

TEST(CpuNormRows, OuterStoringPrologueAvx2) {
  if (!isa_supported(Isa::kAvx2)) GTEST_SKIP() << "this CPU lacks AVX2";
  IsaScope isa("avx2");
  for (kiln::DType dt : {kiln::kFloat32, kiln::kBFloat16}) outer_storing(dt, "avx2");
}

// An in-place prologue store (the member's buffer is also the prologue's
// input): the old values must be read by every sweep before the last writes.
TEST(CpuNormRows, OuterInPlacePrologue) {
  for (kiln::DType dt : {kiln::kFloat32, kiln::kBFloat16}) {
    SCOPED_TRACE(::testing::Message() << dt);
    Tensor x = random({33, 70}, dt, "contiguous", 3, -4, 4);
    auto f = [&] {
      Tensor t;
      {
        kiln::EagerGuard g;
        t = x.clone();
      }
      t.mul_(2.0);
      return Outputs{t, kiln::softmax(t, 0)};
    };
    expect_fused_match(f, dt, {0, 1}, 1);
  }
}

}  // namespace
