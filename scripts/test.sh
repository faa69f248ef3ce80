#!/usr/bin/env bash
# Installs what kiln needs (Debian packages), configures, builds and runs every
# test, in two builds:
#   build/       Release, with CUDA where the toolkit is installed: every suite,
#                the oracle, NVRTC compiling every generated CUDA source; then
#                examples/ built against the installed package, and served;
#   build-consumer-subdirectory/
#                examples/ with kiln as add_subdirectory(kiln), without CUDA
#                (Note [CUDA sources]: the build a machine without the toolkit
#                gets), under ASan+UBSan: every suite again, then the examples
#                served. One build proves all three, which keeps CI well inside
#                its time on 2 cores.
#   scripts/test.sh            everything
#   scripts/test.sh --quick    build/ only
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
  ctest --test-dir "$dir" --output-on-failure -j "$jobs" --timeout 900
}

run_suite build
scripts/consumer.sh build  # examples/ built against the installed package, and run
if [ "$quick" = 0 ]; then
  # -O1 with line tables (-g1): half the compile time of -O2 -g under the
  # sanitizers, reports still name file and line. Leaks are checked too.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
    scripts/consumer.sh --subdirectory --tests -DKILN_CUDA=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
    -DKILN_SANITIZE=address,undefined
fi
echo "kiln: all tests passed"
