#!/usr/bin/env bash
# The one command for the GPU machine (the `run` tool): reports the machine, builds the standalone
# CUDA library + test + benchmark (cmake -S src/attn/cuda) and the torch extension (in place), runs
# the standalone test, compute-sanitizer memcheck and racecheck on a small case, the pytest GPU
# tests, both benchmarks, and optionally the tile-shape experiments and an ncu profile. Logs go to
# $OUT (or ./gpu-out) in a few files (the run tool returns at most 8); a short table is printed last.
# Needs only what the GPU image has (torch with CUDA, nvcc, cmake): neither build uses simdjson, so
# nothing has to be carried (the extension leaves out the JSONL reader, see setup.py).
# Usage: scripts/gpu_run.sh [notorch] [quick] [test] [bench] [peers] [sanitize] [tune] [tunesan]
#   [timeline] [rates] [profile]
#   (no argument: test bench sanitize)
#   test: wgmma building blocks, standalone test (both backward modes; Hopper kernels, again with
#   4 heads per forward block, in the library's launch order (by chunks on these small batches) and
#   by sequence, with the forward's block per work instead of its persistent kernel, with the
#   persistent kernel on two blocks (VARPACK_FORWARD_BLOCKS=2: each block takes many works), then
#   VARPACK_CUDA_KERNELS=mma for the sm_80 ones), pytest (both paths, and the
#   CPU operator's tests once); bench:
#   both benchmarks (the standalone one on both kernel paths; the clock and power sampled during
#   the peers', at the end of bench_peers.log), the kernel-by-kernel trace of one torch step of
#   varpack and of cuDNN at 16 x 4k and 64 x 1k (bench/cuda/trace_step.py), then the host time
#   per call (bench/host_overhead.py); peers: the peer table alone (bench_attention_gpu.py with
#   the clock sampled; about 190 s), without the standalone benchmarks, traces and host times;
#   sanitize:
#   compute-sanitizer memcheck and racecheck on small cases, the persistent forward also on two
#   blocks (run after the benchmarks, as they are the slowest part); tune: tile-shape experiments
#   (TUNE_DIMS="128 64": those head dims only;
#   TUNE_ONLY=bwd: only the variants whose name holds "bwd", or one of "a|b"'s parts; TUNE_SKIP
#   likewise leaves some out (a variant that hangs is left out of a second try by itself);
#   TUNE_POINTS=64x1k,16x4k: only those points; TUNE_S: each round's time limit, default 330 s;
#   TUNE_ROUNDS=3: that many rounds one after another (default 1; 2 with BASELINE), each logged
#   apart, and summed up at the end as ratios to each head dim's first variant
#   (scripts/tune_summary.py, also in tune_summary.txt);
#   TUNE_SUSTAIN_S=2: also 2 s of each variant's calls back to back a point, with their energy per
#   call (at the power cap, where training runs);
#   tunesan: compute-sanitizer memcheck and racecheck on tile_shapes' variants (TUNE_ONLY,
#   TUNE_SKIP and TUNE_DIMS as for tune; TUNESAN_ONLY, if set, instead of TUNE_ONLY: e.g. only
#   the experiments among the variants timed) at its "small" points (about 800 rows, MHA and GQA),
#   each run once and checked, not timed: the experiments' barrier protocols, which the
#   library's sanitizer steps never run (TUNESAN_S caps each of the two, default 150 s);
#   BASELINE=dir: also the tile_shapes of the tree in dir (e.g. `git archive` of an earlier commit,
#   sent with the run tool's carry), the two binaries run in turn, TUNE_ROUNDS times, to compare
#   the library's variants across a change that the experiments cannot hold side by side);
#   timeline: the clock64 timelines of the d128 atomic backward (the library's, and any
#   experiment's config added to backward_timeline.cu's kConfigs), per block and per tile, and of
#   the d128 forward's loop tiles without and with softcap (experiments/*_timeline.cu;
#   TIMELINE_POINTS=64x1k,16x4k: those points only; TIMELINE_DIRECTIONS=backward: that one only;
#   TIMELINE_CONFIGS=lib,shared: those backward configs only, by their kConfigs names);
#   rates: the clocks an ex2 / tanh (f32, f16x2, bf16x2) / FMA takes a warp on a sub-partition,
#   latency and throughput (experiments/pipe_rates.cu, a few seconds), and the clocks a tile of
#   the d128 backward's products alone take, in five variants (experiments/product_floor.cu);
#   profile: ncu on the Hopper kernels (PROFILE_CASE: the benchmark's case number, default 1 =
#   16 x 4k; 0 = 64 x 1k; 9 = 4 x 16k with a window of 2048; PROFILE_D: the head dim, default
#   128; PROFILE_SKIP: launches of the kernel skipped (default 2: for hopper_backward_kernel a
#   deterministic-mode launch, 6 the first atomic one);
#   PROFILE_KERNELS: which, default the forward, the backward and its two row passes;
#   PROFILE_EXTRA: more ncu arguments, e.g. "--section MemoryWorkloadAnalysis_Tables"), with
#   per-instruction stall samples of the backward in ncu_backward_sass.csv and of the forward in
#   ncu_forward_sass.csv;
#   notorch: skip the torch extension (its build takes minutes), pytest and the peer benchmark:
#   the standalone library, test and benchmark alone, the quickest full check of the kernels;
#   quick: test runs the standalone test once (Hopper kernels, the library's launch order) and
#   sanitize the memcheck and racecheck of that order alone (for a change to one kernel late in a
#   session's device time).
#   SANITIZE_S=60 caps each sanitizer step at 60 s (default 120 and 150).
#   PREBUILT=dir: no build; the tests, benchmarks and experiments are dir's binaries (built on the
#   workstation and sent with the run tool's carry, when too little device time is left for the
#   build: `cmake -S src/attn/cuda -B build-carry -G Ninja -DCMAKE_BUILD_TYPE=Release && ninja -C
#   build-carry test_attention_cuda test_wgmma`, the binaries copied to a directory of their own
#   with the workstation's libcudart.so.13, which the binaries load from there).
set -uo pipefail
cd "$(dirname "$0")/.."
want=" ${*:-test bench sanitize} "
out=${OUT:-gpu-out}
bin=${PREBUILT:-build-gpu}
[ -n "${PREBUILT:-}" ] && export LD_LIBRARY_PATH="$(realpath "$bin"):${LD_LIBRARY_PATH:-}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
summary=()
step() {  # step LOG NAME TIMEOUT_S COMMAND...: runs with a time limit, appends to $out/LOG
  local log=$out/$1 name=$2 limit=$3
  shift 3
  local t0=$SECONDS
  echo "==== $name: $*" >>"$log"
  timeout "$limit" "$@" >"$out/.step" 2>&1
  local rc=$?
  cat "$out/.step" >>"$log"
  summary+=("$(printf '%-18s rc=%-3s %4ss  %s' "$name" "$rc" "$((SECONDS - t0))" \
               "$(grep -E 'PASSED|FAILED|passed|failed|ERROR SUMMARY|RACECHECK SUMMARY|rror' \
                  "$out/.step" | tail -1 | cut -c1-90)")")
  rm -f "$out/.step"
  return $rc
}

