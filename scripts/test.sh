#!/usr/bin/env bash
# Installs what kiln needs (Debian packages), configures, builds and runs every
# test: the regular build (with the CUDA toolkit where it is installed), a
# build without CUDA (Note [CUDA sources]: proves the CPU-only build the README
# promises still compiles, links and passes), then the same suites under
# ASan+UBSan.
#   scripts/test.sh            everything
#   scripts/test.sh --quick    the regular build only
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
[ "${1:-}" = "--quick" ] && quick=1

scripts/deps.sh

# Formatting (.clang-format) is part of the build's contract.
if command -v clang-format >/dev/null; then
  unformatted=$(git ls-files '*.h' '*.cpp' | xargs clang-format --dry-run 2>&1 | grep -c 'warning:' || true)
  if [ "$unformatted" != 0 ]; then
    echo "scripts/test.sh: $unformatted places differ from .clang-format; run: git ls-files '*.h' '*.cpp' | xargs clang-format -i" >&2
    exit 1
  fi
else
  echo "scripts/test.sh: clang-format not found; skipping the formatting check" >&2
fi

jobs=$(nproc)
run_suite() {  # build dir, extra cmake args...
  local dir=$1
  shift
  cmake -S . -B "$dir" -G Ninja -DKILN_WERROR=ON "$@"
  cmake --build "$dir" -j "$jobs"
  ctest --test-dir "$dir" --output-on-failure -j "$jobs"
}

run_suite build
scripts/consumer.sh build  # examples/ built against the installed package, and run
if [ "$quick" = 0 ]; then
  # Without the CUDA toolkit: every target, the unit suites and the oracle
  # (about 6 minutes on 2 cores, most of it the build).
  run_suite build-nocuda -DCMAKE_BUILD_TYPE=Release -DKILN_CUDA=OFF
  # kiln as add_subdirectory(kiln) of the examples (the README's other way in),
  # without CUDA to keep it short: the library alone, then the examples served.
  scripts/consumer.sh --subdirectory -DKILN_CUDA=OFF
  # Sanitizers: RelWithDebInfo keeps it fast enough; leaks are checked too.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
    run_suite build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_SANITIZE=address,undefined
fi
echo "kiln: all tests passed"
