#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

#include "kiln/api.h"

namespace kiln {

// The one exception kiln throws. User mistakes read "[op] expected X, got Y";
// broken invariants say "this is a kiln bug" and where.
class KILN_API Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

template <class... Args>
std::string str(const Args&... args) {
  if constexpr (sizeof...(Args) == 0) {
    return std::string();
  } else {
    std::ostringstream os;
    (os << ... << args);
    return os.str();
  }
}

[[noreturn]] KILN_API void throw_error(std::string message);
[[noreturn]] KILN_API void throw_internal(const char* condition, const char* file, int line,
                                          std::string message);

}  // namespace detail
}  // namespace kiln

// A user's mistake: throws kiln::Error with the message built from the
// arguments, which are only evaluated when the check fails.
#define KILN_CHECK(cond, ...)                                        \
  do {                                                               \
    if (KILN_UNLIKELY(!(cond))) {                                    \
      ::kiln::detail::throw_error(::kiln::detail::str(__VA_ARGS__)); \
    }                                                                \
  } while (0)

#define KILN_FAIL(...) ::kiln::detail::throw_error(::kiln::detail::str(__VA_ARGS__))

// A kiln bug: throws kiln::Error naming the condition, file and line.
#define KILN_INTERNAL_ASSERT(cond, ...)                                                            \
  do {                                                                                             \
    if (KILN_UNLIKELY(!(cond))) {                                                                  \
      ::kiln::detail::throw_internal(#cond, __FILE__, __LINE__, ::kiln::detail::str(__VA_ARGS__)); \
    }                                                                                              \
  } while (0)
