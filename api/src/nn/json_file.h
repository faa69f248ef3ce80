#pragma once

// JSON read from files a user hands kiln (configs, shard indexes): every
// malformed or mistyped value is a kiln::Error naming the file and the key,
// never an exception of the JSON library. Private to api/src/nn.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace kiln::nn {

// Parses `path` (at most 100 MiB); `op` names the caller in errors.
nlohmann::json read_json_file(const std::string& path, const char* op);
nlohmann::json parse_json(const std::string& text, const std::string& what, const char* op);

// A JSON value for an error message: the value itself where it is small and
// shallow, else its kind and size. Never a full dump: a deeply nested value
// (from a file a user handed kiln) would take the library's dump as deep into
// the stack, and a large one would flood the message.
std::string json_brief(const nlohmann::json& v);

// Typed fields of a JSON object `obj` read from `what`. Absent (or null) keys
// give `fallback` when it is set, else an error; a value of another type is
// always an error.
class JsonFields {
 public:
  JsonFields(const nlohmann::json& obj, std::string what, const char* op);
  bool has(const char* key) const;
  int64_t integer(const char* key, std::optional<int64_t> fallback = std::nullopt) const;
  double number(const char* key, std::optional<double> fallback = std::nullopt) const;
  bool boolean(const char* key, std::optional<bool> fallback = std::nullopt) const;
  std::string string(const char* key, std::optional<std::string> fallback = std::nullopt) const;
  // A nested object (null when absent or null).
  const nlohmann::json& object(const char* key) const;

 private:
  const nlohmann::json* find(const char* key) const;

  const nlohmann::json& obj_;
  std::string what_;
  const char* op_;
};

}  // namespace kiln::nn
