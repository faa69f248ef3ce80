#!/usr/bin/env bash
# Builds kiln (Release, with CUDA, tests and benchmarks) in build-gpu/ and packs
# a self-contained bundle for a GPU machine that has the CUDA toolkit and
# libstdc++ but none of kiln's Debian packages:
#   scripts/gpu.sh [--oracle] [--keep-base] [--bundle DIR] [--build DIR]
#     --oracle     also bundle kiln_oracle_tests and golden files (needs python3-torch here)
#     --keep-base  the kiln-bench of the bundle being replaced stays in the new one as
#                  kiln-bench-base, for run.sh --compare (a baseline in the same command)
# The bundle (default .gpu/) holds the binaries, the shared libraries they need
# beyond glibc, libstdc++ and the toolkit (RUNPATH $ORIGIN), and run.sh:
#   .gpu/run.sh [--filter F] [--test-shards N] [--test-timeout S] [--no-tests] [--no-oracle] ...
#   (on the GPU machine: tests, the op oracle on CUDA, benchmarks beside PyTorch;
#   a summary and one archive of the logs go to $OUT when set; its header lists the options)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
bundle=.gpu
build=build-gpu
oracle=0
keep_base=0
while [ $# -gt 0 ]; do
  case "$1" in
    --oracle) oracle=1 ;;
    --keep-base) keep_base=1 ;;
    --bundle) bundle=$2; shift ;;
    --build) build=$2; shift ;;
    *) echo "usage: $0 [--oracle] [--keep-base] [--bundle DIR] [--build DIR]" >&2; exit 2 ;;
  esac
  shift
done
jobs=${KILN_JOBS:-2}

scripts/deps.sh
if ! command -v patchelf >/dev/null; then
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends patchelf
fi

# --- Build ------------------------------------------------------------------------------
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_WERROR=ON -DKILN_CUDA=ON \
  -DKILN_BUILD_TESTS=ON
cmake --build "$build" -j "$jobs"

# --- Bundle -----------------------------------------------------------------------------
base_bench=""
if [ "$keep_base" = 1 ]; then
  [ -x "$bundle/kiln-bench" ] || { echo "gpu.sh: --keep-base: no $bundle/kiln-bench to keep" >&2; exit 1; }
  base_bench=$(mktemp)
  cp "$bundle/kiln-bench" "$base_bench"
fi
rm -rf "$bundle"
mkdir -p "$bundle"
bundle=$(cd "$bundle" && pwd)

exes=("$build/tests/kiln_tests" "$build/kiln-info" "$build/kiln-bench")
# Benchmarks in perf/ (those linking libtorch cannot run there and are left out).
while IFS= read -r f; do
  if ldd "$f" | grep -q libtorch; then
    echo "gpu.sh: leaving out $(basename "$f") (links libtorch)"
    continue
  fi
  exes+=("$f")
done < <(find "$build/perf" -maxdepth 1 -type f -executable 2>/dev/null | sort)
[ "$oracle" = 1 ] && exes+=("$build/tests/kiln_oracle_tests")

# Libraries every Linux with a CUDA toolkit has, and the toolkit's own (cuBLASLt
# and cuBLAS by name too, wherever this machine keeps them: the GPU machine's
# toolkit brings its own, found through the RUNPATH set below).
is_provided() {
  case "$(basename "$1")" in
    linux-vdso.so* | ld-linux*.so* | libc.so* | libm.so* | libdl.so* | libpthread.so* | \
      librt.so* | libutil.so* | libstdc++.so* | libgcc_s.so* | libcuda.so* | libcublasLt.so* | \
      libcublas.so*) return 0 ;;
  esac
  case "$1" in
    /usr/local/cuda*) return 0 ;;
  esac
  return 1
}

declare -A copied=()
for exe in "${exes[@]}"; do
  cp -L "$exe" "$bundle/"
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    if [ "$path" = "not" ]; then
      echo "gpu.sh: $(basename "$exe") needs $name, which is not found here" >&2
      exit 1
    fi
    is_provided "$path" && continue
    [ -n "${copied[$name]:-}" ] && continue
    cp -L "$path" "$bundle/$name"
    copied[$name]=1
  done < <(ldd "$exe")
done

# CUPTI, which kiln-bench --timeline loads at run time (Note [Kernel timeline]).
cupti=$(find -L /usr/local/cuda/ -name 'libcupti.so' 2>/dev/null | head -1)
[ -n "$cupti" ] && cp -L "$cupti" "$bundle/libcupti.so"

if [ -n "$base_bench" ]; then
  mv "$base_bench" "$bundle/kiln-bench-base"
  chmod +x "$bundle/kiln-bench-base"
