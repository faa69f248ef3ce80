// A seeded fuzz test of call_op: 10,000 calls of registered kiln ops with
// random arguments (sizes near the int64 limits, negative and zero; wrong
// dtypes, wrong argument types, undefined tensors, non-contiguous and meta
// tensors), in eager and lazy mode. Every outcome must be a value or a
// kiln::Error: never a crash, a sanitizer report or a foreign exception.
//
// Deterministic: the same seed makes the same calls (KILN_FUZZ_SEED=N picks
// another seed, KILN_FUZZ_CALLS=N another count; KILN_FUZZ_VERBOSE=1 prints
// each call before it runs, to find the one that crashes).
//
// Sizes stay either small (at most 6 per dim) or out of reach (2^47 and up,
// or near the int64 limits), and input tensors are small, so no call
// allocates or loops over gigabytes: a failure here is a bug, never a slow
// machine.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <typeinfo>
#include <vector>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::ArgType;
using kiln::Device;
using kiln::DType;
using kiln::IValue;
using kiln::Tensor;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v ? std::strtoll(v, nullptr, 10) : fallback;
}

class ArgMaker {
 public:
  explicit ArgMaker(uint64_t seed) : rng_(seed) {}

  uint64_t next() { return rng_(); }
  bool chance(int percent) { return static_cast<int>(rng_() % 100) < percent; }
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return v[rng_() % v.size()];
  }

  // Dims, indices, counts: mostly small, sometimes at or past the int64 edges.
  int64_t integer() {
    static const std::vector<int64_t> kEdges = {kMax,
                                                kMax - 1,
                                                kMin,
                                                kMin + 1,
                                                int64_t{1} << 62,
                                                (int64_t{1} << 62) + 16,
                                                int64_t{1} << 61,
                                                kMax / 3,
                                                int64_t{1} << 47,
                                                -(int64_t{1} << 47),
                                                -(int64_t{1} << 62),
                                                int64_t{1} << 48};
    if (chance(15)) return pick(kEdges);
    if (chance(15)) return static_cast<int64_t>(rng_() % 6) + 3;  // 3..8
    return static_cast<int64_t>(rng_() % 4) - 1;                  // -1..2: a valid dim, mostly
  }
  // A size: as integer(), but the small ones are 0..6 and -1 (infer) shows up.
  int64_t size() {
    if (chance(15)) return integer();
    if (chance(5)) return -1;
    return static_cast<int64_t>(rng_() % 7);
  }
  std::vector<int64_t> int_list() {
    std::vector<int64_t> v(rng_() % 5);
    for (auto& x : v) x = size();
    return v;
  }
  double real() {
    static const std::vector<double> kReals = {0.0,
                                               1.0,
                                               -1.0,
                                               0.5,
                                               -2.5,
                                               1e-300,
                                               1e30,
                                               -1e30,
                                               1e308,
                                               300.,
                                               -129.0,
                                               65505,
                                               1e300,
                                               9.3e18,
                                               std::numeric_limits<double>::quiet_NaN(),
                                               std::numeric_limits<double>::infinity(),
                                               -std::numeric_limits<double>::infinity()};
    return pick(kReals);
  }
  kiln::Scalar scalar() {
    switch (rng_() % 3) {
      case 0:
        return kiln::Scalar(integer());
      case 1:
        return kiln::Scalar(real());
      default:
        return kiln::Scalar(chance(50));
    }
  }
  DType dtype() { return static_cast<DType>(rng_() % kiln::kNumDTypes); }

  Tensor tensor() {
    if (chance(3)) return Tensor();  // undefined
    const int64_t nd = static_cast<int64_t>(rng_() % 4);
    std::vector<int64_t> sizes(nd);
    for (auto& s : sizes) s = static_cast<int64_t>(rng_() % 5);
    const DType dt = chance(60) ? kiln::kFloat32 : dtype();
    if (chance(10)) {
      return kiln::empty(sizes, kiln::TensorOptions(dt).device(Device::meta()));
    }
    static const std::vector<const char*> kLayouts = {"contiguous", "contiguous", "transposed",
                                                      "strided",    "offset",     "expanded"};
    kiln::EagerGuard eager;  // inputs are values, not pending work
    Tensor t = kiln::testing::random_tensor(sizes, dt, pick(kLayouts), rng_(), -4, 4);
    if (is_floating(dt) && t.numel() > 0 && chance(10)) {
      // A NaN and an infinity among the values.
      Tensor flat = t.contiguous().flatten();
      flat.narrow(0, 0, 1).fill_(std::numeric_limits<double>::quiet_NaN());
      flat.narrow(0, flat.numel() - 1, 1).fill_(-std::numeric_limits<double>::infinity());
      t = flat.view(sizes);
    }
    return t;
  }

  IValue value(const kiln::Argument& a) {
    if (a.optional && chance(25)) return IValue();
    if (chance(3)) {
      // The wrong kind of value for the argument.
      switch (rng_() % 4) {
        case 0:
          return IValue("bogus");
        case 1:
          return IValue(int64_t{3});
        case 2:
          return IValue(tensor());
        default:
          return IValue(std::vector<int64_t>{1, 2});
      }
    }
    switch (a.type) {
      case ArgType::Tensor:
        return IValue(tensor());
      case ArgType::TensorList: {
        std::vector<Tensor> v(rng_() % 4);
        for (auto& t : v) t = tensor();
        return IValue(std::move(v));
      }
      case ArgType::Int:
        return IValue(integer());
      case ArgType::IntList:
        return chance(10) ? IValue(size()) : IValue(int_list());
      case ArgType::Float:
        return IValue(real());
      case ArgType::FloatList: {
        std::vector<double> v(rng_() % 4);
        for (auto& x : v) x = real();
        return IValue(std::move(v));
      }
      case ArgType::Bool:
        return IValue(chance(50));
      case ArgType::Scalar:
        return IValue(scalar());
      case ArgType::DType:
        if (chance(10)) return IValue(chance(50) ? "float64" : "float128");
        return IValue(dtype());
      case ArgType::Device:
        if (chance(5)) return IValue("cuda:300");
        return IValue(chance(80) ? Device::cpu() : Device::meta());
      case ArgType::Str: {
        static const std::vector<const char*> kStrs = {"",      "none",  "tanh",  "constant",
                                                       "trunc", "floor", "bogus", "reflect"};
        return IValue(pick(kStrs));
      }
    }
    return IValue();
  }

 private:
  std::mt19937_64 rng_;
};

