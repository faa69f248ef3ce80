// Random integer and bool programs: chains of integer arithmetic (wrapping,
// floor and trunc division, remainder, fmod), bitwise and logical ops,
// comparisons, casts, clamps, where/masked_fill, and reductions and scans,
// over int8..int64, uint8, bool and float32 inputs mixed with 0-dim ones, in
// every layout. Each program runs eagerly (the reference), lazily, and inside
// jit::compile on a dim whose size changes call by call, through 0 (sizes
// become dynamic, then a size-0 call of the dynamic plan). The float-only
// random programs (random_program.h) never reach these dtypes or empty dims.
//   KILN_RANDOM_INT_PROGRAMS=N        runs N programs (default 300)
//   KILN_RANDOM_INT_PROGRAM_FIRST=S   starts from seed S (default 1)
//   KILN_RANDOM_INT_PROGRAM_SEED=S    replays one program

#include <gtest/gtest.h>

#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "kiln/kiln.h"
#include "tests/support/random_program.h"
#include "tests/support/testing.h"

namespace {

using kiln::Scalar;
using kiln::Tensor;

constexpr kiln::DType kDTypes[] = {kiln::kInt64, kiln::kInt32, kiln::kInt16,  kiln::kInt8,
                                   kiln::kUInt8, kiln::kBool,  kiln::kFloat32};
constexpr const char* kLayouts[] = {"contiguous", "transposed", "strided", "offset", "expanded"};

struct Choices {
  std::mt19937_64 rng;
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); }
};

Tensor nonzero_of(const Tensor& t) {
  return kiln::add(kiln::abs(t.dtype() == kiln::kBool ? t.to(kiln::kInt8) : t), 1);
}

Tensor not_bool(const Tensor& t) {
  return t.dtype() == kiln::kBool ? t.to(kiln::kInt16) : t;
}

// One step over the pool; `text` gets its description.
Tensor step(Choices& c, const std::vector<Tensor>& pool, std::string* text) {
  const Tensor a = pool[c.pick(static_cast<int>(pool.size()))];
  const Tensor b = pool[c.pick(static_cast<int>(pool.size()))];
  const int op = c.pick(24);
  const int s = c.pick(7) - 3;
  const bool keep = c.pick(2) == 1;
  const bool has_float = kiln::is_floating(a.dtype()) || kiln::is_floating(b.dtype());
  const bool reducible = a.dim() > 0 && a.numel() > 0;
  std::ostringstream os;
  os << "op " << op << " (" << kiln::dtype_name(a.dtype()) << a.sizes() << ", "
     << kiln::dtype_name(b.dtype()) << b.sizes() << ", s " << s << ", keepdim " << keep << ")";
  *text += os.str() + "\n";
  switch (op) {
    case 0:
      return kiln::add(a, b);
    case 1:
      return kiln::mul(a, b);
    case 2:
      return kiln::add(a, s);
    case 3:
      return kiln::mul(a, s == 0 ? Scalar(2.5) : Scalar(s));
    case 4:
      return kiln::floor_divide(not_bool(a), nonzero_of(b));
    case 5:
      return kiln::remainder(not_bool(a), s == 0 ? -3 : s);
    case 6:
      return kiln::fmod(not_bool(a), kiln::neg(nonzero_of(b)));
    case 7:
      return kiln::div(not_bool(a), kiln::neg(nonzero_of(b)), "trunc");
    case 8:
      return kiln::div(a, nonzero_of(b), "floor");
    case 9:
      return kiln::maximum(a, b);
    case 10:
      return kiln::where(kiln::gt(b, 0), a, b);
    case 11:
      return kiln::masked_fill(a, kiln::lt(b, s), Scalar(s));
    case 12:
      return a.dtype() == kiln::kBool ? kiln::logical_not(a) : kiln::neg(a);
    case 13:
      return has_float ? kiln::logical_xor(a, b) : kiln::bitwise_xor(a, b);
    case 14:
      return has_float ? kiln::logical_and(a, b) : kiln::bitwise_and(a, b);
    case 15:
      return kiln::ge(a, kiln::mul(b, 2));
    case 16:
      return a.dtype() == kiln::kBool ? a : kiln::clamp(a, Scalar(-2), Scalar(5));
    case 17:
      return a.to(kDTypes[c.pick(static_cast<int>(std::size(kDTypes)))]);
    case 18:
      return a.dim() == 0 ? kiln::sum(a) : kiln::sum(a, {-1}, keep);
    case 19:
      return reducible ? kiln::amax(a, {0}, keep) : a;
    case 20:
      return a.dim() == 0 ? kiln::cumsum(a, 0) : kiln::cumsum(a, -1);
    case 21:
      return reducible ? kiln::argmax(a, -1, keep) : a;
    case 22:
      return a.dim() == 0 ? kiln::prod(a) : kiln::prod(a, -1, keep);
    default:
      return reducible ? std::get<0>(kiln::min(a, 0, keep)) : a;
  }
}

