#include "runtime/core/env.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>

namespace kiln {
namespace {

std::string_view trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

bool equals_lower(std::string_view s, std::string_view lower) {
  if (s.size() != lower.size()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i] >= 'A' && s[i] <= 'Z' ? static_cast<char>(s[i] - 'A' + 'a') : s[i];
    if (c != lower[i]) return false;
  }
  return true;
}

}  // namespace

std::optional<bool> parse_env_flag(std::string_view value) {
  value = trim(value);
  for (const char* on : {"1", "true", "on", "yes"}) {
    if (equals_lower(value, on)) return true;
  }
  for (const char* off : {"0", "false", "off", "no"}) {
    if (equals_lower(value, off)) return false;
  }
  return std::nullopt;
}

void warn_env_value(const char* name, std::string_view value, std::string_view expected) {
  // Leaked: a switch may be read during static initialization or teardown.
  static auto* mu = new std::mutex;
  static auto* warned = new std::set<std::string>;
  {
    std::lock_guard<std::mutex> lock(*mu);
    if (!warned->insert(name).second) return;
  }
  std::fprintf(stderr, "[kiln] %s='%.*s' is not understood (expected %.*s); using the default\n",
               name, static_cast<int>(value.size()), value.data(),
               static_cast<int>(expected.size()), expected.data());
}

std::optional<std::string> env_string(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  std::string_view s = trim(v);
  if (s.empty()) return std::nullopt;
  return std::string(s);
}

bool env_flag(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || trim(v).empty()) return fallback;
  if (std::optional<bool> on = parse_env_flag(v)) return *on;
  warn_env_value(name, v,
                 fallback ? "1/0, true/false, on/off or yes/no; default on"
                          : "1/0, true/false, on/off or yes/no; default off");
  return fallback;
}

std::optional<int64_t> env_int(const char* name, int64_t min, int64_t max) {
  std::optional<std::string> v = env_string(name);
  if (!v) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long n = std::strtoll(v->c_str(), &end, 10);
  if (errno != 0 || end == v->c_str() || *end != '\0' || n < min || n > max) {
    const std::string expected =
        "an integer from " + std::to_string(min) + " to " + std::to_string(max);
    warn_env_value(name, *v, expected);
    return std::nullopt;
  }
  return static_cast<int64_t>(n);
}

}  // namespace kiln
