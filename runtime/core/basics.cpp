// Out-of-line parts of the small public vocabulary types: Error, DType, Device,
// Scalar, logging.

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "kiln/device.h"
#include "kiln/dispatch.h"
#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kiln/logging.h"
#include "kiln/scalar.h"

namespace kiln {

namespace detail {

void throw_error(std::string message) {
  throw Error(std::move(message));
}

void throw_internal(const char* condition, const char* file, int line, std::string message) {
  std::string text = str("internal assert failed: ", condition, " at ", file, ":", line);
  if (!message.empty()) text += ": " + message;
  text += " (this is a kiln bug; please report it)";
  throw Error(std::move(text));
}

}  // namespace detail

// ---------------------------------------------------------------------------
// DType

const char* dtype_name(DType t) {
  static const char* const names[kNumDTypes] = {"bool",    "uint8",  "int8",    "int16",
                                                "int32",   "int64",  "float16", "bfloat16",
                                                "float32", "float64"};
  int i = static_cast<int>(t);
  return (i >= 0 && i < kNumDTypes) ? names[i] : "invalid dtype";
}

namespace detail {

void fail_invalid_dtype(const char* op, const char* arg, DType t) {
  std::string valid;
  for (int i = 0; i < kNumDTypes; ++i) {
    valid += std::string(i ? ", " : "") + dtype_name(static_cast<DType>(i));
  }
  KILN_FAIL("[", op, "] expected ", arg, " one of ", valid, ", got an invalid dtype (",
            static_cast<int>(t), ")");
}

}  // namespace detail

DType parse_dtype(std::string_view name) {
  if (name.substr(0, 6) == "torch.") name.remove_prefix(6);
  struct Alias {
    const char* name;
    DType t;
  };
  static const Alias aliases[] = {
      {"bool", kBool},       {"uint8", kUInt8},     {"int8", kInt8},       {"int16", kInt16},
      {"short", kInt16},     {"int32", kInt32},     {"int", kInt32},       {"int64", kInt64},
      {"long", kInt64},      {"float16", kFloat16}, {"half", kFloat16},    {"bfloat16", kBFloat16},
      {"float32", kFloat32}, {"float", kFloat32},   {"float64", kFloat64}, {"double", kFloat64},
  };
  for (const Alias& a : aliases) {
    if (name == a.name) return a.t;
  }
  KILN_FAIL("[dtype] expected a dtype name such as 'float32' or 'int64', got '", name, "'");
}

DType promote_types(DType a, DType b) {
  check_dtype("promote_types", "a", a);
  check_dtype("promote_types", "b", b);
  if (a == b) return a;
  if (a == kBool) return b;
  if (b == kBool) return a;
  bool fa = is_floating(a), fb = is_floating(b);
  if (fa != fb) return fa ? a : b;
  if (fa) {
    if ((a == kFloat16 && b == kBFloat16) || (a == kBFloat16 && b == kFloat16)) return kFloat32;
    return itemsize(a) >= itemsize(b) ? a : b;
  }
  // Integers: uint8 mixed with a signed type needs a signed type one size up.
  if (a == kUInt8 || b == kUInt8) {
    DType other = a == kUInt8 ? b : a;
    return other == kInt8 ? kInt16 : other;
  }
  return a > b ? a : b;
}

// ---------------------------------------------------------------------------
// Device

Device::Device(std::string_view spec) {
  std::string_view kind = spec.substr(0, spec.find(':'));
  int index = 0;
  if (kind.size() < spec.size()) {
    std::string idx(spec.substr(kind.size() + 1));
    char* end = nullptr;
    long v = std::strtol(idx.c_str(), &end, 10);
    KILN_CHECK(!idx.empty() && end && *end == '\0' && v >= 0 && v <= kMaxIndex,
               "[device] expected a device index 0..", kMaxIndex, " after ':', got '", spec, "'");
    index = static_cast<int>(v);
  }
  if (kind == "cpu") {
    type_ = DeviceType::CPU;
  } else if (kind == "cuda") {
    type_ = DeviceType::CUDA;
  } else if (kind == "meta") {
    type_ = DeviceType::Meta;
  } else {
    KILN_FAIL("[device] expected 'cpu', 'cuda', 'cuda:N' or 'meta', got '", spec, "'");
  }
  index_ = static_cast<int8_t>(index);
}

void Device::fail_type(DeviceType type) {
  KILN_FAIL("[device] expected a device type cpu, cuda or meta, got an invalid device type (",
            static_cast<int>(type), ")");
}

void Device::fail_index(int index) {
  KILN_FAIL("[device] expected a device index 0..", kMaxIndex, ", got ", index);
}

std::string Device::str() const {
  switch (type_) {
    case DeviceType::CPU:
      return "cpu";
    case DeviceType::CUDA:
      return "cuda:" + std::to_string(index_);
    case DeviceType::Meta:
      return "meta";
  }
  return "invalid device";
}

// ---------------------------------------------------------------------------
// Scalar

Scalar Scalar::operator-() const {
  switch (kind_) {
    case Kind::Float:
      return Scalar(-v_.d);
    case Kind::Int:
      return Scalar(-v_.i);
    case Kind::Bool:
      break;
  }
  KILN_FAIL("[neg] expected a number, got a bool");
}

std::ostream& operator<<(std::ostream& os, const Scalar& s) {
  switch (s.kind()) {
    case Scalar::Kind::Bool:
      return os << (s.to_bool() ? "True" : "False");
    case Scalar::Kind::Int:
      return os << s.to_int();
    case Scalar::Kind::Float:
      return os << s.to_double();
  }
  return os;
}

// ---------------------------------------------------------------------------
// Logging

namespace {

constexpr const char* kChannelNames[] = {"recompiles", "guards",   "fusion", "output_code",
                                         "graphs",     "dispatch", "alloc",  "perf"};
static_assert(sizeof(kChannelNames) / sizeof(kChannelNames[0]) ==
              static_cast<size_t>(LogChannel::kCount));

uint32_t parse_channels(std::string_view list, bool strict) {
  uint32_t mask = 0;
  while (!list.empty()) {
    size_t comma = list.find(',');
    std::string_view name = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    // Spaces around a name are dropped, as around every KILN_* value (Note
    // [Environment switches]): "recompiles, guards" lost its second channel.
    while (!name.empty() && (name.front() == ' ' || name.front() == '\t')) name.remove_prefix(1);
    while (!name.empty() && (name.back() == ' ' || name.back() == '\t')) name.remove_suffix(1);
    if (name.empty()) continue;
    if (name == "all") {
      mask = (1u << static_cast<int>(LogChannel::kCount)) - 1;
      continue;
    }
    bool found = false;
    for (int i = 0; i < static_cast<int>(LogChannel::kCount); ++i) {
      if (name == kChannelNames[i]) {
        mask |= 1u << i;
        found = true;
      }
    }
    if (!found) {
      std::string known;
      for (const char* n : kChannelNames) known += std::string(known.empty() ? "" : ", ") + n;
      if (strict) {
        KILN_FAIL("[set_logs] expected channels among ", known, " or all, got '", name, "'");
      }
      std::fprintf(stderr, "[kiln] KILN_LOGS: unknown channel '%.*s' (known: %s, all)\n",
                   static_cast<int>(name.size()), name.data(), known.c_str());
    }
  }
  return mask;
}

// The dispatcher calls its observed path while the dispatch channel is on
// (Note [Dispatch observers]).
uint32_t with_dispatch_hook(uint32_t mask) {
  detail::set_dispatch_hook(detail::kDispatchLogHook,
                            (mask >> static_cast<int>(LogChannel::Dispatch)) & 1u);
  return mask;
}

uint32_t initial_mask() {
  const char* env = std::getenv("KILN_LOGS");
  return with_dispatch_hook(env ? parse_channels(env, /*strict=*/false) : 0);
}

// Where log lines go: stderr, or the file KILN_LOG_FILE / set_log_file() names.
struct LogSink {
  std::mutex mu;
  std::FILE* file = nullptr;  // null: stderr
  std::string path;
};

LogSink& sink() {
  static auto* s = [] {
    auto* sk = new LogSink();  // leaked: lines may be logged during static teardown
    const char* env = std::getenv("KILN_LOG_FILE");
    if (env && env[0]) {
      sk->file = std::fopen(env, "a");
      if (sk->file) {
        sk->path = env;
      } else {
        std::fprintf(stderr, "[kiln] KILN_LOG_FILE: cannot append to '%s'; logging to stderr\n",
                     env);
      }
    }
    return sk;
  }();
  return *s;
}

}  // namespace

namespace detail {

std::atomic<uint32_t> g_log_mask{initial_mask()};

void log_line(LogChannel channel, const std::string& line) {
  LogSink& s = sink();
  std::lock_guard<std::mutex> lock(s.mu);
  std::FILE* out = s.file ? s.file : stderr;
  std::fprintf(out, "[kiln %s] %s\n", kChannelNames[static_cast<int>(channel)], line.c_str());
  if (s.file) std::fflush(s.file);  // readable while the program runs, complete if it crashes
}

}  // namespace detail

void set_logs(std::string_view channels) {
  detail::g_log_mask.store(with_dispatch_hook(parse_channels(channels, /*strict=*/true)),
                           std::memory_order_relaxed);
}

void set_log_file(const std::string& path) {
  LogSink& s = sink();
  std::FILE* f = nullptr;
  if (!path.empty()) {
    f = std::fopen(path.c_str(), "a");
    KILN_CHECK(f != nullptr, "[set_log_file] expected a path open for appending, got '", path, "'");
  }
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.file) std::fclose(s.file);
  s.file = f;
  s.path = path;
}

std::string log_file() {
  LogSink& s = sink();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.path;
}

const char* log_channel_name(LogChannel c) {
  const int i = static_cast<int>(c);
  return i >= 0 && i < static_cast<int>(LogChannel::kCount) ? kChannelNames[i] : "unknown";
}

}  // namespace kiln