fi

# The toolkit's library folders after $ORIGIN, for machines whose loader does not know them.
cuda_dirs="/usr/local/cuda/lib64:/usr/local/cuda/lib:/usr/local/cuda/targets/x86_64-linux/lib"
for f in "$bundle"/*; do
  chmod u+w "$f"
  strip --strip-unneeded "$f" 2>/dev/null || true
  patchelf --set-rpath "\$ORIGIN:$cuda_dirs" "$f"
done

if [ "$oracle" = 1 ]; then
  (cd tests/oracle && ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 OMP_NUM_THREADS=1 \
    /usr/bin/python3 generate.py --out "$bundle/oracle")
fi

cp perf/torch_gpu.py perf/compare_gpu.py perf/ncu_kernels.py perf/ncu_sections.py "$bundle/"

cat > "$bundle/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs kiln's tests (GPU suites included), the op oracle on the GPU, and the
# benchmarks beside PyTorch, from this bundle:
#   run.sh [--filter GTEST_FILTER] [--test-shards N] [--test-timeout S] [--no-tests]
#          [--no-oracle] [--oracle-modes "eager lazy compile graph"] [--no-bench] [--no-torch]
#          [--layer-ops] [--ncu "WORKLOAD:SHAPE ..."] [--ncu-sections "WORKLOAD:SHAPE:REGEX:SKIP:COUNT ..."]
#   --test-timeout  each test process is stopped after S seconds (its log is kept)
#   --layer-ops     kiln-layer-ops (a GPT-2 block kernel by kernel) at the reference shapes
#   --ncu           each compiled call's kernels timed one by one by Nsight Compute
#                   (ncu_kernels.py), where ncu is installed
#   --ncu-sections  occupancy, throughput and launch metrics of COUNT kernels whose
#                   names match REGEX, after SKIP of them (ncu_sections.py)
#   --compare "WORKLOAD ..."  compile-mode p50 of kiln-bench-base (gpu.sh --keep-base)
#                   and kiln-bench, interleaved (reversed every other round), --rounds N
#                   times (default 2), and of
#                   kiln-bench under each --variant "NAME:VAR=VALUE[,VAR=VALUE]" given
#   --timeline "WORKLOAD:SHAPE ..."  kiln-bench --timeline 50 --positions 16 for each (CUPTI)
#   --products "KxN[:rms|:ln] ..."  kiln-layer-ops --products at each of --product-rows
#                   (default "1 8"), plainly and under each --variant
# Output: what it prints, also as summary.txt, and every log packed in
# gpu-logs.tar.gz: two files in $OUT when set, else in ./gpu-logs.
# Exit status: nonzero when a test failed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dest=${OUT:-$(pwd)/gpu-logs}
mkdir -p "$dest"
out=$(mktemp -d)
exec > >(tee "$dest/summary.txt") 2>&1
pack() { tar -C "$out" -czf "$dest/gpu-logs.tar.gz" . 2>/dev/null; }
trap pack EXIT
filter='*' tests=1 oracle=1 bench=1 torch=1 modes="eager lazy compile graph" test_shards=1 layer_ops=0 ncu=""
test_timeout=0 sections="" compare="" rounds=2 variants=() products="" product_rows="1 8" timeline=""
while [ $# -gt 0 ]; do
  case "$1" in
    --filter) filter=$2; shift ;;
    --test-shards) test_shards=$2; shift ;;
    --test-timeout) test_timeout=$2; shift ;;
    --no-tests) tests=0 ;;
    --no-oracle) oracle=0 ;;
    --oracle-modes) modes=$2; shift ;;
    --no-bench) bench=0 ;;
    --no-torch) torch=0 ;;
    --layer-ops) layer_ops=1 ;;
    --ncu) ncu=$2; shift ;;
    --ncu-sections) sections=$2; shift ;;
    --compare) compare=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --variant) variants+=("$2"); shift ;;
    --products) products=$2; shift ;;
    --timeline) timeline=$2; shift ;;
    --product-rows) product_rows=$2; shift ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
if [ -n "${CUDA_HOME:-}" ]; then
  export LD_LIBRARY_PATH="$CUDA_HOME/lib64:$CUDA_HOME/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
export KILN_CACHE_DIR="${TMPDIR:-/tmp}/kiln-gpu-cache"
ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
status=0
{ nvidia-smi || echo "nvidia-smi: not available"; } > "$out/nvidia-smi.txt" 2>&1
"$here/kiln-info" > "$out/kiln-info.txt" 2>&1 || status=1
cat "$out/kiln-info.txt"

if [ $tests = 1 ]; then
  # --test-shards N runs N processes side by side, each every Nth test (gtest sharding).
  echo "== kiln_tests (filter: $filter, $test_shards process(es))"
  # Two CPU tests read golden files from the source tree, which is not here.
  exclude="CpuCodegen.GoldenListings:Print.MatchesPyTorchRepr"
  case "$filter" in
    *-*) filter="$filter:$exclude" ;;
    *) filter="$filter-$exclude" ;;
  esac
  pids=()
  limit=()
  [ "$test_timeout" -gt 0 ] && limit=(timeout "$test_timeout")
  for k in $(seq 0 $((test_shards - 1))); do
    GTEST_TOTAL_SHARDS=$test_shards GTEST_SHARD_INDEX=$k "${limit[@]}" "$here/kiln_tests" \
      --gtest_filter="$filter" \
      --gtest_output="xml:$out/kiln_tests.$k.xml" > "$out/kiln_tests.$k.log" 2>&1 &
    pids+=($!)
  done
  for k in "${!pids[@]}"; do
    wait "${pids[$k]}"
    rc=$?
    [ $rc = 0 ] && continue
    status=1
    [ $rc = 124 ] && echo "kiln_tests shard $k: stopped after ${test_timeout} s (--test-timeout)"
  done
  cat "$out"/kiln_tests.*.log > "$out/kiln_tests.log"
  rm -f "$out"/kiln_tests.*.log
  grep -h "^\[ RUN      \]" "$out/kiln_tests.log" | sed 's/.*\] //' | sort > "$out/started.txt"
  grep -h "^\[       OK \]\|^\[  FAILED  \]\|^\[  SKIPPED \]" "$out/kiln_tests.log" |
    sed 's/^\[[^]]*\] //; s/ (.*//' | sort > "$out/ended.txt"
  unfinished=$(comm -23 "$out/started.txt" "$out/ended.txt")
  [ -n "$unfinished" ] && echo "tests started and never ended (a crash or the time limit):" &&
    echo "$unfinished" | head -20
  grep -A12 "Failure$" "$out/kiln_tests.log" | head -200
  grep -h "^\[  FAILED  \] .*)$\|^\[==========\] .* ran\.\|^\[  PASSED  \]\|^\[  SKIPPED \] [0-9]" \
    "$out/kiln_tests.log"
