#!/usr/bin/env bash
# The CUDA kernels' tuning experiments on the GPU machine (the `run` tool): builds the standalone
# library with the experiments (bench/cuda/experiments, -DVARPACK_CUDA_EXPERIMENTS=ON) and runs
# the parts named on the command line (default: shapes):
#   shapes   tile_shapes: the library's shapes and launches against variants of them (named
#            shapes of bench/cuda/experiments/tile_variants_*.cu), timed and checked against the
#            library's output, TUNE_ROUNDS rounds (default 1; 2 with --baseline), then their ratios
#            to each head dim's first variant (scripts/tune_summary.py, tune_summary.txt);
#   sanitize compute-sanitizer memcheck and racecheck on tile_shapes' variants at its small points
#            (about 800 rows, MHA and GQA), each run once and checked: the experiments' barrier
#            protocols, which the library's sanitizer steps never run (TUNESAN_S caps each,
#            default 150 s; TUNESAN_ONLY, if set, instead of TUNE_ONLY);
#   rates    the clocks an ex2 / tanh / FMA takes a warp (experiments/pipe_rates.cu) and a tile of
#            the d128 backward's products alone (experiments/product_floor.cu);
#   profile  ncu on the Hopper kernels over the standalone benchmark (PROFILE_CASE: its point,
#            default 1 = 16 x 4k; PROFILE_D: head dim, default 128; PROFILE_SKIP: launches
#            skipped; PROFILE_KERNELS: which, default the forward, the backward and its row
#            passes; PROFILE_EXTRA: more ncu arguments), with per-instruction stall samples in
#            ncu_backward_sass.csv and ncu_forward_sass.csv.
# tile_shapes' own knobs: TUNE_DIMS="128 64" those head dims only; TUNE_ONLY=bwd the variants whose
# name holds "bwd" (or one of "a|b"'s parts); TUNE_SKIP likewise leaves some out (a variant that
# hangs is left out of a second try by itself); TUNE_POINTS=64x1k,16x4k those points only;
# TUNE_S each round's time limit (default 330 s); TUNE_SUSTAIN_S=2 also 2 s of each variant's
# calls back to back, with their energy per call.
# Usage: scripts/gpu_tune.sh [--baseline DIR] [shapes] [sanitize] [rates] [profile] [--help]
#   --baseline DIR: also DIR's tile_shapes (a tree of an earlier commit), the two binaries run in
#   turn each round, to compare the library's variants across a change.
cd "$(dirname "$0")/.."
usage() { sed -n '2,/^cd /p' "$0" | sed '$d; s/^# \{0,1\}//'; }
baseline= parts=()
while [ $# -gt 0 ]; do
  case $1 in
    --baseline) baseline=${2:?--baseline needs a directory}; shift ;;
    shapes|sanitize|rates|profile) parts+=("$1") ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu_tune.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
