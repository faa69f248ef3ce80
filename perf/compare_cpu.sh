#!/usr/bin/env bash
# Runs the CPU reference workloads through kiln (eager, lazy and compiled) and
# through libtorch 1.13 in one run, and prints latencies, kiln's host CPU time
# per call, and the ratios.
#   perf/compare_cpu.sh [--build DIR] [--threads N] [--workload W]
#
# libtorch runs at its best: OpenMP threads wait passively (libgomp's default
# spin-wait kept a second thread busy beside OpenBLAS's own pool on this
# 2-core machine and made gpt2 1x1 4x slower with 2 threads), and with more
# than one thread it also runs with one; each row's reference is the faster.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
threads=$(nproc)
workload=all
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift ;;
    --threads) threads=$2; shift ;;
    --workload) workload=$2; shift ;;
    *) echo "usage: $0 [--build DIR] [--threads N] [--workload W]" >&2; exit 2 ;;
  esac
  shift
done
cmake -S . -B "$build" -DKILN_TORCH_BENCH=ON >/dev/null
cmake --build "$build" --target kiln-bench kiln-torch-bench >/dev/null
tmp=$(mktemp)
for t in $(echo "$threads 1" | tr ' ' '\n' | sort -u); do
  OMP_NUM_THREADS=$t OMP_WAIT_POLICY=PASSIVE OPENBLAS_NUM_THREADS=$t \
    "$build/perf/kiln-torch-bench" --workload "$workload" --threads "$t" |
    sed "s/\"mode\":\"libtorch\"/\"mode\":\"libtorch\",\"threads\":$t/" >> "$tmp"
done
# kiln's TBB pool sizes itself from the CPUs the process may run on.
pin=()
[ "$threads" -lt "$(nproc)" ] && pin=(taskset -c "0-$((threads - 1))")
OPENBLAS_NUM_THREADS=$threads "${pin[@]}" "$build/kiln-bench" --device cpu --workload "$workload" --mode all --json >> "$tmp"
python3 - "$tmp" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
torch = {}
for r in rows:
    key = (r["workload"], r["shape"])
    if r["mode"] == "libtorch" and (key not in torch or r["latency_us_p50"] < torch[key]["latency_us_p50"]):
        torch[key] = r
print(f"{'workload':9} {'shape':8} {'mode':16} {'p50 us':>12} {'host us':>10} {'libtorch us':>12} {'(threads)':>9} {'speedup':>8}")
for r in rows:
    if r["mode"] == "libtorch":
        continue
    t = torch.get((r["workload"], r["shape"]))
    ref = t["latency_us_p50"] if t else float("nan")
    th = t["threads"] if t else 0
    print(f"{r['workload']:9} {r['shape']:8} {r['mode']:16} {r['latency_us_p50']:12.1f} "
          f"{r['host_us_per_call']:10.1f} {ref:12.1f} "
          f"{th:>9} {ref / r['latency_us_p50']:8.2f}x")
PY
rm -f "$tmp"