fi

if [ $oracle = 1 ] && [ -d "$here/oracle" ] && [ -x "$here/kiln_oracle_tests" ]; then
  # NVRTC compiles bound the run (lazy mode makes a kernel per case), so the
  # cases are split over one process per two cores; the GPU work is tiny.
  shards=$(( $(nproc) / 2 )); [ $shards -lt 1 ] && shards=1; [ $shards -gt 8 ] && shards=8
  for mode in $modes; do
    echo "== kiln_oracle_tests --device cuda --mode $mode ($shards processes)"
    pids=()
    for k in $(seq 0 $((shards - 1))); do
      "$here/kiln_oracle_tests" --golden "$here/oracle" --device cuda --mode $mode \
        --shard $k/$shards > "$out/oracle-cuda-$mode.$k.log" 2>&1 &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait $p || status=1; done
    cat "$out"/oracle-cuda-$mode.*.log > "$out/oracle-cuda-$mode.log"
    rm -f "$out"/oracle-cuda-$mode.*.log
    grep -h "^FAIL" "$out/oracle-cuda-$mode.log" | head -40
    awk -v mode=$mode '/^oracle \(/ { cases += $4; failed += $6 }
      /not compared/ { gaps += $1 }
      END { printf "oracle (%s, cuda): %d cases, %d failed, %d not compared (CPU-only 16-bit gaps)\n",
            mode, cases, failed, gaps }' "$out/oracle-cuda-$mode.log"
  done
fi

