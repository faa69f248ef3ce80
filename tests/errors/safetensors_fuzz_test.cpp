// 10,000 seeded random safetensors files: headers built from valid parts and
// hostile ones (sizes near the int64 limits, negative, fractional, mistyped,
// overlapping, duplicated, truncated, wrong lengths). Every outcome is a file
// whose tensors read exactly their own bytes, or a kiln::Error; never a
// crash, a sanitizer report or another exception.

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

// Concatenation by appending (GCC 12's -Wrestrict misfires on chains of +).
template <class... Parts>
std::string cat(const Parts&... parts) {
  std::string out;
  (out.append(parts), ...);
  return out;
}

class HeaderFuzzer {
 public:
  explicit HeaderFuzzer(uint64_t seed) : rng_(seed) {}

  // One file's bytes.
  std::string file() {
    data_size_ = pick({0, 1, 3, 8, 16, 40, 64});
    offset_ = 0;
    std::string header = "{";
    const int entries = static_cast<int>(uniform(0, 4));
    for (int i = 0; i < entries; ++i) {
      if (i) header += ",";
      header.append("\"").append(name()).append("\":").append(entry());
    }
    if (chance(0.1)) header += cat(entries ? "," : "", "\"__metadata__\":", metadata());
    header += "}";
    if (chance(0.05)) header = pick_str({"null", "[]", "3", "\"x\"", "{", "", "[{}]", "true"});
    if (chance(0.05) && !header.empty()) header.resize(uniform(0, header.size() - 1));
    if (chance(0.05) && !header.empty()) header[uniform(0, header.size() - 1)] ^= 0x20;
    uint64_t len = header.size();
    if (chance(0.08)) {
      len = pick_u({0, 1, len - 1, len + 1, len + 1000, uint64_t{1} << 32, uint64_t{1} << 63,
                    ~uint64_t{0}, (uint64_t{100} << 20) + 1});
    }
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((len >> (8 * i)) & 0xff);
    out += header;
    // Mostly exactly the bytes the entries claim, else the size they were drawn against.
    const int64_t data_bytes = chance(0.8) ? offset_ : data_size_;
    for (int64_t i = 0; i < data_bytes; ++i) {
      out += static_cast<char>(chance(0.7) ? uniform(0, 1) : uniform(0, 255));
    }
    if (chance(0.05)) out.resize(uniform(0, out.size()));
    return out;
  }

 private:
  std::string name() {
    if (chance(0.05)) return pick_str({"a", "", "\\u00e9", "__metadata__"});
    return cat("t", std::to_string(uniform(0, 1000000)));
  }

  std::string metadata() {
    return pick_str({"{}", "{\"format\":\"pt\"}", "{\"n\":1}", "[]", "null", "\"x\""});
  }

  std::string dim() {
    if (chance(0.93)) return std::to_string(pick({0, 1, 2, 3, 4, 7}));
    return pick_str({"-1", "2.5", "1e3", "\"3\"", "null", "[]", "4294967296", "4611686018427387920",
                     "9223372036854775807", "9223372036854775808", "18446744073709551615",
                     "99999999999999999999999", "-9223372036854775808"});
  }