{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, \
'cuda', torch.version.cuda, torch.cuda.get_device_name())"
  nvcc --version | tail -1
} >"$out/machine.txt" 2>&1
cat "$out/machine.txt"

# Standalone library, test, benchmark (and experiments) next to the torch extension.
experiments=OFF
[[ $want == *" tune "* || $want == *" tunesan "* || $want == *" timeline "* ||
   $want == *" rates "* ]] && experiments=ON
torch=1
[[ $want == *" notorch "* ]] && torch=0
quick=0
[[ $want == *" quick "* ]] && quick=1
jobs=$((torch ? 8 : 16))  # the torch build takes the other 8 cores
[ -n "${PREBUILT:-}" ] ||
  (cmake -S src/attn/cuda -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DVARPACK_WERROR=ON \
     -DVARPACK_CUDA_EXPERIMENTS=$experiments -DCMAKE_CUDA_FLAGS=-Xptxas=-v &&
     cmake --build build-gpu -j $jobs) >"$out/build.log" 2>&1 &
build_pid=$!
if [[ $want == *" tune "* ]] && [ -n "${BASELINE:-}" ]; then
  (cmake -S "$BASELINE/src/attn/cuda" -B build-baseline -G Ninja -DCMAKE_BUILD_TYPE=Release \
     -DVARPACK_CUDA_EXPERIMENTS=ON && cmake --build build-baseline -j $jobs --target tile_shapes) \
    >"$out/build_baseline.log" 2>&1 &
  baseline_pid=$!