struct RandomIntProgram {
  uint64_t seed;
  std::vector<int64_t> shape;
  int varying_dim = 0;
  int inputs = 1;
  int steps = 2;

  explicit RandomIntProgram(uint64_t s) : seed(s) {
    Choices c{std::mt19937_64(s)};
    const int rank = c.pick(3) + 1;
    for (int d = 0; d < rank; ++d) shape.push_back(c.pick(4) + 1);
    varying_dim = c.pick(rank);
    inputs = c.pick(3) + 1;
    steps = c.pick(6) + 2;
  }

  // The inputs with the varying dim at `size`: the same dtypes and layouts at every size.
  std::vector<Tensor> make_inputs(int64_t size) const {
    kiln::EagerGuard eager;
    Choices c{std::mt19937_64(seed * 7919 + 1)};
    std::vector<int64_t> s = shape;
    s[varying_dim] = size;
    std::vector<Tensor> out;
    for (int i = 0; i < inputs; ++i) {
      const kiln::DType dt = kDTypes[c.pick(static_cast<int>(std::size(kDTypes)))];
      const char* layout = kLayouts[c.pick(static_cast<int>(std::size(kLayouts)))];
      const bool zero_dim = c.pick(6) == 0;
      const double low = dt == kiln::kUInt8 ? 0 : -20;
      Tensor t = kiln::testing::random_tensor(zero_dim ? std::vector<int64_t>{} : s,
                                              dt == kiln::kBool ? kiln::kInt8 : dt, layout,
                                              seed + i, low, 20);
      out.push_back(dt == kiln::kBool ? kiln::gt(t, 0) : t);
    }
    return out;
  }

  std::vector<Tensor> run(const std::vector<Tensor>& in, std::string* text) const {
    Choices c{std::mt19937_64(seed * 31 + 7)};
    std::vector<Tensor> pool = in;
    text->clear();
    for (int k = 0; k < steps; ++k) pool.push_back(step(c, pool, text));
    return std::vector<Tensor>(pool.begin() + static_cast<std::ptrdiff_t>(in.size()), pool.end());
  }
};

// "" when both raise or neither does and the results are equal.
std::string same_outcome(const std::vector<Tensor>& expected, const std::string& expected_error,
                         const std::vector<Tensor>& actual, const std::string& actual_error) {
  if (expected_error.empty() != actual_error.empty()) {
    return "eager " + (expected_error.empty() ? "returned" : "raised '" + expected_error + "'") +
           ", this mode " + (actual_error.empty() ? "returned" : "raised '" + actual_error + "'");
  }
  for (size_t i = 0; i < expected.size() && expected_error.empty(); ++i) {
    std::string msg = kiln::testing::compare(actual[i], expected[i]);
    if (!msg.empty()) return "output " + std::to_string(i) + ": " + msg;
  }
  return "";
}

TEST(RandomIntPrograms, LazyAndCompiledMatchEagerThroughEmptySizes) {
  const auto [first, count] = kiln::testing::seeds_from_env("KILN_RANDOM_INT_PROGRAM", 1, 300);
  int failures = 0;
  for (uint64_t seed = first; seed < first + static_cast<uint64_t>(count) && failures < 5; ++seed) {
    const RandomIntProgram p(seed);
    kiln::jit::Options options;
    options.name = "random_int_program";
    options.mode = kiln::jit::Mode::Default;
    std::string text;
    auto compiled = kiln::jit::compile(
        [&](const std::vector<Tensor>& in) { return p.run(in, &text); }, options);
    const int64_t base = p.shape[p.varying_dim];
    for (int64_t size : {base, base + 2, int64_t{0}, base + 1}) {
      const std::vector<Tensor> in = p.make_inputs(size);
      std::vector<Tensor> eager, lazy, comp;
      std::string eager_error, lazy_error, comp_error, program;
      try {
        kiln::EagerGuard g;
        eager = p.run(in, &program);
      } catch (const kiln::Error& e) {
        eager_error = e.what();
      }
      // A failed op's error stays with its results (Note [Failures in a
      // trace]): reading them raises it.
      try {
        lazy = p.run(in, &text);
        for (const Tensor& t : lazy) (void)t.data_ptr();
      } catch (const kiln::Error& e) {
        lazy_error = e.what();
      }
      try {
        comp = compiled(in);
        for (const Tensor& t : comp) (void)t.data_ptr();
      } catch (const kiln::Error& e) {
        comp_error = e.what();
      }
      for (const auto& [mode, out, error] :
           {std::tuple{"lazy", &lazy, &lazy_error}, std::tuple{"compiled", &comp, &comp_error}}) {
        const std::string msg = same_outcome(eager, eager_error, *out, *error);
        if (msg.empty()) continue;
        ADD_FAILURE() << "seed " << seed << ", " << mode << ", dim " << p.varying_dim << " of size "
                      << size << ": " << msg << "\nprogram:\n"
                      << program << "replay: KILN_RANDOM_INT_PROGRAM_SEED=" << seed;
        ++failures;
      }
    }
  }
}

}  // namespace
