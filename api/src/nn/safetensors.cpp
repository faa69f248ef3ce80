// safetensors: an 8-byte little-endian header length, a JSON header naming each
// tensor's dtype, shape and byte range in the data section, then the data.

#include "kiln/nn/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "api/src/nn/json_file.h"
#include "kiln/jit.h"
#include "kiln/ops.h"
#include "runtime/core/checked_sizes.h"

namespace kiln::nn {

// Note [Mapped checkpoints]
// A safetensors file is mapped whole, MAP_PRIVATE and writable: a CPU tensor
// is a view of the mapped bytes (no copy; the page cache shares them between
// the processes that load one checkpoint), and an in-place write through it
// copies that page for this process only, never reaching the file. The mapping
// lives while any tensor made from it does (the from_blob deleter holds it).
// The whole header is checked before a tensor is made: JSON types, sizes
// (checked arithmetic), every byte range inside the data section, no overlaps,
// no duplicate names; so no tensor ever reads outside the mapping. A tensor
// whose bytes are not aligned to its dtype is copied (kernels may assume
// natural alignment). Like any reader of a mapped file, kiln cannot guard
// against the file being truncated under it while mapped (the kernel then
// raises SIGBUS): checkpoints are expected not to change while served.
namespace impl {
struct MappedFile {
  std::string path;
  char* base = nullptr;
  size_t size = 0;
  int64_t data_start = 0;  // 8 + header length
  ~MappedFile() {
    if (base) munmap(base, size);
  }
};
}  // namespace impl

namespace {

using json = nlohmann::json;
using impl::MappedFile;

constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;  // as the reference implementation
constexpr size_t kMaxRank = 32;

const struct {
  const char* name;
  DType dtype;
} kDTypes[] = {{"BOOL", kBool},   {"U8", kUInt8},   {"I8", kInt8},     {"I16", kInt16},
               {"I32", kInt32},   {"I64", kInt64},  {"F16", kFloat16}, {"BF16", kBFloat16},
               {"F32", kFloat32}, {"F64", kFloat64}};

const char* name_of(DType t) {
  for (const auto& d : kDTypes) {
    if (d.dtype == t) return d.name;
  }
  KILN_FAIL("[save_safetensors] expected a dtype safetensors can hold, got ", t);
}

// `s` for a message: printable ASCII as it is, every other byte as \xNN (a
// name that is not UTF-8 would make the message itself invalid text).
std::string printable(const std::string& s) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += ch;
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// Whether JSON can hold `s`: the header is UTF-8, as its format says.
bool valid_utf8(const std::string& s) {
  try {
    (void)json(s).dump();
    return true;
  } catch (const json::exception&) {
    return false;
  }
}

// "'name' in path", the context of every per-entry message.
std::string where(const std::string& name, const std::string& path) {
  return "'" + name + "' in " + path;
}

DType parse_dtype(const json& v, const std::string& ctx) {
  KILN_CHECK(v.is_string(), "[safetensors] expected a string dtype for ", ctx, ", got a ",
             v.type_name());
  const std::string& s = v.get_ref<const std::string&>();
  for (const auto& d : kDTypes) {
    if (s == d.name) return d.dtype;
  }
  KILN_FAIL(
      "[safetensors] expected a dtype among BOOL, U8, I8, I16, I32, I64, F16, BF16, F32, F64 "
      "for ",
      ctx, ", got '", s, "'");
}

// A JSON non-negative integer that fits int64, else an error naming `what`.
int64_t parse_index(const json& v, const char* what, const std::string& ctx) {
  KILN_CHECK(v.is_number_unsigned() && v.get<uint64_t>() <= uint64_t{INT64_MAX},
             "[safetensors] expected ", what, " of non-negative integers below 2^63 for ", ctx,
             ", got ", json_brief(v));
  return static_cast<int64_t>(v.get<uint64_t>());
}

std::vector<int64_t> parse_shape(const json& v, const std::string& ctx) {
  KILN_CHECK(v.is_array(), "[safetensors] expected a list shape for ", ctx, ", got ",
             json_brief(v));
  KILN_CHECK(v.size() <= kMaxRank, "[safetensors] expected a shape of at most ", kMaxRank,
             " dims for ", ctx, ", got ", v.size());
  std::vector<int64_t> shape;
  for (const json& s : v) shape.push_back(parse_index(s, "a shape", ctx));
  return shape;
}

// Parses the header, refusing any object that names a key twice (nlohmann
// would silently keep the last one).
json parse_header(const char* begin, const char* end, const std::string& path) {
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  json::parser_callback_t on_event = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        open_objects.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case json::parse_event_t::key:
        if (!open_objects.empty() &&
            !open_objects.back().insert(parsed.get_ref<const std::string&>()).second &&
            duplicate.empty()) {
          duplicate = parsed.get<std::string>();
        }
        break;
      default:
        break;
    }
    return true;
  };
  json h;
  try {
    h = json::parse(begin, end, on_event);
  } catch (const json::exception& e) {
    KILN_FAIL("[safetensors] expected a JSON header in ", path, ", got: ", printable(e.what()));
  }
  KILN_CHECK(duplicate.empty(), "[safetensors] expected each name once in the header of ", path,
             ", got '", duplicate, "' twice");
  KILN_CHECK(h.is_object(), "[safetensors] expected a JSON object header in ", path, ", got ",
             h.is_null() ? "null" : std::string("a ") + h.type_name());
  return h;
}