  std::string entry() {
    if (chance(0.05)) return pick_str({"3", "null", "[]", "\"F32\"", "{}"});
    static const int64_t kItem[] = {1, 1, 1, 2, 4, 8, 2, 2, 4, 8};
    static const char* kNames[] = {"BOOL", "U8",  "I8",   "I16", "I32",
                                   "I64",  "F16", "BF16", "F32", "F64"};
    const int d = static_cast<int>(uniform(0, 9));
    std::string dtype = "\"";
    dtype.append(kNames[d]).append("\"");
    if (chance(0.05)) dtype = pick_str({"\"Q7\"", "7", "null", "\"f32\"", "[\"F32\"]", "\"U64\""});
    const int rank = static_cast<int>(uniform(0, 3));
    std::string shape = "[";
    int64_t numel = 1;
    bool exact = true;
    for (int i = 0; i < rank; ++i) {
      std::string s = dim();
      char* end = nullptr;
      long long v = std::strtoll(s.c_str(), &end, 10);
      if (*end != '\0' || v < 0 || v > 64) exact = false;
      if (exact) numel *= v;
      shape += cat(i ? "," : "", s);
    }
    shape += "]";
    if (chance(0.03)) shape = pick_str({"4", "\"[1]\"", "null", "{}"});
    const int64_t nbytes = numel * kItem[d];
    int64_t begin = offset_, end = offset_ + nbytes;
    if (chance(0.9)) {
      offset_ = end;
    } else {
      begin = pick({0, 1, 4, data_size_, data_size_ + 1, offset_ - 1});
      end = begin + (chance(0.5) ? nbytes : pick({0, 1, 8, data_size_, -1}));
    }
    std::string offsets = cat("[", std::to_string(begin), ",", std::to_string(end), "]");
    if (chance(0.03)) {
      offsets = pick_str({"[0]", "[\"0\",\"4\"]", "[0,4,8]", "null", "[0,18446744073709551615]",
                          "[9223372036854775807,9223372036854775807]", "[0.5,4]", "{}"});
    }
    std::string out = "{";
    bool first = true;
    auto field = [&](const char* key, const std::string& value) {
      if (chance(0.03)) return;  // missing field
      out += cat(first ? "" : ",", "\"", key, "\":", value);
      first = false;
      if (chance(0.02)) out += cat(",\"", key, "\":", value);  // duplicate key
    };
    field("dtype", dtype);
    field("shape", shape);
    field("data_offsets", offsets);
    return cat(out, "}");
  }

  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  uint64_t uniform(uint64_t lo, uint64_t hi) {
    return std::uniform_int_distribution<uint64_t>(lo, hi)(rng_);
  }
  int64_t pick(std::initializer_list<int64_t> v) { return v.begin()[uniform(0, v.size() - 1)]; }
  uint64_t pick_u(std::initializer_list<uint64_t> v) { return v.begin()[uniform(0, v.size() - 1)]; }
  std::string pick_str(std::initializer_list<const char*> v) {
    return v.begin()[uniform(0, v.size() - 1)];
  }

  std::mt19937_64 rng_;
  int64_t data_size_ = 0;
  int64_t offset_ = 0;
};

TEST(SafetensorsFuzz, RandomHeadersGiveValuesOrErrors) {
  HeaderFuzzer fuzz(20260117);
  int accepted = 0, refused = 0, tensors_read = 0;
  for (int i = 0; i < 10000; ++i) {
    const std::string bytes = fuzz.file();
    // A fresh name each time: truncating a file just written waits for its writeback.
    const std::string path =
        kiln::testing::temp_path(cat("st_fuzz_", std::to_string(i), ".safetensors"));
    {
      std::ofstream f(path, std::ios::binary | std::ios::trunc);
      f << bytes;
    }
    try {
      kiln::nn::SafetensorsFile file = kiln::nn::SafetensorsFile::open(path);
      uint64_t header_len = 0;
      for (int b = 7; b >= 0; --b) header_len = (header_len << 8) | static_cast<uint8_t>(bytes[b]);
      const uint64_t data_start = 8 + header_len;
      ++accepted;
      for (const std::string& name : file.names()) {
        const kiln::nn::TensorInfo& info = file.info(name);
        ASSERT_LE(data_start + info.begin + info.nbytes, bytes.size()) << "case " << i;
        try {
          kiln::Tensor t = file.tensor(name);
          ASSERT_EQ(static_cast<int64_t>(t.nbytes()), info.nbytes) << "case " << i;
          if (info.nbytes) {
            ASSERT_EQ(
                std::memcmp(t.data_ptr(), bytes.data() + data_start + info.begin, info.nbytes), 0)
                << "case " << i << " tensor " << name;
          }
          ++tensors_read;
        } catch (const kiln::Error& e) {
          ASSERT_NE(std::string(e.what()).find("BOOL bytes"), std::string::npos) << e.what();
        }
      }
    } catch (const kiln::Error& e) {
      ++refused;
      ASSERT_EQ(e.what()[0], '[') << "case " << i << ": " << e.what();
    } catch (const std::exception& e) {
      FAIL() << "case " << i << ": a foreign exception: " << e.what() << "\nfile bytes: " << bytes;
    }
    std::remove(path.c_str());
  }
  RecordProperty("accepted", accepted);
  RecordProperty("refused", refused);
  RecordProperty("tensors_read", tensors_read);
  // Both outcomes are well represented, so the generator is not degenerate.
  EXPECT_GT(accepted, 1000);
  EXPECT_GT(refused, 1000);
  EXPECT_GT(tensors_read, 1000);
}

}  // namespace
