#pragma once

// Symbols are hidden by default (-fvisibility=hidden); the public surface is
// exported with KILN_API.
#define KILN_API __attribute__((visibility("default")))

#define KILN_LIKELY(x) __builtin_expect(!!(x), 1)
#define KILN_UNLIKELY(x) __builtin_expect(!!(x), 0)