if [ $bench = 1 ]; then
  echo "== kiln-bandwidth"
  "$here/kiln-bandwidth" --device cuda 2>&1 | tee "$out/kiln-bandwidth.log" || status=1
  echo "== kiln-compile-overhead"
  "$here/kiln-compile-overhead" --device cuda --iters 5000 2>&1 | tee "$out/kiln-compile-overhead.log" || status=1
  echo "== kiln-bench: lazy with a cold kernel cache, then every mode (warm cache)"
  # Every measured line goes to bench.jsonl (kiln and PyTorch), read by compare_gpu.py.
  rm -rf "$KILN_CACHE_DIR"
  "$here/kiln-bench" --device cuda --mode lazy --json 2> "$out/bench.err" |
    sed 's/"mode":"lazy"/"mode":"lazy-cold-cache"/' > "$out/bench.jsonl" || status=1
  for mode in eager lazy compile-default compile; do
    "$here/kiln-bench" --device cuda --mode $mode --json >> "$out/bench.jsonl" \
      2>> "$out/bench.err" || status=1
  done
  "$here/kiln-bench" --device cuda --workload llama-decode --mode compile --json \
    >> "$out/bench.jsonl" 2>> "$out/bench.err" || status=1
  echo "== first call of gpt2 compiled alone: new process, empty kernel cache, then warm"
  rm -rf "$KILN_CACHE_DIR"
  for run in cold warm; do
    "$here/kiln-bench" --device cuda --workload gpt2 --shape 1x1 --mode compile --iters 20 --json \
      2>> "$out/bench.err" | sed "s/\"mode\":\"compile\"/\"mode\":\"compile-first-$run\"/" \
      >> "$out/bench.jsonl" || status=1
  done
  echo "== host time of a compiled call by phase (KILN_COMPILE_PROFILE=1)"
  for w in chain16:4096 gpt2:1x1 gpt2-decode:1x1024 gpt2-decode:8x1024; do
    echo "-- ${w%%:*} ${w#*:}"
    KILN_COMPILE_PROFILE=1 "$here/kiln-bench" --device cuda --workload "${w%%:*}" \
      --shape "${w#*:}" --mode compile --iters 200 --json 2>&1 >/dev/null | grep "compile profile"
  done
  tail -5 "$out/bench.err"
fi