std::string describe(const IValue& v) {
  std::ostringstream os;
  if (v.is_tensor()) {
    const Tensor& t = v.to_tensor();
    if (!t.defined()) return "Tensor()";
    os << t.dtype() << t.sizes() << "/" << t.strides() << (t.is_meta() ? "@meta" : "");
  } else if (v.is_tensor_list()) {
    os << "[";
    for (const Tensor& t : v.to_tensor_list()) os << describe(IValue(t)) << " ";
    os << "]";
  } else if (v.is_int()) {
    os << v.to_int();
  } else if (v.is_int_list()) {
    os << kiln::IntArrayRef(v.to_int_list());
  } else if (v.is_double()) {
    os << v.to_double();
  } else if (v.is_number()) {
    os << v.to_scalar();
  } else if (v.is_string()) {
    os << '"' << v.to_string() << '"';
  } else if (v.is_dtype()) {
    os << v.to_dtype();
  } else if (v.is_device()) {
    os << v.to_device();
  } else if (v.is_none()) {
    os << "None";
  } else {
    os << "?";
  }
  return os.str();
}

// Reads every output tensor, so that lazy work runs (and fails) inside the call's try block.
void touch(const kiln::Stack& out) {
  for (const IValue& v : out) {
    std::vector<Tensor> ts;
    if (v.is_tensor()) ts.push_back(v.to_tensor());
    if (v.is_tensor_list()) ts = v.to_tensor_list();
    for (const Tensor& t : ts) {
      if (!t.defined() || t.is_meta()) continue;
      if (t.numel() > 0 && t.numel() < (int64_t{1} << 20)) (void)t.contiguous().data_ptr();
      if (t.is_pending()) (void)t.data_ptr();
    }
  }
}