[ ${#parts[@]} -gt 0 ] || parts=(shapes)
want=" ${parts[*]} "
source scripts/gpu_common.sh
describe_machine

build_standalone . $bin 16 -DVARPACK_CUDA_EXPERIMENTS=ON -DCMAKE_CUDA_FLAGS=-Xptxas=-v &
build_pid=$!
if [ -n "$baseline" ] && [[ $want == *" shapes "* ]]; then
  build_standalone "$baseline" build-baseline 8 -DVARPACK_CUDA_EXPERIMENTS=ON -- tile_shapes &
  baseline_pid=$!
fi
wait $build_pid
summary+=("$(printf '%-22s rc=%-3s' build_standalone $?)")
experiments=$bin/bench

# tune_round BINARY NAME: one round of tile_shapes. Where a variant hangs (tile_shapes names it on
# a "HANG: <name> at <point>" line and exits with status 3), the round again without it
# (TUNE_SKIP), at most twice, so that one stuck experiment does not cost the call.
tune_round() {
  local binary=$1 name=$2 skip=${TUNE_SKIP:-} hung attempt
  for attempt in 1 2 3; do
    TUNE_SKIP=$skip step bench.log "$name" "${TUNE_S:-330}" "$binary" 10 ${TUNE_DIMS:-}
    [ $? -eq 3 ] || return 0
    hung=$(sed -n 's/^HANG: \(.*\) at [^ ]* (not finished.*/\1/p' "$out/bench.log" | tail -1)
    [ -n "$hung" ] || return 0
    skip=${skip:+$skip|}$hung
  done
}
if [[ $want == *" shapes "* ]] && [ -x $experiments/tile_shapes ]; then
  if [ -n "$baseline" ]; then
    wait "$baseline_pid"
    base_shapes=$(find build-baseline -name tile_shapes -type f | head -1)
    for round in $(seq 1 "${TUNE_ROUNDS:-2}"); do
      tune_round "$base_shapes" "tile_shapes_baseline_$round"
      tune_round $experiments/tile_shapes "tile_shapes_$round"
    done
  else
    for round in $(seq 1 "${TUNE_ROUNDS:-1}"); do
      tune_round $experiments/tile_shapes "tile_shapes_$round"
    done
  fi
  python3 scripts/tune_summary.py "$out/bench.log" >"$out/tune_summary.txt" 2>&1
  cat "$out/tune_summary.txt"
fi
if [[ $want == *" sanitize "* ]] && [ -x $experiments/tile_shapes ]; then
  [ -n "${TUNESAN_ONLY:-}" ] && export TUNE_ONLY=$TUNESAN_ONLY
  for tool in memcheck racecheck; do
    TUNE_POINTS=small TUNE_CHECK_ONLY=1 TUNE_DEADLINE_S=120 step tests.log "${tool}_tile_shapes" \
      "${TUNESAN_S:-150}" \
      compute-sanitizer --tool $tool --error-exitcode 9 $experiments/tile_shapes 1 ${TUNE_DIMS:-}
  done
fi
if [[ $want == *" rates "* ]]; then
  [ -x $experiments/pipe_rates ] && step bench.log pipe_rates 60 $experiments/pipe_rates
  [ -x $experiments/product_floor ] && step bench.log product_floor 60 $experiments/product_floor
fi
if [[ $want == *" profile "* ]] && [ -x $bin/bench/bench_attention_cuda ]; then
  # The backward's two row passes too: at short sequences they are a large part of its time.
  # delta_kernel runs 6 times in the deterministic mode first (3 warm-up + 3 timed calls).
  for kernel in ${PROFILE_KERNELS:-hopper_forward_kernel hopper_backward_kernel delta_kernel dq_convert_kernel}; do
    skip=2
    [ $kernel = delta_kernel ] && skip=8
    skip=${PROFILE_SKIP:-$skip}  # 6 with hopper_backward_kernel: the first atomic-mode launch
    step ncu.txt "ncu_$kernel" 120 ncu --clock-control none --kernel-name "regex:$kernel" \
      --launch-skip $skip --launch-count 1 --section SpeedOfLight --section WarpStateStats \
      --section Occupancy --section SchedulerStats --section MemoryWorkloadAnalysis \
      --section ComputeWorkloadAnalysis --section SourceCounters ${PROFILE_EXTRA:-} \
      -o "/tmp/ncu_$kernel" -f \
      $bin/bench/bench_attention_cuda 3 "${PROFILE_CASE:-1}" "${PROFILE_D:-128}" &&
      ncu -i "/tmp/ncu_$kernel.ncu-rep" --page details --print-details all >>"$out/ncu.txt" 2>&1
  done
  for direction in backward forward; do
    [ -f /tmp/ncu_hopper_${direction}_kernel.ncu-rep ] &&
      ncu -i /tmp/ncu_hopper_${direction}_kernel.ncu-rep --page source --csv --print-source sass \
        >"$out/ncu_${direction}_sass.csv" 2>&1
  done
fi
# The kernels' instruction counts, per function of the library.
cuobjdump -sass $bin/libvarpack_cuda.a 2>/dev/null |
  awk '/Function :/ {f=$3} /HMMA|HGMMA/ {h[f]++} /HGMMA/ {w[f]++} /LDSM/ {l[f]++} /LDL|STL/ {s[f]++}
       /RED[G.]/ {r[f]++}
       END {for (k in h) printf "%s HMMA %d HGMMA %d LDSM %d local %d RED %d\n", k, h[k], w[k], l[k], s[k], r[k]}' \
  >>"$out/build_$bin.log"
print_summary
