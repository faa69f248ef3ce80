#!/usr/bin/env python3
"""Reads kiln-bench --json and perf/torch_gpu.py lines (one file or stdin) from
one GPU run and prints latency p50 per workload and mode, with each kiln
mode's ratio to torch.compile(mode="reduce-overhead") of the same run.

    python3 perf/compare_gpu.py bench.jsonl
"""

import json
import sys


def main():
    src = open(sys.argv[1]) if len(sys.argv) > 1 else sys.stdin
    rows = [json.loads(l) for l in src if l.startswith("{")]
    ref = {}
    for r in rows:
        if r["mode"] == "torch-reduce-overhead":
            ref[(r["workload"], r["shape"])] = r["latency_us_p50"]
    print(f"{'workload':12} {'shape':8} {'mode':22} {'p50 us':>10} {'host us':>9} "
          f"{'first ms':>10} {'vs torch RO':>12}")
    for r in rows:
        key = (r["workload"], r["shape"])
        ro = ref.get(key)
        ratio = f"{r['latency_us_p50'] / ro:.2f}x" if ro else "-"
        host = r.get("host_us_per_call")
        print(f"{r['workload']:12} {r['shape']:8} {r['mode']:22} {r['latency_us_p50']:10.1f} "
              f"{(f'{host:.1f}' if host is not None else '-'):>9} {r['first_call_ms']:10.1f} "
              f"{ratio:>12}")


if __name__ == "__main__":
    main()
