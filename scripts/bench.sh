#!/usr/bin/env bash
# Installs kiln's dependencies, builds it (Release) and runs the benchmark
# workloads on the best device present. Extra arguments go to kiln-bench.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target kiln-bench
exec build/kiln-bench "$@"
