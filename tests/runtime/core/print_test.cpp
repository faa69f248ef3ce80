// Tensor::str() against PyTorch 1.13's repr: print_golden.txt holds what
// print_golden.py printed for the same tensors, built the same way here.

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>

#include "kiln/kiln.h"

namespace {

using kiln::Tensor;
using kiln::TensorOptions;

constexpr double kInf = INFINITY;
constexpr double kNan = NAN;

// PyTorch's `torch.tensor(values, dtype=float64).to(dtype)`.
Tensor vals(std::initializer_list<double> values, kiln::DType dtype = kiln::kFloat32) {
  return kiln::tensor<double>(values).to(dtype);
}
Tensor scalar(double v, kiln::DType dtype = kiln::kFloat32) {
  return kiln::scalar_tensor(v, TensorOptions(kiln::kFloat64)).to(dtype);
}
Tensor ar(int64_t n, kiln::DType dtype = kiln::kFloat64) {
  return kiln::arange(n, TensorOptions(dtype));
}

const kiln::DType f16 = kiln::kFloat16, bf16 = kiln::kBFloat16, f32 = kiln::kFloat32,
                  f64 = kiln::kFloat64, i64 = kiln::kInt64;

// Mirrors print_golden.py's CASES.
std::map<std::string, std::function<Tensor()>> cases() {
  // clang-format off
  return {
      {"float_basic", [] { return vals({1, 2, 3}); }},
      {"float_frac", [] { return (ar(14) * 0.75 - 5).to(f32); }},
      {"float_round", [] { return vals({0.12345, 1.99996, 10.5, -3.25}); }},
      {"float_neg_int", [] { return vals({-1, 2, -300}); }},
      {"float_neg_zero", [] { return vals({-0.0, 1.0}); }},
      {"float_zeros", [] { return vals({0, 0, 0}); }},
      {"float_sci_small", [] { return vals({1e-5, 0.5, 2}); }},
      {"float_sci_big", [] { return vals({1e9, 1, 2}); }},
      {"float_sci_ratio", [] { return vals({0.001, 2.5}); }},
      {"float_sci_tiny", [] { return vals({1e-10, 2e-10}); }},
      {"float_sci_width", [] { return vals({1e-8, -1e10, 3}); }},
      {"float_int_sci", [] { return vals({1e10, 1}); }},
      {"float_int_1e8", [] { return vals({1e8, 1}); }},
      {"float_int_ratio", [] { return vals({1, 1e5}); }},
      {"float_inf_nan", [] { return vals({kInf, -kInf, kNan, 1.5, 0}); }},
      {"float_int_inf", [] { return vals({1, kInf, -kInf, kNan}); }},
      {"float_only_nonfinite", [] { return vals({kNan, kInf}); }},
      {"float_sci_nonfinite", [] { return vals({1e-5, kInf, kNan, -2}); }},
      {"float64", [] { return ar(5) / 3; }},
      {"float64_int", [] { return ar(4); }},
      {"float16", [] { return (ar(8) * 0.25).to(f16); }},
      {"float16_frac", [] { return (ar(6) / 7).to(f16); }},
      {"bfloat16", [] { return kiln::linspace(-1, 1, 7, TensorOptions(f64)).to(bf16); }},
      {"bfloat16_big", [] { return vals({3e5, -1, 0.5}, bf16); }},
      {"int64", [] { return ar(25, i64) - 5; }},
      {"int64_extreme", [] { return kiln::tensor<int64_t>({-9223372036854775807LL, 1, 42}); }},
      {"int32", [] { return (ar(12, i64) - 6).reshape({3, 4}).to(kiln::kInt32); }},
      {"int16", [] { return vals({-300, 7, 12000}, kiln::kInt16); }},
      {"int8", [] { return vals({-128, 0, 127}, kiln::kInt8); }},
      {"uint8", [] { return vals({0, 5, 255}, kiln::kUInt8); }},
      {"bool", [] { return ar(6, i64) > 2; }},
      {"bool_2d", [] { return (ar(6, i64) > 3).reshape({2, 3}); }},
      {"scalar_float", [] { return scalar(3.0); }},
      {"scalar_frac", [] { return scalar(-2.5); }},
      {"scalar_sci", [] { return scalar(1e-7); }},
      {"scalar_int", [] { return kiln::scalar_tensor(int64_t{7}, kiln::kInt64); }},
      {"scalar_int32", [] { return scalar(-7, kiln::kInt32); }},
      {"scalar_bool", [] { return kiln::scalar_tensor(true, kiln::kBool); }},
      {"scalar_half", [] { return scalar(1.5, f16); }},
      {"scalar_nan", [] { return scalar(kNan); }},
      {"empty", [] { return kiln::zeros({0}); }},
      {"empty_2d", [] { return kiln::zeros({0, 3}); }},
      {"empty_int64", [] { return kiln::zeros({0}, TensorOptions(i64)); }},
      {"empty_int32_3d", [] { return kiln::zeros({2, 0, 3}, TensorOptions(kiln::kInt32)); }},
      {"empty_half", [] { return kiln::zeros({0}, TensorOptions(f16)); }},
      {"matrix", [] { return (ar(12) / 7).to(f32).reshape({3, 4}); }},
      {"matrix_int", [] { return ar(12, i64).reshape({3, 4}) * 11 - 40; }},
      {"tensor3d", [] { return (ar(24) - 12).to(f32).reshape({2, 3, 4}); }},
      {"tensor4d", [] { return (ar(16) * 0.5).to(f32).reshape({2, 2, 2, 2}); }},
      {"wrap_1d", [] { return (ar(30) / 7).to(f32); }},
      {"wrap_2d", [] { return (ar(40) / 3).to(f32).reshape({2, 20}); }},
      {"wrap_int", [] { return ar(40, i64) * 1001; }},
      {"wrap_suffix", [] { return (ar(16) / 3).to(f16); }},
      {"wrap_suffix_2d", [] { return (ar(33) / 3).to(f64).reshape({3, 11}); }},
      {"big_1d", [] { return ar(2000).to(f32); }},
      {"big_1d_frac", [] { return (ar(1500) / 9).to(f32); }},
      {"big_2d", [] { return ar(1200, i64).reshape({40, 30}); }},
      {"big_2d_narrow", [] { return (ar(1206) * 0.5).to(f32).reshape({201, 6}); }},
      {"big_3d", [] { return (ar(3000) * 0.01).to(f32).reshape({10, 15, 20}); }},
      {"big_3d_sci", [] { return (ar(3000) * 1e-6).to(f32).reshape({20, 10, 15}); }},
      {"big_bool", [] { return ar(1001, i64) > 500; }},
      {"big_half", [] { return (ar(1100) / 3).to(f16); }},
      {"transposed", [] { return (ar(12) / 4).to(f32).reshape({3, 4}).t(); }},
      {"strided", [] { return (ar(20) - 10).to(f32).slice(0, std::nullopt, std::nullopt, 3); }},
      {"transposed_3d", [] { return ar(24, i64).reshape({2, 3, 4}).transpose(0, 2); }},
      {"expanded", [] { return vals({1, 2, 3}).expand({2, 3}); }},
      {"big_transposed", [] { return ar(2400, i64).reshape({40, 60}).t(); }},
      {"meta", [] { return kiln::empty({2, 3}, TensorOptions(kiln::Device::meta())); }},
      {"meta_half", [] { return kiln::empty({5}, TensorOptions(f16).device(kiln::Device::meta())); }},
      // 2e10 elements, stride 0: only the shown ones are read.
      {"huge_expanded", [] { return vals({1.5, -2}).expand({100000, 100000, 2}); }},
  };
  // clang-format on
}

std::map<std::string, std::string> load_golden() {
  std::string path = std::string(KILN_TEST_SOURCE_DIR) + "/runtime/core/print_golden.txt";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::map<std::string, std::string> golden;
  std::string line, name, text;
  auto flush = [&] {
    if (!name.empty()) golden[name] = text.substr(0, text.empty() ? 0 : text.size() - 1);
  };
  while (std::getline(in, line)) {
    if (line.rfind("=== ", 0) == 0) {
      flush();
      name = line.substr(4);
      text.clear();
    } else {
      text += line + "\n";
    }
  }
  flush();
  return golden;
}

TEST(Print, MatchesPyTorchRepr) {
  const auto golden = load_golden();
  const auto all = cases();
  EXPECT_EQ(golden.size(), all.size()) << "print_golden.py and print_test.cpp list different cases";
  for (const auto& [name, make] : all) {
    auto it = golden.find(name);
    if (it == golden.end()) {
      ADD_FAILURE() << "no golden text for case " << name;
      continue;
    }
    EXPECT_EQ(make().str(), it->second) << "case " << name;
  }
}

TEST(Print, StreamOperatorMatchesStr) {
  Tensor t = vals({1.5, -2, 3});
  std::ostringstream os;
  os << t;
  EXPECT_EQ(os.str(), t.str());
  EXPECT_EQ(os.str(), "tensor([ 1.5000, -2.0000,  3.0000])");
}

TEST(Print, UndefinedTensor) {
  EXPECT_EQ(Tensor().str(), "tensor(undefined)");
}

}  // namespace
