#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using kiln::nn::SafetensorsFile;

std::string temp_path(const char* name) {
  return kiln::testing::temp_path(std::string(name) + ".safetensors");
}

void write_raw(const std::string& path, const std::string& header, const std::string& data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  uint64_t len = header.size();
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>((len >> (8 * i)) & 0xff));
  f << header << data;
}

std::map<std::string, Tensor> sample_tensors() {
  kiln::EagerGuard eager;
  std::map<std::string, Tensor> in;
  in["f32"] = kiln::testing::random_tensor({3, 4}, kiln::kFloat32, "transposed", 1);
  in["f16"] = kiln::testing::random_tensor({5}, kiln::kFloat16, "contiguous", 2);
  in["bf16"] = kiln::testing::random_tensor({2, 2}, kiln::kBFloat16, "strided", 3);
  in["f64"] = kiln::testing::random_tensor({3}, kiln::kFloat64, "offset", 4);
  in["i64"] = kiln::testing::random_tensor({7}, kiln::kInt64, "strided", 5, -100, 100);
  in["i32"] = kiln::testing::random_tensor({2, 3}, kiln::kInt32, "contiguous", 6, -100, 100);
  in["i16"] = kiln::testing::random_tensor({3}, kiln::kInt16, "contiguous", 7, -100, 100);
  in["i8"] = kiln::testing::random_tensor({3}, kiln::kInt8, "contiguous", 8, -100, 100);
  in["u8"] = kiln::testing::random_tensor({4}, kiln::kUInt8, "contiguous", 9, 0, 255);
  in["bool"] =
      kiln::testing::random_tensor({5}, kiln::kInt64, "contiguous", 10, 0, 2).to(kiln::kBool);
  in["scalar"] = kiln::full({}, 2.5);
  in["empty"] = kiln::empty({0, 3});
  return in;
}

TEST(Safetensors, RoundTripsEveryDtypeAndLayout) {
  std::map<std::string, Tensor> in = sample_tensors();
  std::string path = temp_path("roundtrip");
  kiln::nn::save_safetensors(path, in, {{"format", "pt"}, {"n_head", "4"}});
  for (bool lazy : {false, true}) {
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    auto out = kiln::nn::load_safetensors(path);
    ASSERT_EQ(out.size(), in.size());
    for (const auto& [name, t] : in) {
      ASSERT_TRUE(out.count(name)) << name;
      EXPECT_EQ(out[name].dtype(), t.dtype()) << name;
      EXPECT_TENSOR_CLOSE(out[name], t);
    }
  }
  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.metadata().at("n_head"), "4");
  EXPECT_EQ(f.info("f32").shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(f.info("f32").nbytes, 48);
  EXPECT_EQ(f.names().size(), in.size());
  std::remove(path.c_str());
}

// CPU tensors view the mapped file: two reads share memory, writes through
// them stay in the process, and they outlive the SafetensorsFile.
TEST(Safetensors, CpuTensorsViewTheMappedFile) {
  std::string path = temp_path("mapped");
  Tensor w;
  {
    kiln::EagerGuard eager;
    w = kiln::testing::random_tensor({64, 32}, kiln::kFloat32, "contiguous", 11);
  }
  kiln::nn::save_safetensors(path, {{"w", w}});
  Tensor a, b;
  {
    SafetensorsFile f = SafetensorsFile::open(path);
    a = f.tensor("w");
    b = f.tensor("w");
  }
  EXPECT_EQ(a.data_ptr(), b.data_ptr());
  EXPECT_TENSOR_CLOSE(a, w);
  {
    kiln::EagerGuard eager;
    a.fill_(7.0);
  }
  EXPECT_EQ(b[0][0].item<float>(), 7.0f);                            // same mapping
  EXPECT_TENSOR_CLOSE(kiln::nn::load_safetensors(path).at("w"), w);  // file unchanged
  std::remove(path.c_str());
  EXPECT_EQ(b[1][1].item<float>(), 7.0f);  // the mapping outlives the file's name
}

