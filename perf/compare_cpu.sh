#!/usr/bin/env bash
# Runs the CPU reference workloads through kiln (eager and lazy) and through
# libtorch 1.13 in one run, and prints latencies with the ratios.
#   perf/compare_cpu.sh [--build DIR] [--threads N] [--workload W]
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
OMP_NUM_THREADS=$threads "$build/perf/kiln-torch-bench" --workload "$workload" --threads "$threads" > "$tmp"
TBB_NUM_THREADS=$threads "$build/kiln-bench" --device cpu --workload "$workload" --json >> "$tmp"
python3 - "$tmp" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
torch = {(r["workload"], r["shape"]): r for r in rows if r["mode"] == "libtorch"}
print(f"{'workload':9} {'shape':8} {'mode':8} {'p50 us':>12} {'libtorch us':>12} {'speedup':>8}")
for r in rows:
    if r["mode"] == "libtorch":
        continue
    t = torch.get((r["workload"], r["shape"]))
    ref = t["latency_us_p50"] if t else float("nan")
    print(f"{r['workload']:9} {r['shape']:8} {r['mode']:8} {r['latency_us_p50']:12.1f} {ref:12.1f} "
          f"{ref / r['latency_us_p50']:8.2f}x")
PY
rm -f "$tmp"
