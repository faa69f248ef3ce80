#pragma once

// Random programs of pointwise ops, reductions and row normalizations over
// broadcast, non-contiguous, mixed-dtype inputs: the random fused graphs of
// tests/jit/plan/random_graph_test.cpp and the compiled random DAGs of
// tests/jit/compile/. A program is a list of seeded choices; running it twice
// (eager, lazy, compiled) replays exactly the same ops.

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace kiln::testing {

using kiln::Tensor;

inline constexpr int64_t kWideSizes[] = {8,    15,   16,   17,   31,   33,   63,  64,
                                         65,   127,  129,  255,  256,  257,  511, 768,
                                         1000, 1025, 2049, 2560, 3072, 4097, 5000};
inline constexpr int64_t kWideElements = 40000;

// Which seeds a random test runs, for longer runs by hand: `count` from
// `first` unless the environment says. With prefix P: P + "S"=N programs,
// P + "_FIRST"=S from seed S, P + "_SEED"=S that seed alone.
inline std::pair<uint64_t, int> seeds_from_env(const std::string& prefix, uint64_t first,
                                               int count) {
  if (const char* n = std::getenv((prefix + "S").c_str())) count = std::atoi(n);
  if (const char* s = std::getenv((prefix + "_FIRST").c_str()))
    first = std::strtoull(s, nullptr, 10);
  if (const char* s = std::getenv((prefix + "_SEED").c_str())) {
    first = std::strtoull(s, nullptr, 10);
    count = 1;
  }
  return {first, count};
}

// One program: a seed-determined list of steps over a growing pool of values.
class Program {
 public:
  // Inputs are made on the CPU and moved to `device`.
  explicit Program(uint64_t seed, kiln::Device device = kiln::Device::cpu(), bool wide = false)
      : rng_(seed), seed_(seed), device_(device), wide_(wide) {}

  // Builds the inputs and steps; both runs replay exactly the same choices.
  void generate() {
    std::uniform_int_distribution<int> rank_d(1, wide_ ? 3 : 4), size_d(1, 7);
    int rank = rank_d(rng_);
    for (int d = 0; d < rank; ++d) shape_.push_back(size_d(rng_));
    if (wide_) {
      const int64_t inner = kWideSizes[pick(static_cast<int>(std::size(kWideSizes)))];
      shape_.back() = inner;
      int64_t outer = 1;
      for (size_t d = 0; d + 1 < shape_.size(); ++d) {
        shape_[d] = std::max<int64_t>(1, std::min(shape_[d], kWideElements / (inner * outer)));
        outer *= shape_[d];
      }
    }
    int n_inputs = std::uniform_int_distribution<int>(1, 3)(rng_);
    const char* layouts[] = {"contiguous", "transposed", "strided", "offset", "expanded"};
    const kiln::DType dtypes[] = {kiln::kFloat32, kiln::kFloat32, kiln::kFloat16, kiln::kBFloat16};
    for (int i = 0; i < n_inputs; ++i) {
      std::vector<int64_t> s = shape_;
      // Broadcast: drop leading dims or set some to 1.
      for (size_t d = 0; d < s.size(); ++d) {
        if (pick(4) == 0) s[d] = 1;
      }
      if (pick(3) == 0 && s.size() > 1) s.erase(s.begin());
      const bool follows_lead = s.size() == shape_.size() && s[0] == shape_[0] && s[0] != 1;
      inputs_.push_back({s, dtypes[pick(4)], layouts[pick(5)], seed_ * 31 + i, follows_lead});
    }
    int n_steps = std::uniform_int_distribution<int>(1, 7)(rng_);
    for (int k = 0; k < n_steps; ++k) steps_.push_back(pick(1 << 20));
  }

  // Runs the program on inputs made from its seed; returns the values it
  // leaves (several, to force stores).
  std::vector<Tensor> run(std::string* text) { return run_on(make_inputs(0), text); }

  // The program's inputs; another `variant` gives other values of the same
  // layouts. A `lead` of 1 or more replaces the leading size of the inputs
  // that follow it (leading_inputs()); an `inner` of 2 or more, the last
  // size of those whose last dim is the program's (not broadcast).
  std::vector<Tensor> make_inputs(uint64_t variant, int64_t lead = 0, int64_t inner = 0) const {
    std::vector<Tensor> out;
    kiln::EagerGuard eager;
    for (const Input& in : inputs_) {
      std::vector<int64_t> shape = in.shape;
      if (lead > 0 && in.follows_lead) shape[0] = lead;
      if (inner > 1 && !shape.empty() && shape.back() == shape_.back() && shape.back() != 1) {
        shape.back() = inner;
      }
      Tensor t = kiln::testing::random_tensor(shape, in.dtype, in.layout,
                                              in.seed + variant * 1000003, -2, 2);
      out.push_back(device_.is_cpu() ? t : same_layout_copy(t, device_));
    }
    return out;
  }

  // Runs the program's steps on `inputs` (from make_inputs).
  std::vector<Tensor> run_on(const std::vector<Tensor>& inputs, std::string* text) {
    std::vector<Tensor> pool = inputs;
    std::ostringstream os;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const Input& in = inputs_[i];
      os << "  v" << i << " = input" << kiln::IntArrayRef(in.shape) << " " << in.dtype << " "
         << in.layout << "\n";
    }
    for (uint32_t step : steps_) {
      std::mt19937 s(step);
      auto choose = [&](size_t n) { return static_cast<size_t>(s() % n); };
      const Tensor& a = pool[choose(pool.size())];
      const Tensor& b = pool[choose(pool.size())];
      const Tensor& c = pool[choose(pool.size())];
      size_t ia = &a - &pool[0], ib = &b - &pool[0], ic = &c - &pool[0];
      Tensor out;
      std::string what;
      // Wide programs also take the op kernels of cases 34-39 (scans,
      // concatenation, flips, rolls, masked fills, copies of transposes).
      switch (choose(wide_ ? 40 : 34)) {
        case 0:
          out = a + b;
          what = "add";
          break;
        case 1:
          out = kiln::sub(a, b, 0.5);
          what = "sub alpha=0.5";
          break;
        case 2:
          out = a * b;
          what = "mul";
          break;
        case 3:
          out = a / (kiln::abs(b) + 0.5);
          what = "div(abs+0.5)";
          break;
        case 4:
          out = kiln::exp(kiln::clamp(a, -4.0, 4.0));
          what = "exp(clamp)";
          break;
        case 5:
          out = kiln::log(kiln::abs(a) + 0.1);
          what = "log(abs+0.1)";
          break;
        case 6:
          out = kiln::tanh(a);
          what = "tanh";
          break;
        case 7:
          out = kiln::sigmoid(a);
          what = "sigmoid";
          break;
        case 8:
          out = kiln::gelu(a, choose(2) ? "tanh" : "none");
          what = "gelu";
          break;
        case 9:
          out = kiln::silu(a);
          what = "silu";
          break;
        case 10:
          out = kiln::maximum(a, b);
          what = "maximum";
          break;
        case 11:
          out = kiln::minimum(a, b);
          what = "minimum";
          break;
        case 12: {
          // A discontinuity: its operands are inputs, identical in every run
          // (an intermediate differs by a rounding between eager and fused,
          // enough to flip a comparison near a tie).
          const size_t ja = choose(inputs_.size()), jb = choose(inputs_.size());
          out = kiln::where(kiln::lt(pool[ja], pool[jb]), pool[ja], c);
          ia = ja;
          ib = jb;
          what = "where(lt)";
          break;
        }
        case 13:
          out = kiln::relu(a) - 0.25;
          what = "relu-0.25";
          break;
        case 14:
          out = kiln::sqrt(kiln::abs(a));
          what = "sqrt(abs)";
          break;
        case 15:
          out = kiln::erf(a);
          what = "erf";
          break;
        case 16:
          out = kiln::sin(a) * kiln::cos(b);
          what = "sin*cos";
          break;
        case 17:
          out = kiln::pow(kiln::abs(a) + 0.1, 1.5);
          what = "pow(abs+0.1, 1.5)";
          break;
        case 18:
          out = a.to(choose(2) ? kiln::kFloat32 : kiln::kFloat16);
          what = "cast";
          break;
        case 19:
          out = a * 2.0 + 1.0;
          what = "a*2+1";
          break;
        case 20:
          out = kiln::neg(kiln::abs(a));
          what = "neg(abs)";
          break;
        case 21: {
          // As case 12: inputs, scaled exactly.
          const size_t ja = choose(inputs_.size()), jb = choose(inputs_.size());
          out = kiln::floor(pool[ja] * 2.0) + kiln::round(pool[jb] * 2.0);
          ia = ja;
          ib = jb;
          what = "floor(a*2)+round(b*2)";
          break;
        }
        case 22: {
          // An in-place write into a fresh value (b only where it broadcasts to it).
          out = a + 0.0;
          bool fits = b.dim() <= out.dim();
          for (int64_t d = 1; fits && d <= b.dim(); ++d) {
            int64_t bs = b.size(-d), os = out.size(-d);
            fits = bs == os || bs == 1;
          }
          if (fits) {
            kiln::mul_(out, b);
          } else {
            kiln::mul_(out, a);
          }
          what = "mul_";
          break;
        }
        case 23: {
          // A norm over every dim of a, whose weight and bias (of a's shape)
          // the reduction's prologue computes and its epilogue reads.
          Tensor w = kiln::sigmoid(a) + 0.5;
          if (choose(2)) {
            out = kiln::layer_norm(a, a.sizes(), w, kiln::tanh(a));
            what = "layer_norm(a, a.shape, sigmoid(a)+0.5, tanh(a))";
          } else {
            out = kiln::rms_norm(a, a.sizes(), w);
            what = "rms_norm(a, a.shape, sigmoid(a)+0.5)";
          }
          break;
        }
        case 24:
          out = kiln::softmax(a * 2.0, -1);
          what = "softmax(a*2, -1)";
          break;
        case 25: {
          Tensor s = a + b;
          out = kiln::layer_norm(s, {s.size(-1)});
          what = "layer_norm(a+b)";
          break;
        }
        case 26:
          out = kiln::rms_norm(a, {a.size(-1)}) * 1.5;
          what = "rms_norm*1.5";
          break;
        case 27:
          out = kiln::sum(a * a, {-1}, true) / 4.0;
          what = "sum(a*a, -1, keepdim)/4";
          break;
        case 28:
          out = kiln::amax(a, {0}, true) - a;
          what = "amax(a, 0, keepdim)-a";
          break;
        case 29:
          out = kiln::var(a, {-1}, 1, true) + 0.5;
          what = "var(a, -1, keepdim)+0.5";
          break;
        case 30:
          out = kiln::mean(kiln::exp(kiln::clamp(a, -3.0, 3.0))) + b;
          what = "mean(exp(clamp(a)))+b";
          break;
        case 31:
          out = kiln::log_softmax(a, 0);
          what = "log_softmax(a, 0)";
          break;
        case 32: {
          // An in-place write through a view stepping by 2 in the last dim
          // (a strided output of the fused kernel).
          out = a * 1.25;
          if (out.dim() >= 1 && out.size(-1) >= 2) {
            Tensor v = out.slice(-1, 0, out.size(-1), 2);
            // tanh + 1.5 stays away from 0: tanh + 0.5 cancelled near
            // tanh = -0.5, where an ulp of tanh was a visible difference.
            v.mul_(kiln::tanh(v) + 1.5);
          }
          what = "a*1.25; [..., ::2].mul_(tanh+1.5)";
          break;
        }
        case 33: {
          // softmax over a dim that is not the last one (when a has two or more).
          int64_t d = a.dim() >= 2 ? a.dim() - 2 : 0;
          out = kiln::softmax(a * 1.5, d);
          what = "softmax(a*1.5, -2)";
          break;
        }
        case 34:
          out = kiln::cumsum(a, -1, kiln::kFloat32) * 0.125;
          what = "cumsum(a, -1, float32)/8";
          break;
        case 35: {
          const int64_t n = a.size(-1);
          out = kiln::cat({a, a * 0.5}, -1).narrow(-1, n / 2, n);
          what = "cat(a, a/2, -1)[..., n/2 : n/2+n]";
          break;
        }
        case 36:
          out = kiln::flip(a, {-1}) + a;
          what = "flip(a, -1)+a";
          break;
        case 37:
          out = kiln::roll(a, {3}, {-1}) * a;
          what = "roll(a, 3, -1)*a";
          break;
        case 38:
          out = kiln::masked_fill(a * 1.5, kiln::gt(a, 0.5), 0.25);
          what = "masked_fill(a*1.5, a>0.5, 0.25)";
          break;
        case 39:
          out = a.dim() >= 2 ? kiln::clone(a.transpose(0, -1)).transpose(0, -1) * 2.0 : a * 2.0;
          what = "clone(a^T)^T*2";
          break;
        default:
          out = a.dim() >= 2 ? (a.transpose(0, 1) * 1.5).transpose(0, 1) : a * 1.5;
          what = "transpose*1.5";
      }
      pool.push_back(out);
      os << "  v" << pool.size() - 1 << " = " << what << "(v" << ia << ", v" << ib << ", v" << ic
         << ")\n";
    }
    *text = os.str();
    for (const Tensor& t : pool) {
      if (t.dtype() == kiln::kBFloat16) loosest_ = kiln::kBFloat16;
      if (t.dtype() == kiln::kFloat16 && loosest_ != kiln::kBFloat16) loosest_ = kiln::kFloat16;
    }
    return {pool.back(), pool[pool.size() / 2]};
  }

  struct Input {
    std::vector<int64_t> shape;
    kiln::DType dtype;
    const char* layout;
    uint64_t seed;
    bool follows_lead;  // its dim 0 is the program's leading dim (not broadcast, not dropped)
  };
  // The inputs whose dim 0 is the program's leading dim.
  std::vector<int> leading_inputs() const {
    std::vector<int> out;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      if (inputs_[i].follows_lead) out.push_back(static_cast<int>(i));
    }
    return out;
  }
  // Whether some input has `layout` ("offset": a window one element in from
  // each edge of a buffer one larger in every dim, whose strides grow with
  // its sizes by one more than a product of them).
  bool has_layout(const std::string& layout) const {
    return std::any_of(inputs_.begin(), inputs_.end(),
                       [&](const Input& in) { return layout == in.layout; });
  }
  // The least precise dtype any value of the program had (sets the tolerance).
  kiln::DType loosest() const { return loosest_; }

 private:
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }

  std::mt19937_64 rng_;
  uint64_t seed_;
  kiln::Device device_;
  bool wide_ = false;
  std::vector<int64_t> shape_;
  std::vector<Input> inputs_;
  std::vector<uint32_t> steps_;
  kiln::DType loosest_ = kiln::kFloat32;
};

// Tolerance of a program whose least precise value had dtype `t`: eager
// rounds every op's result to its dtype; fused kernels keep float32 between
// ops, so 16-bit chains drift by a few roundings.
inline Tolerance program_tolerance(DType t) {
  if (t == kFloat16) return {3e-2, 3e-2};
  if (t == kBFloat16) return {1e-1, 1e-1};
  return {1e-4, 1e-5};
}

}  // namespace kiln::testing