// A tensor whose bytes are not aligned to its dtype is copied, not viewed.
TEST(Safetensors, MisalignedTensorsAreCopied) {
  std::string path = temp_path("misaligned");
  const float values[2] = {1.5f, -2.25f};
  std::string data(1, 'z');
  data.append(reinterpret_cast<const char*>(values), 8);
  std::string header = R"({"pad":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                       R"("x":{"dtype":"F32","shape":[2],"data_offsets":[1,9]}})";
  while ((header.size() + 8) % 8) header += ' ';
  write_raw(path, header, data);
  Tensor x = SafetensorsFile::open(path).tensor("x");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(x.data_ptr()) % 4, 0u);
  EXPECT_TENSOR_CLOSE(x, kiln::tensor({1.5f, -2.25f}));
  std::remove(path.c_str());
}

// Holes between tensors are allowed; the names are what the header says.
TEST(Safetensors, AcceptsHolesAndEmptyTensorsAnywhere) {
  std::string path = temp_path("holes");
  write_raw(path,
            R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[4,6]},)"
            R"("e":{"dtype":"F32","shape":[0,5],"data_offsets":[5,5]}})",
            "xxxxAB");
  auto t = kiln::nn::load_safetensors(path);
  EXPECT_EQ(t.at("a")[1].item<int64_t>(), 'B');
  EXPECT_EQ(t.at("e").numel(), 0);
  std::remove(path.c_str());
}

TEST(Safetensors, ShardedCheckpoint) {
  const std::string dir = kiln::testing::temp_path("sharded");
  ::mkdir(dir.c_str(), 0700);
  std::map<std::string, Tensor> in = sample_tensors();
  std::map<std::string, Tensor> first, second;
  std::string weight_map;
  for (const auto& [name, t] : in) {
    const bool one = name < "g";
    (one ? first : second)[name] = t;
    weight_map += std::string(weight_map.empty() ? "" : ",") + "\"" + name + "\": \"" +
                  (one ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors") +
                  "\"";
  }
  kiln::nn::save_safetensors(dir + "/model-00001-of-00002.safetensors", first);
  kiln::nn::save_safetensors(dir + "/model-00002-of-00002.safetensors", second);
  {
    std::ofstream f(dir + "/model.safetensors.index.json");
    f << R"({"metadata": {"total_size": 1}, "weight_map": {)" << weight_map << "}}";
  }
  for (const std::string& path : {dir, dir + "/model.safetensors.index.json"}) {
    kiln::nn::Checkpoint c = kiln::nn::Checkpoint::open(path);
    EXPECT_EQ(c.names().size(), in.size());
    for (const auto& [name, t] : in) {
      EXPECT_EQ(c.info(name).dtype, t.dtype());
      EXPECT_TENSOR_CLOSE(c.tensor(name), t);
    }
    EXPECT_TENSOR_CLOSE(c.tensor("f16", kiln::Device::cpu(), kiln::kFloat32),
                        in["f16"].to(kiln::kFloat32));
  }
  for (const char* f : {"/model-00001-of-00002.safetensors", "/model-00002-of-00002.safetensors",
                        "/model.safetensors.index.json"}) {
    std::remove((dir + f).c_str());
  }
  ::rmdir(dir.c_str());
}

TEST(Safetensors, StagedCopyToCuda) {
  if (!kiln::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  std::string path = temp_path("cuda");
  std::map<std::string, Tensor> in = sample_tensors();
  kiln::nn::save_safetensors(path, in);
  SafetensorsFile f = SafetensorsFile::open(path);
  for (const auto& [name, t] : in) {
    Tensor g = f.tensor(name, kiln::Device::cuda());
    EXPECT_TRUE(g.device().is_cuda());
    EXPECT_TENSOR_CLOSE(g.cpu(), t);
  }
  Tensor h = f.tensor("bf16", kiln::Device::cuda(), kiln::kFloat32);
  EXPECT_EQ(h.dtype(), kiln::kFloat32);
  EXPECT_TENSOR_CLOSE(h.cpu(), in["bf16"].to(kiln::kFloat32));
  std::remove(path.c_str());
}

}  // namespace
