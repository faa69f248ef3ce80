// safetensors: an 8-byte little-endian header length, a JSON header naming each
// tensor's dtype, shape and byte range, then the raw bytes.

#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kiln/jit.h"
#include "kiln/nn.h"
#include "kiln/ops.h"

namespace kiln::nn {
namespace {

using json = nlohmann::json;

const struct {
  const char* name;
  DType dtype;
} kDTypes[] = {{"BOOL", kBool},   {"U8", kUInt8},   {"I8", kInt8},     {"I16", kInt16},
               {"I32", kInt32},   {"I64", kInt64},  {"F16", kFloat16}, {"BF16", kBFloat16},
               {"F32", kFloat32}, {"F64", kFloat64}};

DType parse(const std::string& name, const std::string& path) {
  for (const auto& d : kDTypes) {
    if (name == d.name) return d.dtype;
  }
  KILN_FAIL(
      "[load_safetensors] expected a dtype among BOOL, U8, I8, I16, I32, I64, F16, BF16, "
      "F32, F64 in ",
      path, ", got '", name, "'");
}

const char* name_of(DType t) {
  for (const auto& d : kDTypes) {
    if (d.dtype == t) return d.name;
  }
  return "?";
}

}  // namespace

std::map<std::string, Tensor> load_safetensors(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  KILN_CHECK(f.good(), "[load_safetensors] expected a readable file, got '", path, "'");
  const uint64_t file_size = static_cast<uint64_t>(f.tellg());
  f.seekg(0);
  uint8_t len_bytes[8];
  KILN_CHECK(file_size >= 8 && f.read(reinterpret_cast<char*>(len_bytes), 8),
             "[load_safetensors] expected an 8-byte header length in ", path, ", got a ", file_size,
             "-byte file");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  KILN_CHECK(header_len <= file_size - 8 && header_len < (uint64_t{100} << 20),
             "[load_safetensors] expected a header length within the file, got ", header_len,
             " in a ", file_size, "-byte file ", path);
  std::string header(header_len, '\0');
  f.read(header.data(), static_cast<std::streamsize>(header_len));
  json h;
  try {
    h = json::parse(header);
  } catch (const json::exception& e) {
    KILN_FAIL("[load_safetensors] expected a JSON header in ", path, ", got: ", e.what());
  }
  const uint64_t data_start = 8 + header_len, data_size = file_size - data_start;
  std::map<std::string, Tensor> out;
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const json& e = it.value();
    KILN_CHECK(
        e.is_object() && e.contains("dtype") && e.contains("shape") && e.contains("data_offsets"),
        "[load_safetensors] expected dtype, shape and data_offsets for '", it.key(), "' in ", path);
    DType dt = parse(e["dtype"].get<std::string>(), path);
    std::vector<int64_t> shape = e["shape"].get<std::vector<int64_t>>();
    auto off = e["data_offsets"].get<std::vector<uint64_t>>();
    int64_t numel = 1;
    for (int64_t s : shape) {
      KILN_CHECK(s >= 0, "[load_safetensors] expected non-negative sizes for '", it.key(), "'");
      numel *= s;
    }
    uint64_t nbytes = static_cast<uint64_t>(numel) * itemsize(dt);
    KILN_CHECK(
        off.size() == 2 && off[0] <= off[1] && off[1] <= data_size && off[1] - off[0] == nbytes,
        "[load_safetensors] expected '", it.key(), "' to span ", nbytes,
        " bytes inside the data section, got offsets [", off.size() > 0 ? off[0] : 0, ", ",
        off.size() > 1 ? off[1] : 0, "] of ", data_size);
    Tensor t;
    {
      // Read straight into the tensor's memory, whatever mode the caller is in.
      EagerGuard eager;
      t = empty(shape, dt);
      f.seekg(static_cast<std::streamoff>(data_start + off[0]));
      if (nbytes) f.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(nbytes));
    }
    KILN_CHECK(f.good(), "[load_safetensors] expected to read ", nbytes, " bytes of '", it.key(),
               "' from ", path);
    out.emplace(it.key(), std::move(t));
  }
  return out;
}

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors) {
  json h = json::object();
  std::vector<Tensor> host;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    Tensor c = t.to(Device::cpu()).contiguous();
    h[name] = {{"dtype", name_of(c.dtype())},
               {"shape", c.sizes().vec()},
               {"data_offsets", {offset, offset + c.nbytes()}}};
    offset += c.nbytes();
    host.push_back(c);
  }
  std::string header = h.dump();
  while ((header.size() + 8) % 8) header += ' ';  // keep the data 8-byte aligned
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    KILN_CHECK(f.good(), "[save_safetensors] expected a writable path, got '", tmp, "'");
    uint64_t len = header.size();
    for (int i = 0; i < 8; ++i) f.put(static_cast<char>((len >> (8 * i)) & 0xff));
    f.write(header.data(), static_cast<std::streamsize>(header.size()));
    for (const Tensor& c : host) {
      if (c.nbytes())
        f.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
    }
    KILN_CHECK(f.good(), "[save_safetensors] failed writing ", tmp);
  }
  KILN_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "[save_safetensors] could not rename ",
             tmp, " to ", path);
}

}  // namespace kiln::nn
