#!/usr/bin/env python3
"""The few metrics per kernel that say why it is slow, from an Nsight Compute
details export:

  ncu --section SpeedOfLight --section Occupancy --section LaunchStats \
      --section WarpStateStats -k regex:R --launch-skip S --launch-count C \
      --export run ./kiln-bench ...
  ncu --import run.ncu-rep --csv --page details --print-units base > run.csv
  ncu_sections.py run.csv

One block per profiled kernel (in launch order): its duration, DRAM and L2
throughput (percent of peak), grid, registers, waves and occupancy. A kernel
far below the DRAM peak with a fraction of a wave and low achieved occupancy
is bound by latency, not bandwidth (perf/RESULTS.md, thirteenth session).
Durations here are at ncu's locked clocks, longer than in a timed run.
"""
import csv
import sys

KEEP = (
    "Duration",
    "DRAM Throughput",
    "L2 Cache Throughput",
    "Compute (SM) Throughput",
    "Grid Size",
    "Registers Per Thread",
    "Block Limit Registers",
    "Waves Per SM",
    "Theoretical Occupancy",
    "Achieved Occupancy",
    "Warp Cycles Per Issued Instruction",
)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: ncu_sections.py DETAILS.csv")
    rows = [r for r in csv.reader(open(sys.argv[1], newline="")) if len(r) > 10]
    if not rows:
        print("ncu_sections.py: no kernel in", sys.argv[1])
        return
    head = rows[0]
    col = {name: head.index(name) for name in ("ID", "Kernel Name", "Metric Name",
                                               "Metric Value", "Metric Unit")}
    last = None
    for r in rows[1:]:
        if r[col["Metric Name"]] not in KEEP:
            continue
        kernel = (r[col["ID"]], r[col["Kernel Name"]])
        if kernel != last:
            print(f"#{kernel[0]} {kernel[1][:100]}")
            last = kernel
        print(f"    {r[col['Metric Name']]:36} {r[col['Metric Value']]:>12} {r[col['Metric Unit']]}")


if __name__ == "__main__":
    main()
