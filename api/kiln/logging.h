#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "kiln/api.h"
#include "kiln/error.h"

namespace kiln {

// Named diagnostic channels, switched on by KILN_LOGS=recompiles,fusion,...
// (or "all"), or by set_logs() from code.
enum class LogChannel : uint8_t {
  Recompiles,
  Guards,
  Fusion,
  OutputCode,
  Graphs,
  Dispatch,
  Alloc,
  Perf,
  kCount,
};

namespace detail {
// Relaxed: a channel switched on while other threads log shows in their next lines.
KILN_API extern std::atomic<uint32_t> g_log_mask;
KILN_API void log_line(LogChannel channel, const std::string& line);
}  // namespace detail

// False for a value that is no channel (a cast integer): a shift past the
// mask's width is undefined. For a constant channel the test folds away.
inline bool log_enabled(LogChannel c) {
  const unsigned i = static_cast<uint8_t>(c);
  return i < static_cast<unsigned>(LogChannel::kCount) &&
         ((detail::g_log_mask.load(std::memory_order_relaxed) >> i) & 1u);
}
// Replaces the enabled channels, e.g. "recompiles,graphs"; throws on an unknown name.
KILN_API void set_logs(std::string_view channels);
// Sends log lines to the end of the file at `path` ("": back to stderr), as
// KILN_LOG_FILE does at startup. Throws when the file cannot be opened.
KILN_API void set_log_file(const std::string& path);
KILN_API std::string log_file();  // "" while lines go to stderr
KILN_API const char* log_channel_name(LogChannel c);

}  // namespace kiln

// Prints "[kiln <channel>] <message>" to stderr when the channel is on; the
// message arguments are evaluated only then.
#define KILN_LOG(channel, ...)                                                                 \
  do {                                                                                         \
    if (KILN_UNLIKELY(::kiln::log_enabled(::kiln::LogChannel::channel))) {                     \
      ::kiln::detail::log_line(::kiln::LogChannel::channel, ::kiln::detail::str(__VA_ARGS__)); \
    }                                                                                          \
  } while (0)