std::shared_ptr<MappedFile> map_file(const std::string& path) {
  // O_NONBLOCK: a FIFO at the path is refused below instead of blocking the
  // open (Note [Reading untrusted paths]).
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  KILN_CHECK(fd >= 0, "[safetensors] expected a readable file, got '", path, "' (",
             std::strerror(errno), ")");
  struct stat st {};
  const int stat_rc = fstat(fd, &st);
  const int stat_errno = errno;
  if (stat_rc != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    KILN_CHECK(stat_rc == 0, "[safetensors] expected a readable file, got '", path, "' (",
               std::strerror(stat_errno), ")");
    KILN_FAIL("[safetensors] expected a regular file, got ",
              S_ISDIR(st.st_mode) ? "a directory" : "a special file", ": '", path, "'");
  }
  auto file = std::make_shared<MappedFile>();
  file->path = path;
  file->size = static_cast<size_t>(st.st_size);
  if (file->size < 8) {
    ::close(fd);
    KILN_FAIL("[safetensors] expected an 8-byte header length at the start of ", path, ", got a ",
              file->size, "-byte file");
  }
  void* p = mmap(nullptr, file->size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);
  KILN_CHECK(p != MAP_FAILED, "[safetensors] could not map ", path, " (", file->size,
             " bytes): ", std::strerror(map_errno));
  file->base = static_cast<char*>(p);
  return file;
}

}  // namespace

// ---------------------------------------------------------------------------