fi
# The torch extension with the system compiler where there is one: the image's CXX
# (/opt/gcc/bin/g++, a wrapper) linked libstdc++ statically into the extension, a second copy
# beside the one torch loads, and there an ostream number insertion crashed (a minimal torch
# extension's `ostringstream << 5` too; bench/results/cuda.md, 2026-12-02); a user's build links it
# dynamically, as /usr/bin/g++ does.
compilers=()
[ -x /usr/bin/g++ ] && compilers=(CC=/usr/bin/gcc CXX=/usr/bin/g++)
[ $torch = 1 ] && MAX_JOBS=8 step build_torch.log build_torch_ext 420 env "${compilers[@]}" \
  python3 setup.py build_ext --inplace
wait $build_pid
summary+=("$(printf '%-18s rc=%-3s' build_standalone $?)")
cuobjdump -sass $bin/libvarpack_cuda.a 2>/dev/null |
  awk '/Function :/ {f=$3} /HMMA|HGMMA/ {h[f]++} /HGMMA/ {w[f]++} /LDSM/ {l[f]++} /LDL|STL/ {s[f]++}
       /RED[G.]/ {r[f]++}
       END {for (k in h) printf "%s HMMA %d HGMMA %d LDSM %d local %d RED %d\n", k, h[k], w[k], l[k], s[k], r[k]}' \
  >>"$out/build.log"

if [[ $want == *" test "* ]]; then
  [ -x $bin/test_wgmma ] && step tests.log wgmma_blocks 60 $bin/test_wgmma
  [ -x $bin/test_attention_cuda ] &&
    step tests.log standalone_test 120 $bin/test_attention_cuda && [ $quick = 0 ] &&
    VARPACK_HEADS_PER_BLOCK=4 step tests.log standalone_4heads 120 $bin/test_attention_cuda &&
    VARPACK_HEADS_PER_BLOCK=4 VARPACK_LAUNCH_ORDER=sequence step tests.log standalone_by_sequence \
      120 $bin/test_attention_cuda &&
    VARPACK_FORWARD_PERSISTENT=0 step tests.log standalone_not_persistent 120 \
      $bin/test_attention_cuda &&
    VARPACK_FORWARD_BLOCKS=2 step tests.log standalone_two_blocks 120 $bin/test_attention_cuda
  [ -x $bin/test_attention_cuda ] && [ $quick = 0 ] &&
    VARPACK_CUDA_KERNELS=mma step tests.log standalone_mma 120 $bin/test_attention_cuda
  # test_attention.py too: the operator's CPU path and input checks, built with this machine's
  # compiler (an error message once crashed only here).
  [ $torch = 1 ] && PYTHONPATH=$PWD/python step tests.log pytest 300 python3 -m pytest -q -ra \
    tests/python/test_cuda_attention.py tests/python/test_attention.py &&
    VARPACK_CUDA_KERNELS=mma PYTHONPATH=$PWD/python step tests.log pytest_mma 300 python3 -m \
      pytest -q -ra tests/python/test_cuda_attention.py
fi
if [[ $want == *" timeline "* ]]; then
  for direction in ${TIMELINE_DIRECTIONS:-backward forward}; do
    args=(${TIMELINE_POINTS:-})
    if [[ $direction == backward && -n ${TIMELINE_CONFIGS:-} ]]; then
      args=("${TIMELINE_POINTS:-}" "$TIMELINE_CONFIGS")  # "": the binary's default points
    fi
    [ -x $bin/${direction}_timeline ] &&
      step bench.log ${direction}_timeline 180 $bin/${direction}_timeline "${args[@]}"
  done