TEST(CallOpFuzz, RandomArgumentsRaiseOnlyKilnErrors) {
  const uint64_t seed = static_cast<uint64_t>(env_int("KILN_FUZZ_SEED", 17));
  const int64_t calls = env_int("KILN_FUZZ_CALLS", 10000);
  const bool verbose = env_int("KILN_FUZZ_VERBOSE", 0) != 0;
  std::vector<kiln::OpHandle> ops;
  for (const kiln::OpHandle& op : kiln::all_ops()) {
    // kiln's own ops; test files register others (some fail on purpose).
    if (op.schema().full_name().find("::") == std::string::npos) ops.push_back(op);
  }
  ASSERT_GT(ops.size(), 150u);
  ArgMaker make(seed);
  int64_t values = 0, errors = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < calls; ++i) {
    const kiln::OpHandle& op = make.pick(ops);
    const kiln::FunctionSchema& schema = op.schema();
    const bool lazy = make.chance(50);
    kiln::Stack args;
    std::vector<std::pair<std::string, IValue>> kwargs;
    // All arguments, or fewer (the rest take their defaults; sometimes a
    // required one is missing), positional ones by position and keyword-only
    // ones by name.
    size_t given = schema.arguments.size();
    if (make.chance(20)) {
      size_t required = 0;
      for (size_t a = 0; a < given; ++a) {
        const kiln::Argument& arg = schema.arguments[a];
        if (!arg.default_value && !arg.optional) required = a + 1;
      }
      given = required + make.next() % (given - required + 1);
      if (given > 0 && make.chance(5)) --given;
    }
    std::string call = schema.full_name() + "(";
    for (size_t a = 0; a < given; ++a) {
      const kiln::Argument& arg = schema.arguments[a];
      IValue v = make.value(arg);
      call += (a ? ", " : "") + arg.name + "=" + describe(v);
      if (arg.kwarg_only) {
        kwargs.emplace_back(arg.name, std::move(v));
      } else {
        args.push_back(std::move(v));
      }
    }
    call += lazy ? ") lazy" : ") eager";
    if (verbose) std::cerr << "[" << i << "] " << call << std::endl;
    try {
      std::optional<kiln::EagerGuard> eager;
      if (!lazy) eager.emplace();
      kiln::Stack out = kiln::call_op(schema.full_name(), std::move(args), kwargs);
      touch(out);
      kiln::sync();
      ++values;
    } catch (const kiln::Error& e) {
      ++errors;
      if (verbose) std::cerr << "  -> " << e.what() << std::endl;
      // A broken invariant is a bug even when it is reported cleanly.
      EXPECT_EQ(std::string(e.what()).find("this is a kiln bug"), std::string::npos)
          << "call " << i << ": " << call << "\n"
          << e.what();
      try {
        kiln::sync();  // what else was pending runs (or fails) before the next call
      } catch (const kiln::Error&) {
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << "call " << i << ": " << call << "\nthrew " << typeid(e).name() << ": "
                    << e.what();
    } catch (...) {
      ADD_FAILURE() << "call " << i << ": " << call << "\nthrew a non-std exception";
    }
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "[fuzz] seed " << seed << ": " << calls << " calls over " << ops.size() << " ops, "
            << values << " values, " << errors << " kiln::Errors, " << secs << " s\n";
  // Both outcomes must be common, or the arguments test nothing.
  EXPECT_GT(values, calls / 10);
  EXPECT_GT(errors, calls / 10);
}

}  // namespace
