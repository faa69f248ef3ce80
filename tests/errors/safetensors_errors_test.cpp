// Malformed safetensors files and shard indexes: each raises kiln::Error
// naming the file and what was wrong, and never reads outside the file.

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::nn::SafetensorsFile;

std::string temp_path(const std::string& name) {
  return kiln::testing::temp_path("st_err_" + name);
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << bytes;
}

std::string length_prefix(uint64_t len) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  return out;
}

// A file whose header is `header` followed by `data`.
std::string with_header(const std::string& header, const std::string& data) {
  return length_prefix(header.size()) + header + data;
}

// Writes the file and expects opening it to fail with `message` in the error.
void expect_open_error(const std::string& header, const std::string& data,
                       const std::string& message) {
  const std::string path = temp_path("case.safetensors");
  write_bytes(path, with_header(header, data));
  SCOPED_TRACE("header: " + header);
  EXPECT_KILN_ERROR(SafetensorsFile::open(path), message);
  EXPECT_KILN_ERROR(kiln::nn::load_safetensors(path), message);
  std::remove(path.c_str());
}

TEST(SafetensorsErrors, FileItself) {
  EXPECT_KILN_ERROR(SafetensorsFile::open(temp_path("missing")),
                    "[safetensors] expected a readable file, got '");
  // A directory is named as one, not as a file of 2^63 - 1 bytes.
  const std::string dir = temp_path("dir");
  ::mkdir(dir.c_str(), 0700);
  EXPECT_KILN_ERROR(SafetensorsFile::open(dir), "expected a regular file, got a directory");
  EXPECT_KILN_ERROR(kiln::nn::Checkpoint::open(dir),
                    "expected model.safetensors or model.safetensors.index.json");
  ::rmdir(dir.c_str());
  const std::string path = temp_path("short.safetensors");
  write_bytes(path, "");
  EXPECT_KILN_ERROR(SafetensorsFile::open(path), "got a 0-byte file");
  write_bytes(path, "abc");
  EXPECT_KILN_ERROR(SafetensorsFile::open(path), "expected an 8-byte header length");
  std::remove(path.c_str());
}

TEST(SafetensorsErrors, HeaderLength) {
  const std::string path = temp_path("len.safetensors");
  // Longer than the file, up to the largest 64-bit value.
  for (uint64_t len : {uint64_t{3}, uint64_t{1} << 40, ~uint64_t{0}, uint64_t{1} << 63}) {
    write_bytes(path, length_prefix(len) + "{}");
    EXPECT_KILN_ERROR(SafetensorsFile::open(path), "expected a header length within the file");
  }
  write_bytes(path, length_prefix(0) + "{}");
  EXPECT_KILN_ERROR(SafetensorsFile::open(path), "expected a header of at least 2 bytes");
  write_bytes(path, length_prefix(1) + "{}");
  EXPECT_KILN_ERROR(SafetensorsFile::open(path), "expected a header of at least 2 bytes");
  // A header cut short: the JSON ends early.
  const std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  write_bytes(path, length_prefix(header.size() - 10) + header + "abcd");
  EXPECT_KILN_ERROR(SafetensorsFile::open(path), "expected a JSON header");
  std::remove(path.c_str());
}

TEST(SafetensorsErrors, Json) {
  expect_open_error("{not json", "", "expected a JSON header in");
  expect_open_error(R"({"a": 1,})", "", "expected a JSON header in");
  expect_open_error("[1, 2, 3]", "", "expected a JSON object header in");
  expect_open_error("42", "", "expected a JSON object header in");
  expect_open_error("null", "", "got null");
  expect_open_error(R"("str")", "", "got a string");
  expect_open_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                    R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                    "abcdefgh", "expected each name once in the header of");
  expect_open_error(R"({"a":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}})",
                    "abcd", "got 'dtype' twice");
}

// The header is JSON, which is UTF-8 text: a header whose bytes are not is
// refused as JSON, and the message shows the bytes escaped.
TEST(SafetensorsErrors, HeaderThatIsNotUtf8) {
  for (const std::string bad : {"w\xff", "w\xc3", "w\xed\xa0\x80"}) {
    const std::string header =
        "{\"" + bad + R"(":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
    const std::string path = temp_path("utf8.safetensors");
    write_bytes(path, with_header(header, "abcd"));
    for (int load = 0; load < 2; ++load) {
      try {
        if (load) {
          kiln::nn::load_safetensors(path);
        } else {
          SafetensorsFile::open(path);
        }
        ADD_FAILURE() << "expected an error";
      } catch (const kiln::Error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("[safetensors] expected a JSON header in"), std::string::npos) << what;
        for (const char c : what) EXPECT_LT(static_cast<unsigned char>(c), 0x80) << what;
      }
    }
    std::remove(path.c_str());
  }
}

