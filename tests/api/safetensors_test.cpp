#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

std::string temp_path(const char* name) {
  return std::string(::testing::TempDir()) + "/kiln_" + name + ".safetensors";
}

void write_raw(const std::string& path, const std::string& header, size_t data_bytes) {
  std::ofstream f(path, std::ios::binary);
  uint64_t len = header.size();
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>((len >> (8 * i)) & 0xff));
  f << header << std::string(data_bytes, '\x01');
}

TEST(Safetensors, RoundTripsEveryDtypeAndLayout) {
  std::map<std::string, kiln::Tensor> in;
  {
    kiln::EagerGuard eager;
    in["f32"] = kiln::testing::random_tensor({3, 4}, kiln::kFloat32, "transposed", 1);
    in["f16"] = kiln::testing::random_tensor({5}, kiln::kFloat16, "contiguous", 2);
    in["bf16"] = kiln::testing::random_tensor({2, 2}, kiln::kBFloat16, "contiguous", 3);
    in["i64"] = kiln::testing::random_tensor({7}, kiln::kInt64, "strided", 4, -100, 100);
    in["scalar"] = kiln::full({}, 2.5);
    in["empty"] = kiln::empty({0, 3});
  }
  std::string path = temp_path("roundtrip");
  kiln::nn::save_safetensors(path, in);
  auto out = kiln::nn::load_safetensors(path);
  ASSERT_EQ(out.size(), in.size());
  for (const auto& [name, t] : in) {
    ASSERT_TRUE(out.count(name)) << name;
    EXPECT_EQ(out[name].dtype(), t.dtype()) << name;
    EXPECT_TENSOR_CLOSE(out[name], t);
  }
  std::remove(path.c_str());
}

TEST(Safetensors, BadFilesRaiseErrors) {
  std::string path = temp_path("bad");
  EXPECT_KILN_ERROR(kiln::nn::load_safetensors(path + ".missing"), "expected a readable file");
  write_raw(path, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4);
  EXPECT_KILN_ERROR(kiln::nn::load_safetensors(path), "inside the data section");
  write_raw(path, R"({"a":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", 8);
  EXPECT_KILN_ERROR(kiln::nn::load_safetensors(path), "expected a dtype among");
  write_raw(path, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 8);
  EXPECT_KILN_ERROR(kiln::nn::load_safetensors(path), "to span 8 bytes");
  write_raw(path, "{not json", 0);
  EXPECT_KILN_ERROR(kiln::nn::load_safetensors(path), "expected a JSON header");
  {
    std::ofstream f(path, std::ios::binary);
    f << "abc";
  }
  EXPECT_KILN_ERROR(kiln::nn::load_safetensors(path), "8-byte header length");
  std::remove(path.c_str());
}

}  // namespace