fi
[[ $want == *" rates "* ]] && [ -x $bin/pipe_rates ] && step bench.log pipe_rates 60 $bin/pipe_rates
[[ $want == *" rates "* ]] && [ -x $bin/product_floor ] &&
  step bench.log product_floor 60 $bin/product_floor
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
if [[ $want == *" tune "* ]] && [ -x $bin/tile_shapes ]; then
  if [ -n "${BASELINE:-}" ]; then
    wait "$baseline_pid"
    for round in $(seq 1 "${TUNE_ROUNDS:-2}"); do
      tune_round build-baseline/tile_shapes "tile_shapes_baseline_$round"
      tune_round $bin/tile_shapes "tile_shapes_$round"
    done
  else
    for round in $(seq 1 "${TUNE_ROUNDS:-1}"); do
      tune_round $bin/tile_shapes "tile_shapes_$round"
    done
  fi
fi
if [[ $want == *" tunesan "* ]] && [ -x $bin/tile_shapes ]; then
  # After tune's rounds, so that they keep TUNE_ONLY (an empty TUNE_ONLY would keep no variant).
  [ -n "${TUNESAN_ONLY:-}" ] && export TUNE_ONLY=$TUNESAN_ONLY
  for tool in memcheck racecheck; do
    TUNE_POINTS=small TUNE_CHECK_ONLY=1 TUNE_DEADLINE_S=120 step tests.log "${tool}_tile_shapes" \
      "${TUNESAN_S:-150}" \
      compute-sanitizer --tool $tool --error-exitcode 9 $bin/tile_shapes 1 ${TUNE_DIMS:-}
  done
fi
if [[ $want == *" profile "* ]] && [ -x $bin/bench_attention_cuda ]; then
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
      $bin/bench_attention_cuda 3 "${PROFILE_CASE:-1}" "${PROFILE_D:-128}" &&
      ncu -i "/tmp/ncu_$kernel.ncu-rep" --page details --print-details all >>"$out/ncu.txt" 2>&1
  done
  # Where the backward's warps wait, instruction by instruction (stall samples per SASS line).
  [ -f /tmp/ncu_hopper_backward_kernel.ncu-rep ] &&
    ncu -i /tmp/ncu_hopper_backward_kernel.ncu-rep --page source --csv --print-source sass \
      >"$out/ncu_backward_sass.csv" 2>&1
  [ -f /tmp/ncu_hopper_forward_kernel.ncu-rep ] &&
    ncu -i /tmp/ncu_hopper_forward_kernel.ncu-rep --page source --csv --print-source sass \
      >"$out/ncu_forward_sass.csv" 2>&1
fi
if [[ $want == *" bench "* ]]; then
  [ -x $bin/bench_attention_cuda ] &&
    step bench.log bench_standalone 120 $bin/bench_attention_cuda 20 &&
    VARPACK_CUDA_KERNELS=mma step bench.log bench_mma 120 $bin/bench_attention_cuda 20
fi
if [[ $want == *" bench "* || $want == *" peers "* ]] && [ $torch = 1 ]; then
  # The clock, power and throttle reasons while the peers run (they run at the power cap).
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active \
    --format=csv -lms 500 >"$out/.clocks" 2>&1 &
  smi_pid=$!
  PYTHONPATH=$PWD/python step bench_peers.log bench_peers 420 python3 \
    bench/cuda/bench_attention_gpu.py --out "$out/bench_peers.md"
  kill $smi_pid 2>/dev/null
  wait $smi_pid 2>/dev/null
  { echo "==== clocks during bench_peers"; cat "$out/.clocks"; } >>"$out/bench_peers.log"
  rm -f "$out/.clocks"
fi
if [[ $want == *" bench "* ]]; then
  # One step kernel by kernel, varpack's and then cuDNN's (padded) at 16 x 4k and 64 x 1k.
  for impl in varpack cudnn; do
    for shape in "--rows 16 --len 4096" "--rows 64 --len 1024"; do
      [ $torch = 1 ] && PYTHONPATH=$PWD/python step bench_peers.log trace_step 120 python3 \
        bench/cuda/trace_step.py --impl $impl $shape --steps 10
    done
  done
  [ $torch = 1 ] && PYTHONPATH=$PWD/python step bench_peers.log host_overhead 60 python3 \
    bench/host_overhead.py --device cuda