// save_safetensors refuses names and metadata JSON cannot hold (not UTF-8)
// as a kiln::Error naming them, escaped, and leaves no file behind: not the
// destination, not a temporary.
TEST(SafetensorsErrors, SaveNamesThatAreNotUtf8) {
  const std::string dir = temp_path("utf8_save");
  ::mkdir(dir.c_str(), 0700);
  const std::string path = dir + "/out.safetensors";
  const kiln::Tensor t = kiln::ones({2});
  EXPECT_KILN_ERROR(kiln::nn::save_safetensors(path, {{"ok", t}, {"w\xff", t}}),
                    "[save_safetensors] expected tensor names of valid UTF-8, got 'w\\xff'");
  EXPECT_KILN_ERROR(kiln::nn::save_safetensors(path, {{"ok", t}}, {{"k\xc3", "v"}}),
                    "[save_safetensors] expected metadata keys of valid UTF-8, got 'k\\xc3'");
  EXPECT_KILN_ERROR(
      kiln::nn::save_safetensors(path, {{"ok", t}}, {{"key", "v\xed\xa0\x80"}}),
      "[save_safetensors] expected metadata values of valid UTF-8, got 'v\\xed\\xa0\\x80' for "
      "key 'key'");
  EXPECT_TRUE(std::filesystem::is_empty(dir));
  // UTF-8 that is not ASCII is a name like any other.
  kiln::nn::save_safetensors(path, {{"w\xc3\xa9", t}}, {{"cl\xc3\xa9", "\xe2\x82\xac"}});
  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_TRUE(f.contains("w\xc3\xa9"));
  EXPECT_EQ(f.metadata().at("cl\xc3\xa9"), "\xe2\x82\xac");
  std::filesystem::remove_all(dir);
}

TEST(SafetensorsErrors, EntryTypes) {
  expect_open_error(R"({"a": 3})", "", "expected an object with dtype, shape and data_offsets");
  expect_open_error(R"({"a": {"dtype":"F32","shape":[1]}})", "", "got no data_offsets");
  expect_open_error(R"({"a": {"shape":[1],"data_offsets":[0,4]}})", "abcd", "got no dtype");
  expect_open_error(R"({"a": {"dtype":7,"shape":[1],"data_offsets":[0,4]}})", "abcd",
                    "expected a string dtype for 'a' in");
  expect_open_error(R"({"a": {"dtype":"F32","shape":4,"data_offsets":[0,16]}})",
                    std::string(16, 'x'), "expected a list shape for 'a'");
  expect_open_error(R"({"a": {"dtype":"F32","shape":"[1]","data_offsets":[0,4]}})", "abcd",
                    "expected a list shape");
  expect_open_error(R"({"a": {"dtype":"F32","shape":[2.5],"data_offsets":[0,10]}})",
                    std::string(10, 'x'), "expected a shape of non-negative integers");
  expect_open_error(R"({"a": {"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})",
                    std::string(8, 'x'), "expected a shape of non-negative integers");
  expect_open_error(R"({"a": {"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "abcd",
                    "got -1");
  expect_open_error(R"({"a": {"dtype":"F32","shape":[null],"data_offsets":[0,4]}})", "abcd",
                    "got null");
  expect_open_error(R"({"a": {"dtype":"F32","shape":[1],"data_offsets":["0","4"]}})", "abcd",
                    "expected data_offsets of non-negative integers");
  expect_open_error(R"({"a": {"dtype":"F32","shape":[1],"data_offsets":[0]}})", "abcd",
                    "expected data_offsets [begin, end] for 'a'");
  expect_open_error(R"({"a": {"dtype":"F32","shape":[1],"data_offsets":{"b":0}}})", "abcd",
                    "expected data_offsets [begin, end]");
  expect_open_error(
      R"({"__metadata__": [1], "a": {"dtype":"F32","shape":[],"data_offsets":[0,4]}})", "abcd",
      "expected __metadata__ to be an object of strings");
  expect_open_error(R"({"__metadata__": {"n_head": 12}})", "",
                    "expected string values in __metadata__");
  std::string ones = "1";
  for (int i = 1; i < 33; ++i) ones += ",1";
  expect_open_error(R"({"a": {"dtype":"U8","shape":[)" + ones + R"(],"data_offsets":[0,1]}})", "x",
                    "expected a shape of at most 32 dims for 'a'");
}

