#!/usr/bin/env python3
"""Per-kernel device times of one call, from an Nsight Compute CSV export.

  ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum \
      --export run ./kiln-bench ... --iters N
  ncu --import run.ncu-rep --csv --page raw --print-units base > run.csv
  ncu_kernels.py run.csv --per-call K [--calls C]

ncu runs every kernel alone (serialized), so a kernel's duration here has no
launch gap and no overlap; their sum against the call's latency says how much
of the call is kernels and how much is gaps. The last C calls' kernels (the
last C*K launches, K = kiln-bench's kernels_per_call) are summed per kernel
name and divided by C. K = 0 (what kiln-bench reports for a call replayed as a
CUDA graph, whose kernels it does not count) finds K as the shortest period
with which the last C calls' kernel names repeat.
"""
import argparse
import csv
import re
import sys


def short(name):
    name = re.sub(r"\(.*", "", name)  # drop the parameter list
    name = re.sub(r"^void ", "", name)
    return name[:70]


def period(names, calls):
    """The shortest K such that the last calls * K names are `calls` equal runs."""
    for k in range(1, len(names) // calls + 1):
        tail = names[-k * calls:]
        if all(tail[i] == tail[i % k] for i in range(len(tail))):
            return k
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--per-call", type=int, required=True,
                    help="kernels per call (0: find it from the names' period)")
    ap.add_argument("--calls", type=int, default=3)
    args = ap.parse_args()
    rows = []
    with open(args.csv, newline="") as f:
        for r in csv.DictReader(f):
            if not r.get("ID", "").isdigit():
                continue  # the units row
            # ncu may print numbers with thousands separators ("6,624").
            ns = float(r["gpu__time_duration.sum"].replace(",", ""))
            rows.append((int(r["ID"]), r["Kernel Name"], ns))
    rows.sort()
    if args.per_call <= 0:
        args.per_call = period([short(name) for _, name, _ in rows], args.calls)
        if args.per_call == 0:
            sys.exit("ncu_kernels.py: the kernels of " + args.csv + " do not repeat per call")
    window = rows[-args.per_call * args.calls:]
    if not window:
        sys.exit("ncu_kernels.py: no kernels in " + args.csv)
    per_name = {}
    for _, name, ns in window:
        n = per_name.setdefault(short(name), [0, 0.0])
        n[0] += 1
        n[1] += ns
    total = sum(v[1] for v in per_name.values()) / args.calls / 1000
    print(f"{len(rows)} kernels profiled; the last {len(window)} ({args.calls} calls of "
          f"{args.per_call}): {total:.1f} us of kernels per call")
    print(f"{'us/call':>8} {'share':>6} {'n/call':>6} {'us each':>8}  kernel")
    for name, (n, ns) in sorted(per_name.items(), key=lambda kv: -kv[1][1]):
        us = ns / args.calls / 1000
        print(f"{us:8.1f} {100 * us / total:5.1f}% {n / args.calls:6.1f} {ns / n / 1000:8.2f}  {name}")


if __name__ == "__main__":
    main()