fi
# Each small case runs both backward modes, so the atomic path is sanitized too; the Hopper forward
# runs several heads per block (its head-to-head hand-over is where a race would be), in both
# launch orders; case 1 leaves max_seqlen unknown to the kernels, case 2 understates it (by
# chunks, a forward block then takes several query tiles).
if [[ $want == *" sanitize "* ]] && [ -x $bin/test_attention_cuda ]; then
  export VARPACK_HEADS_PER_BLOCK=4
  orders="chunks sequence"
  [ $quick = 1 ] && orders=chunks
  for order in $orders; do
    VARPACK_LAUNCH_ORDER=$order step tests.log "memcheck_$order" "${SANITIZE_S:-120}" \
      compute-sanitizer --tool memcheck --error-exitcode 9 $bin/test_attention_cuda 1 3
    VARPACK_LAUNCH_ORDER=$order step tests.log "racecheck_$order" "${SANITIZE_S:-150}" \
      compute-sanitizer --tool racecheck --error-exitcode 9 $bin/test_attention_cuda 1 3
  done
  # The persistent forward on two blocks, so that each takes several works and reuses both work
  # slots (on one block a multiprocessor these cases give a block two works at most).
  VARPACK_FORWARD_BLOCKS=2 step tests.log memcheck_two_blocks "${SANITIZE_S:-120}" \
    compute-sanitizer --tool memcheck --error-exitcode 9 $bin/test_attention_cuda 1 3
  VARPACK_FORWARD_BLOCKS=2 step tests.log racecheck_two_blocks "${SANITIZE_S:-150}" \
    compute-sanitizer --tool racecheck --error-exitcode 9 $bin/test_attention_cuda 1 3
  # The forward with a block per work (the test passes a workspace, so the persistent kernel runs
  # above) on the same cases.
  export VARPACK_FORWARD_PERSISTENT=0
  step tests.log memcheck_block_per_work "${SANITIZE_S:-120}" \
    compute-sanitizer --tool memcheck --error-exitcode 9 $bin/test_attention_cuda 1 3
  step tests.log racecheck_block_per_work "${SANITIZE_S:-150}" \
    compute-sanitizer --tool racecheck --error-exitcode 9 $bin/test_attention_cuda 1 3
  unset VARPACK_HEADS_PER_BLOCK VARPACK_FORWARD_PERSISTENT
fi
if [[ $want == *" sanitize "* ]] && [ -x $bin/test_attention_cuda ] && [ $quick = 0 ]; then
  # The Hopper d96/d256 backward, cases as numbered by test_attention_cuda.cpp: memcheck on 30-36
  # (d96: q and k lengths that differ, windows, softcap; d256: k longer than q), racecheck on 23-25
  # (d96 causal MQA, d256 with and without causal masking).
  step tests.log memcheck_d96_d256 "${SANITIZE_S:-120}" \
    compute-sanitizer --tool memcheck --error-exitcode 9 $bin/test_attention_cuda 1 7 30
  step tests.log racecheck_d96_d256 "${SANITIZE_S:-150}" \
    compute-sanitizer --tool racecheck --error-exitcode 9 $bin/test_attention_cuda 1 3 23
  # d64 past 4096 queries (the forward's three consumers): cases 42 and 43; with scores of
  # standard deviation 6: 44-46 (46: d256, whose forward's lazy rescaling takes both branches).
  step tests.log memcheck_d64_long "${SANITIZE_S:-120}" \
    compute-sanitizer --tool memcheck --error-exitcode 9 $bin/test_attention_cuda 1 5 42
  step tests.log racecheck_d64_long "${SANITIZE_S:-150}" \
    compute-sanitizer --tool racecheck --error-exitcode 9 $bin/test_attention_cuda 1 2 42
fi

echo "==== logs in $out"
[ -f "$out/tests.log" ] && grep -E "^(FAIL|FAILED|ERROR)" "$out/tests.log" | head -12
[ -f "$out/bench.log" ] && grep -A11 -E "==== bench_(standalone|mma)" "$out/bench.log"
[ -f "$out/bench_peers.md" ] && cat "$out/bench_peers.md"
# The tile_shapes rounds as a ratio to each head dim's library variant, point by point.
if [[ $want == *" tune "* ]] && [ -f "$out/bench.log" ]; then
  python3 scripts/tune_summary.py "$out/bench.log" >"$out/tune_summary.txt" 2>&1
  cat "$out/tune_summary.txt"
fi
printf '%s\n' "${summary[@]}"