TEST(SafetensorsErrors, UnknownDtype) {
  for (const char* dt : {"Q7", "F8_E4M3", "f32", "", "U64"}) {
    expect_open_error(
        std::string(R"({"a":{"dtype":")") + dt + R"(","shape":[2],"data_offsets":[0,2]}})", "ab",
        "expected a dtype among BOOL, U8");
  }
}

TEST(SafetensorsErrors, SizesAndOffsets) {
  // shape x itemsize != bytes.
  expect_open_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "abcdefgh",
                    "expected 'a' in");
  expect_open_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "abcdefgh",
                    "to span 8 bytes, got data_offsets [0, 4] (4 bytes)");
  // Offsets past the data, reversed, or beyond int64.
  expect_open_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "abcd",
                    "inside the data section [0, 4], got [0, 8]");
  expect_open_error(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[8,4]}})", "abcdefgh",
                    "inside the data section");
  expect_open_error(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,18446744073709551615]}})",
                    "a", "below 2^63");
  // Sizes whose element count or bytes overflow int64.
  expect_open_error(R"({"a":{"dtype":"F32","shape":[4611686018427387920],"data_offsets":[0,64]}})",
                    std::string(64, 'x'), "expected a size whose bytes fit in int64");
  expect_open_error(R"({"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,1]}})",
                    "x", "expected a size whose element count fits in int64");
  expect_open_error(R"({"a":{"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,1]}})",
                    "x", "below 2^63");
  // Two tensors over the same bytes.
  expect_open_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                    R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                    std::string(12, 'x'), "expected disjoint byte ranges in");
  expect_open_error(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
                    R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                    std::string(12, 'x'), "'a' [0, 12) overlapping 'b' [4, 8)");
}

TEST(SafetensorsErrors, BoolBytes) {
  const std::string path = temp_path("bool.safetensors");
  write_bytes(path, with_header(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})",
                                std::string("\x01\x02\x00", 3)));
  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_KILN_ERROR(f.tensor("m"), "expected BOOL bytes of 0 or 1 for 'm' in");
  EXPECT_KILN_ERROR(f.tensor("m"), "got 2 at element 1");
  EXPECT_KILN_ERROR(kiln::nn::load_safetensors(path), "expected BOOL bytes of 0 or 1");
  std::remove(path.c_str());
}

TEST(SafetensorsErrors, MissingNames) {
  const std::string path = temp_path("names.safetensors");
  write_bytes(path, with_header(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "x"));
  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_KILN_ERROR(f.info("b"), "expected a tensor named 'b' in");
  EXPECT_KILN_ERROR(f.tensor("b"), "got none");
  std::remove(path.c_str());
}

TEST(SafetensorsErrors, ShardIndex) {
  const std::string dir = temp_path("shards");
  ::mkdir(dir.c_str(), 0700);
  kiln::nn::save_safetensors(dir + "/a.safetensors", {{"x", kiln::ones({2})}});
  auto index_error = [&](const std::string& index, const std::string& message) {
    write_bytes(dir + "/model.safetensors.index.json", index);
    SCOPED_TRACE(index);
    EXPECT_KILN_ERROR(kiln::nn::Checkpoint::open(dir), message);
  };
  index_error("{", "[checkpoint] expected JSON in");
  index_error("[]", "expected an object with a \"weight_map\" object");
  index_error(R"({"weight_map": 3})", "expected an object with a \"weight_map\" object");
  index_error(R"({"weight_map": {"x": 3}})", "expected a file name for 'x'");
  index_error(R"({"weight_map": {"x": "../a.safetensors"}})",
              "expected a shard file name in the index's folder");
  index_error(R"({"weight_map": {"x": "b.safetensors"}})", "expected a readable file");
  index_error(R"({"weight_map": {"y": "a.safetensors"}})", "expected 'y' in");
  index_error(R"({"weight_map": {}})", "expected at least one tensor");
  std::remove((dir + "/a.safetensors").c_str());
  std::remove((dir + "/model.safetensors.index.json").c_str());
  ::rmdir(dir.c_str());
}

}  // namespace
