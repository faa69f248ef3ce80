#!/usr/bin/env bash
# Builds examples/ the way a program outside kiln would, and runs it:
#   scripts/consumer.sh [BUILD_DIR]     against kiln installed from BUILD_DIR (default build)
#                                       with cmake --install, found by find_package(kiln)
#   scripts/consumer.sh --subdirectory [--tests] [CMAKE_ARGS...]
#                                       with kiln's source tree as add_subdirectory(kiln);
#                                       CMAKE_ARGS (e.g. -DKILN_CUDA=OFF) go to that configure;
#                                       --tests also builds kiln's suites in that tree and
#                                       runs them (ctest) before serving
# then serves a few requests with a random tiny Llama and a random tiny GPT-2 on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

tests=0
if [ "${1:-}" = "--subdirectory" ]; then
  shift
  [ "${1:-}" = "--tests" ] && tests=1 && shift
  out=build-consumer-subdirectory
  rm -rf "$out"
  cmake -S examples -B "$out" -G Ninja -DKILN_SOURCE_DIR="$PWD" -DKILN_WERROR=ON \
    -DKILN_BUILD_TESTS=$tests -DKILN_BUILD_PERF=OFF "$@"
else
  build=${1:-build}
  out=$build/consumer
  prefix=$out/prefix
  rm -rf "$out"
  cmake --install "$build" --prefix "$prefix" >/dev/null
  cmake -S examples -B "$out/examples" -G Ninja -DCMAKE_PREFIX_PATH="$PWD/$prefix" \
    -DCMAKE_CXX_FLAGS=-Werror
  out=$out/examples
fi
if [ "$tests" = 1 ]; then
  # kiln's targets are EXCLUDE_FROM_ALL here: name the suites.
  cmake --build "$out" -j "$jobs" --target all kiln_tests kiln_oracle_tests
  ctest --test-dir "$out/kiln" --output-on-failure -j "$jobs" --timeout 900
else
  cmake --build "$out" -j "$jobs"
fi
"$out/serve" --device cpu --family llama --config tiny --workers 2 --batch 2 --requests 6 \
  --max-prompt 12 --max-new 6
"$out/serve" --device cpu --family gpt2 --config tiny --workers 1 --requests 3 --max-new 4 \
  --temperature 0.8 --seed 7 --uncompiled
echo "scripts/consumer.sh: examples built as a consumer of kiln and served"