if [ -n "$compare" ]; then
  echo "== same-command comparison, compile mode, p50 us per call ($rounds rounds)"
  [ -x "$here/kiln-bench-base" ] || echo "no kiln-bench-base in the bundle (gpu.sh --keep-base)"
  runs=()
  [ -x "$here/kiln-bench-base" ] && runs+=("base:")
  runs+=("new:")
  for v in ${variants[@]+"${variants[@]}"}; do runs+=("$v"); done
  for w in $compare; do  # kernel caches warm for every binary first
    for bin in kiln-bench-base kiln-bench; do
      [ -x "$here/$bin" ] && "$here/$bin" --device cuda --workload "$w" --mode compile --iters 3 \
        > /dev/null 2>&1
    done
  done
  for round in $(seq 1 "$rounds"); do
    # Even rounds run the binaries in the reverse order: the second of a pair
    # read slower (mlp by about 0.8 us for one binary), so each takes both places.
    order=("${runs[@]}")
    if [ $((round % 2)) = 0 ]; then
      order=()
      for ((k = ${#runs[@]} - 1; k >= 0; k--)); do order+=("${runs[k]}"); done
    fi
    for w in $compare; do
      for r in "${order[@]}"; do
        name=${r%%:*} envs=${r#*:} bin=kiln-bench
        [ "$name" = base ] && bin=kiln-bench-base
        env ${envs//,/ } "$here/$bin" --device cuda --workload "$w" --mode compile --json \
          2>> "$out/compare.err" | tee -a "$out/compare.jsonl" | python3 -c "
import json, sys
for line in sys.stdin:
    if line.startswith('{'):
        r = json.loads(line)
        print(f\"round $round {r['workload']:12} {r['shape']:8} {'$name':16} {r['latency_us_p50']:9.1f} \"
              f\"host {r.get('host_us_per_call') or 0:6.1f}\")" || status=1
      done
    done
  done
fi

if [ -n "$products" ]; then
  for m in $product_rows; do
    for r in "plain:" ${variants[@]+"${variants[@]}"}; do
      name=${r%%:*} envs=${r#*:}
      echo "== kiln-layer-ops --products, $m rows, $name${envs:+ ($envs)}"
      env ${envs//,/ } "$here/kiln-layer-ops" --device cuda --batch "$m" --iters 30 \
        --peak-gbps 4800 --products "$products" 2>&1 | tee -a "$out/products.txt" || status=1
    done
  done
fi

for w in $timeline; do
  echo "== kiln-bench --timeline: ${w%%:*} ${w#*:}"
  "$here/kiln-bench" --device cuda --workload "${w%%:*}" --shape "${w#*:}" --mode compile \
    --iters 100 --timeline 50 --positions 16 2>&1 | tee -a "$out/timeline.txt" || status=1
done

if [ $layer_ops = 1 ]; then
  for shape in "1 1 1024" "8 1 1024" "1 128 1024" "8 128 1024"; do
    set -- $shape
    echo "== kiln-layer-ops --batch $1 --tokens $2 --cache $3"
    "$here/kiln-layer-ops" --device cuda --batch $1 --tokens $2 --cache $3 2>&1 |
      tee "$out/layer-ops-$1x$2.log" || status=1
  done
fi

if [ -n "$ncu" ]; then
  for w in $ncu; do
    name=${w%%:*} shape=${w#*:}
    echo "== ncu: kernels of one compiled call, $name $shape"
    if [ -z "$ncu_bin" ]; then echo "ncu not found"; break; fi
    "$ncu_bin" --clock-control none --cache-control none --metrics gpu__time_duration.sum \
      --export "$out/ncu-$name-$shape" -f "$here/kiln-bench" --device cuda --workload "$name" \
      --shape "$shape" --mode compile --iters 5 --json > "$out/ncu-$name-$shape.jsonl" \
      2> "$out/ncu-$name-$shape.err" || { status=1; tail -5 "$out/ncu-$name-$shape.err"; continue; }
    "$ncu_bin" --import "$out/ncu-$name-$shape.ncu-rep" --csv --page raw --print-units base \
      > "$out/ncu-$name-$shape.csv"
    rm -f "$out/ncu-$name-$shape.ncu-rep"
    kpc=$(grep -m1 '^{' "$out/ncu-$name-$shape.jsonl" |
      python3 -c "import json,sys; print(round(json.loads(sys.stdin.read())['kernels_per_call']))")
    python3 "$here/ncu_kernels.py" "$out/ncu-$name-$shape.csv" --per-call "$kpc" | tee "$out/ncu-$name-$shape.txt"
  done
fi

if [ -n "$sections" ]; then
  for w in $sections; do
    IFS=: read -r name shape regex skip count <<< "$w"
    echo "== ncu sections: $name $shape, $count kernels matching '$regex' after $skip"
    if [ -z "$ncu_bin" ]; then echo "ncu not found"; break; fi
    rep="$out/sections-$name-$shape-$skip"
    "$ncu_bin" --section SpeedOfLight --section Occupancy --section LaunchStats \
      --section WarpStateStats -k "regex:$regex" --launch-skip "$skip" --launch-count "$count" \
      --export "$rep" -f "$here/kiln-bench" --device cuda --workload "$name" --shape "$shape" \
      --mode compile --iters 3 > "$rep.log" 2>&1 || { status=1; tail -5 "$rep.log"; continue; }
    "$ncu_bin" --import "$rep.ncu-rep" --csv --page details --print-units base > "$rep.csv"
    rm -f "$rep.ncu-rep"
    python3 "$here/ncu_sections.py" "$rep.csv"
  done
fi

if [ $torch = 1 ] && python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  echo "== PyTorch (same machine, same run)"
  python3 "$here/torch_gpu.py" >> "$out/bench.jsonl" 2> "$out/torch.err" || status=1
  tail -3 "$out/torch.err"
fi
if [ -f "$out/bench.jsonl" ]; then
  echo "== latency p50 per workload and mode (same run)"
  python3 "$here/compare_gpu.py" "$out/bench.jsonl"
fi
echo "kiln gpu run: $([ $status = 0 ] && echo ok || echo FAILED) (logs in $dest/gpu-logs.tar.gz)"
exit $status
RUN
chmod +x "$bundle/run.sh"

# --- Check the bundle here: every library it needs resolves inside it ------------------
for f in "$bundle"/*; do
  [ -f "$f" ] && file -L "$f" | grep -q ELF || continue
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    if [ "$path" = "not" ]; then
      echo "gpu.sh: $(basename "$f") cannot find $name" >&2
      exit 1
    fi
    is_provided "$path" && continue
    case "$path" in
      "$bundle"/*) ;;
      *) echo "gpu.sh: $(basename "$f") loads $path from outside the bundle" >&2; exit 1 ;;
    esac
  done < <(env -u LD_LIBRARY_PATH ldd "$f")
done
(cd / && env -u LD_LIBRARY_PATH "$bundle/kiln-info" >/dev/null)
(cd / && env -u LD_LIBRARY_PATH "$bundle/kiln_tests" --gtest_list_tests >/dev/null)
# One compressed file to carry as well (copying to a machine may cap the size):
#   mkdir -p /tmp/kiln && tar -xJf .gpu.tar.xz -C /tmp/kiln && /tmp/kiln/run.sh
tar -C "$bundle" -cf - . | xz -T"$jobs" -6 > "$bundle.tar.xz"
size=$(du -sm "$bundle" | cut -f1)
packed=$(du -sm "$bundle.tar.xz" | cut -f1)
echo "gpu.sh: bundle $bundle: $(ls "$bundle" | wc -l) files, ${size} MiB (${packed} MiB as $bundle.tar.xz)"
echo "gpu.sh: on the GPU machine run: ${bundle#"$root"/}/run.sh"