SafetensorsFile SafetensorsFile::open(const std::string& path) try {
  std::shared_ptr<MappedFile> file = map_file(path);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) {
    header_len = (header_len << 8) | static_cast<unsigned char>(file->base[i]);
  }
  const uint64_t after_len = file->size - 8;
  KILN_CHECK(header_len <= after_len, "[safetensors] expected a header length within the file ",
             path, " (", after_len, " bytes after the length), got ", header_len);
  KILN_CHECK(header_len >= 2, "[safetensors] expected a header of at least 2 bytes ('{}') in ",
             path, ", got ", header_len);
  KILN_CHECK(header_len <= kMaxHeaderBytes, "[safetensors] expected a header of at most ",
             kMaxHeaderBytes, " bytes in ", path, ", got ", header_len);
  file->data_start = static_cast<int64_t>(8 + header_len);
  const int64_t data_size = static_cast<int64_t>(file->size) - file->data_start;

  const json h = parse_header(file->base + 8, file->base + 8 + header_len, path);
  SafetensorsFile out;
  struct Range {
    int64_t begin, end;
    const std::string* name;
  };
  std::vector<Range> ranges;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const json& e = it.value();
    if (name == "__metadata__") {
      KILN_CHECK(e.is_object(),
                 "[safetensors] expected __metadata__ to be an object of strings in ", path,
                 ", got ", json_brief(e));
      for (auto m = e.begin(); m != e.end(); ++m) {
        KILN_CHECK(m.value().is_string(),
                   "[safetensors] expected string values in __metadata__ of ", path, ", got ",
                   json_brief(m.value()), " for '", m.key(), "'");
        out.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string ctx = where(name, path);
    KILN_CHECK(e.is_object(),
               "[safetensors] expected an object with dtype, shape and "
               "data_offsets for ",
               ctx, ", got ", json_brief(e));
    for (const char* key : {"dtype", "shape", "data_offsets"}) {
      KILN_CHECK(e.contains(key), "[safetensors] expected dtype, shape and data_offsets for ", ctx,
                 ", got no ", key);
    }
    TensorInfo ti;
    ti.dtype = parse_dtype(e["dtype"], ctx);
    ti.shape = parse_shape(e["shape"], ctx);
    const json& off = e["data_offsets"];
    KILN_CHECK(off.is_array() && off.size() == 2,
               "[safetensors] expected data_offsets [begin, end] for ", ctx, ", got ",
               json_brief(off));
    const int64_t begin = parse_index(off[0], "data_offsets", ctx);
    const int64_t end = parse_index(off[1], "data_offsets", ctx);
    // The rule every tensor kiln makes obeys (Note [Checked size arithmetic]),
    // so that a header it accepts always gives a tensor.
    int64_t numel = 0;
    try {
      numel = checked_bytes_numel(ti.shape, ti.dtype, "safetensors");
    } catch (const Error& e) {
      KILN_FAIL(e.what(), " (", ctx, ")");
    }
    ti.nbytes = numel * static_cast<int64_t>(itemsize(ti.dtype));
    KILN_CHECK(begin <= end && end <= data_size, "[safetensors] expected data_offsets of ", ctx,
               " inside the data section [0, ", data_size, "], got [", begin, ", ", end, "]");
    KILN_CHECK(end - begin == ti.nbytes, "[safetensors] expected ", ctx, " of shape ",
               IntArrayRef(ti.shape), " and dtype ", ti.dtype, " to span ", ti.nbytes,
               " bytes, got data_offsets [", begin, ", ", end, "] (", end - begin, " bytes)");
    ti.begin = begin;
    auto [pos, inserted] = out.tensors_.emplace(name, std::move(ti));
    KILN_INTERNAL_ASSERT(inserted, "duplicate names are refused while parsing");
    if (end > begin) ranges.push_back({begin, end, &pos->first});
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < ranges.size(); ++i) {
    KILN_CHECK(ranges[i].begin >= ranges[i - 1].end,
               "[safetensors] expected disjoint byte ranges "
               "in ",
               path, ", got '", *ranges[i - 1].name, "' [", ranges[i - 1].begin, ", ",
               ranges[i - 1].end, ") overlapping '", *ranges[i].name, "' [", ranges[i].begin, ", ",
               ranges[i].end, ")");
  }
  out.file_ = std::move(file);
  return out;
} catch (const json::exception& e) {
  // Every value is type-checked before it is read, so none should come; one
  // that did would still be a kiln::Error.
  KILN_FAIL("[safetensors] expected a header kiln can read in ", path,
            ", got: ", printable(e.what()));
}

const std::string& SafetensorsFile::path() const {
  static const std::string kNone;
  return file_ ? file_->path : kNone;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& [name, ti] : tensors_) out.push_back(name);
  return out;
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = tensors_.find(name);
  KILN_CHECK(it != tensors_.end(), "[safetensors] expected a tensor named '", name, "' in ", path(),
             ", got none");
  return it->second;
}

