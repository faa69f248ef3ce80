#pragma once

// Reading KILN_* environment variables.
//
// Note [Environment switches]
// Every KILN_* switch, number and name is read through these helpers, so
// that each accepts the same spellings and none misreads a value silently
// (KILN_LOGS, whose channel list warns on its own, and the paths
// KILN_LOG_FILE and KILN_CACHE_DIR, taken as given, aside). A switch takes 1/0,
// true/false, on/off or yes/no, in any case, with surrounding spaces ignored;
// unset or empty keeps the default. Any other value keeps the default and
// warns once on stderr, naming the variable and the value: before, KILN_EAGER=false
// turned eager mode on (anything but "0" was on) and KILN_PDL=off left early
// launch on (only "0" was off). A number or a name that is not understood
// likewise warns once and keeps the default.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kiln {

// The switch value `value` spells (Note [Environment switches]); nullopt for
// an empty value and for one that is not a switch value.
std::optional<bool> parse_env_flag(std::string_view value);

// The switch `name`: `fallback` when unset, empty or not a switch value (which
// warns once).
bool env_flag(const char* name, bool fallback);

// The whole decimal integer in `name` within [min, max]; nullopt when unset or
// empty, and, with a warning once, when it is not such an integer.
std::optional<int64_t> env_int(const char* name, int64_t min, int64_t max);

// The value of `name`, spaces around it dropped; nullopt when unset or empty.
std::optional<std::string> env_string(const char* name);

// Warns once per variable on stderr that `value` of `name` is not understood
// (`expected` lists what is), and that its default is kept.
void warn_env_value(const char* name, std::string_view value, std::string_view expected);

}  // namespace kiln
