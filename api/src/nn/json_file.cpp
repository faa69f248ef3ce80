#include "api/src/nn/json_file.h"

#include <cmath>
#include <utility>
#include <vector>

#include "kiln/error.h"
#include "runtime/core/regular_file.h"

namespace kiln::nn {

std::string json_brief(const nlohmann::json& v) {
  constexpr int kMaxDepth = 4;
  constexpr size_t kMaxNodes = 32, kMaxChars = 120;
  // Walks at most kMaxNodes values with an explicit stack: small and shallow
  // values are dumped whole (their dump recurses at most kMaxDepth deep).
  std::vector<std::pair<const nlohmann::json*, int>> stack{{&v, 0}};
  size_t seen = 0;
  bool small = true;
  while (!stack.empty() && small) {
    auto [x, depth] = stack.back();
    stack.pop_back();
    small = ++seen <= kMaxNodes && depth <= kMaxDepth;
    if (small && x->is_structured()) {
      for (const auto& child : *x) stack.emplace_back(&child, depth + 1);
    }
  }
  if (small) {
    std::string text = v.dump();
    if (text.size() <= kMaxChars) return text;
    return text.substr(0, kMaxChars) + "...";
  }
  return std::string(v.is_array() ? "a list of " : "an object of ") + std::to_string(v.size()) +
         (v.is_array() ? " values" : " keys") + " (too large or deep to show)";
}

using json = nlohmann::json;

json parse_json(const std::string& text, const std::string& what, const char* op) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    KILN_FAIL("[", op, "] expected JSON in ", what, ", got: ", e.what());
  }
}

json read_json_file(const std::string& path, const char* op) {
  RegularFile f(path);  // Note [Reading untrusted paths]
  KILN_CHECK(f.kind() != RegularFile::Kind::kUnreadable, "[", op,
             "] expected a readable file, got '", path, "'");
  KILN_CHECK(f.ok(), "[", op, "] expected a regular file, got ", f.problem(), ": '", path, "'");
  KILN_CHECK(f.size() <= (int64_t{100} << 20), "[", op,
             "] expected a JSON file of at most 100 MiB, got ", f.size(), " bytes in ", path);
  std::string text(static_cast<size_t>(f.size()), '\0');
  KILN_CHECK(f.read(text.data(), text.size()), "[", op, "] expected a readable file, got '", path,
             "'");
  return parse_json(text, path, op);
}

JsonFields::JsonFields(const json& obj, std::string what, const char* op)
    : obj_(obj), what_(std::move(what)), op_(op) {
  KILN_CHECK(obj_.is_object(), "[", op_, "] expected a JSON object in ", what_, ", got ",
             obj_.is_null() ? std::string("null") : std::string("a ") + obj_.type_name());
}

const json* JsonFields::find(const char* key) const {
  auto it = obj_.find(key);
  return it == obj_.end() || it->is_null() ? nullptr : &*it;
}

bool JsonFields::has(const char* key) const {
  return find(key) != nullptr;
}

int64_t JsonFields::integer(const char* key, std::optional<int64_t> fallback) const {
  const json* v = find(key);
  if (!v) {
    KILN_CHECK(fallback.has_value(), "[", op_, "] expected an integer \"", key, "\" in ", what_,
               ", got none");
    return *fallback;
  }
  KILN_CHECK(v->is_number_integer() &&
                 (!v->is_number_unsigned() || v->get<uint64_t>() <= uint64_t{INT64_MAX}),
             "[", op_, "] expected an integer \"", key, "\" in ", what_, ", got ", json_brief(*v));
  return v->get<int64_t>();
}

double JsonFields::number(const char* key, std::optional<double> fallback) const {
  const json* v = find(key);
  if (!v) {
    KILN_CHECK(fallback.has_value(), "[", op_, "] expected a number \"", key, "\" in ", what_,
               ", got none");
    return *fallback;
  }
  KILN_CHECK(v->is_number(), "[", op_, "] expected a number \"", key, "\" in ", what_, ", got ",
             json_brief(*v));
  const double d = v->get<double>();
  KILN_CHECK(std::isfinite(d), "[", op_, "] expected a finite \"", key, "\" in ", what_, ", got ",
             json_brief(*v));
  return d;
}

bool JsonFields::boolean(const char* key, std::optional<bool> fallback) const {
  const json* v = find(key);
  if (!v) {
    KILN_CHECK(fallback.has_value(), "[", op_, "] expected a boolean \"", key, "\" in ", what_,
               ", got none");
    return *fallback;
  }
  KILN_CHECK(v->is_boolean(), "[", op_, "] expected a boolean \"", key, "\" in ", what_, ", got ",
             json_brief(*v));
  return v->get<bool>();
}

std::string JsonFields::string(const char* key, std::optional<std::string> fallback) const {
  const json* v = find(key);
  if (!v) {
    KILN_CHECK(fallback.has_value(), "[", op_, "] expected a string \"", key, "\" in ", what_,
               ", got none");
    return *fallback;
  }
  KILN_CHECK(v->is_string(), "[", op_, "] expected a string \"", key, "\" in ", what_, ", got ",
             json_brief(*v));
  return v->get<std::string>();
}

const json& JsonFields::object(const char* key) const {
  static const json kNull;
  const json* v = find(key);
  if (!v) return kNull;
  KILN_CHECK(v->is_object(), "[", op_, "] expected an object \"", key, "\" in ", what_, ", got ",
             json_brief(*v));
  return *v;
}

}  // namespace kiln::nn