Tensor SafetensorsFile::tensor(const std::string& name) const {
  const TensorInfo& ti = info(name);
  char* bytes = file_->base + file_->data_start + ti.begin;
  if (ti.dtype == kBool) {
    for (int64_t i = 0; i < ti.nbytes; ++i) {
      const auto b = static_cast<unsigned char>(bytes[i]);
      KILN_CHECK(b <= 1, "[safetensors] expected BOOL bytes of 0 or 1 for ", where(name, path()),
                 ", got ", static_cast<int>(b), " at element ", i);
    }
  }
  EagerGuard eager;
  if (ti.nbytes == 0) return empty(ti.shape, ti.dtype);
  if (reinterpret_cast<uintptr_t>(bytes) % itemsize(ti.dtype) != 0) {
    return from_data(bytes, ti.shape, ti.dtype);
  }
  std::shared_ptr<const MappedFile> keep = file_;
  return from_blob(bytes, ti.shape, ti.dtype, [keep](void*) {});
}

Tensor SafetensorsFile::tensor(const std::string& name, Device device,
                               std::optional<DType> dtype) const {
  if (dtype) check_dtype("SafetensorsFile::tensor", "dtype", *dtype);
  Tensor t = tensor(name);
  const DType dt = dtype.value_or(t.dtype());
  EagerGuard eager;
  if (!device.is_cuda()) return t.to(device, dt);
  // Copy the file's bytes (fewer of them when converting to a wider dtype),
  // staged through pinned memory, and convert on the device.
  return t.to(device).to(dt);
}

// ---------------------------------------------------------------------------

std::map<std::string, Tensor> load_safetensors(const std::string& path) {
  SafetensorsFile f = SafetensorsFile::open(path);
  std::map<std::string, Tensor> out;
  for (const std::string& name : f.names()) out.emplace(name, f.tensor(name));
  return out;
}

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  for (const auto& [key, value] : metadata) {
    KILN_CHECK(valid_utf8(key), "[save_safetensors] expected metadata keys of valid UTF-8, got '",
               printable(key), "'");
    KILN_CHECK(valid_utf8(value), "[save_safetensors] expected metadata values of valid UTF-8, ",
               "got '", printable(value), "' for key '", printable(key), "'");
  }
  json h = json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  std::vector<Tensor> host;
  uint64_t offset = 0;
  // Every tensor is on the host, contiguous, before the file is opened: a
  // failure there (memory, a lazy value's error) leaves nothing behind.
  EagerGuard eager;
  for (const auto& [name, t] : tensors) {
    KILN_CHECK(name != "__metadata__",
               "[save_safetensors] expected tensor names other than "
               "__metadata__");
    KILN_CHECK(valid_utf8(name), "[save_safetensors] expected tensor names of valid UTF-8, got '",
               printable(name), "'");
    KILN_CHECK(t.defined(), "[save_safetensors] expected a defined tensor for '", name,
               "', got an undefined one");
    Tensor c = t.to(Device::cpu()).contiguous();
    h[name] = {{"dtype", name_of(c.dtype())},
               {"shape", c.sizes().vec()},
               {"data_offsets", {offset, offset + c.nbytes()}}};
    offset += c.nbytes();
    host.push_back(c);
  }
  std::string header;
  try {
    header = h.dump();
  } catch (const json::exception& e) {
    // Names and metadata were checked above: a kiln bug, but still a kiln::Error.
    KILN_FAIL("[save_safetensors] expected a header JSON can hold, got: ", printable(e.what()));
  }
  while ((header.size() + 8) % 8) header += ' ';  // keep the data 8-byte aligned
  // Written beside the destination under a name of this process's own, then
  // renamed over it: a reader never sees half a file, a failure removes the
  // temporary, and a user's file that happens to be named path + ".tmp" is
  // left alone.
  static std::atomic<uint64_t> saves{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
                          std::to_string(saves.fetch_add(1, std::memory_order_relaxed));
  try {
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
      f.flush();
      KILN_CHECK(f.good(), "[save_safetensors] failed writing ", tmp);
    }
    KILN_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "[save_safetensors] could not rename ",
               tmp, " to ", path, " (", std::strerror(errno), ")");
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
}

}  // namespace kiln::nn
