#!/usr/bin/env bash
# The CUDA kernels' checks on the GPU machine, as one command for the `run` tool: builds the
# standalone library and tests (cmake -S src/attn/cuda) and the torch extension, then runs
#   - the wgmma building blocks (tests/cuda/test_wgmma) and the standalone test
#     (tests/cuda/test_attention_cuda: every forward launch, both backward modes) on the Hopper
#     kernels, then on the mma.sync ones (VARPACK_CUDA_KERNELS=mma);
#   - the GPU pytest (tests/python/test_cuda_attention.py) on both kernel paths, and the CP
#     merge (test_merge_partial.py) on the default one;
#   - compute-sanitizer memcheck and racecheck on the standalone test's small cases (every
#     forward launch: several heads per block in both orders, a block per work, the persistent
#     kernel on two blocks), on d96 / d256 cases and on d64 past 4096 queries;
#   - with --baseline DIR (a tree of an earlier commit, e.g. `git archive main | tar -x -C DIR`),
#     before the sanitizers: the standalone benchmark of DIR's library and of this one, in turn,
#     ROUNDS times, with the ratios of this tree's TFLOP/s to DIR's (bench_compare.txt).
# Logs go to $OUT (or ./gpu-out); a summary is printed last. Each step has a time limit; the
# standalone build and the torch extension's build run side by side.
# Usage: scripts/gpu_test.sh [--quick] [--notorch] [--baseline DIR] [--help]
#   --quick: the standalone test and sanitizers on the library's launch only (late in a
#            session's device time); --notorch: no torch extension, no pytest.
#   SANITIZE_S=60 caps each sanitizer step (default 150); ROUNDS=2 benchmark rounds (default 1);
#   DEADLINE_S: no step past that many seconds (default 570, for the `run` tool's 600 s).
cd "$(dirname "$0")/.."
usage() { sed -n '2,/^cd /p' "$0" | sed '$d; s/^# \{0,1\}//'; }
quick=0 torch=1 baseline=
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1 ;;
    --notorch) torch=0 ;;
    --baseline) baseline=${2:?--baseline needs a directory}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu_test.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
if [ -n "$baseline" ] && [ ! -f "$baseline/src/attn/cuda/CMakeLists.txt" ]; then
  echo "gpu_test.sh: $baseline holds no src/attn/cuda/CMakeLists.txt (a tree of the repository)" >&2
  exit 2
fi
export DEADLINE_S=${DEADLINE_S:-570}
source scripts/gpu_common.sh
describe_machine

jobs=$((torch ? 8 : 16))  # the torch build takes the other 8 cores
build_standalone . $bin $jobs -DVARPACK_WERROR=ON -DCMAKE_CUDA_FLAGS=-Xptxas=-v &
build_pid=$!
if [ -n "$baseline" ]; then
  # Only the baseline's benchmark; where its tree keeps it (src/attn/cuda before the move, or
  # bench/cuda) the target has the same name.
  build_standalone "$baseline" build-baseline 4 -- bench_attention_cuda &
  baseline_pid=$!
fi
[ $torch = 1 ] && build_torch 8
wait $build_pid
summary+=("$(printf '%-22s rc=%-3s' build_standalone $?)")

launches=()
[ $quick = 1 ] && launches=(--forward=library)
tests=$bin/tests
[ -x $tests/test_wgmma ] && step tests.log wgmma_blocks 60 $tests/test_wgmma
[ -x $tests/test_attention_cuda ] &&
  step tests.log standalone_test 240 $tests/test_attention_cuda "${launches[@]}"
[ -x $tests/test_attention_cuda ] && [ $quick = 0 ] &&
  VARPACK_CUDA_KERNELS=mma step tests.log standalone_mma 120 $tests/test_attention_cuda \
    --forward=library
# test_attention.py too: the operator's CPU path and input checks, built with this machine's
# compiler (an error message once crashed only here).
[ $torch = 1 ] && PYTHONPATH=$PWD/python step tests.log pytest 300 python3 -m pytest -q -ra \
  tests/python/test_cuda_attention.py tests/python/test_attention.py tests/python/test_merge_partial.py
[ $torch = 1 ] && VARPACK_CUDA_KERNELS=mma PYTHONPATH=$PWD/python step tests.log pytest_mma 300 \
  python3 -m pytest -q -ra tests/python/test_cuda_attention.py

# The benchmarks before the sanitizers, on an idle device (the builds are done).
if [ -n "$baseline" ]; then
  wait $baseline_pid
  summary+=("$(printf '%-22s rc=%-3s' build_baseline $?)")
  base_bench=$(find build-baseline -name bench_attention_cuda -type f | head -1)
  for round in $(seq 1 "${ROUNDS:-1}"); do
    [ -n "$base_bench" ] && step bench.log "bench_baseline_$round" 120 "$base_bench" 20
    step bench.log "bench_this_$round" 120 $bin/bench/bench_attention_cuda 20
  done
  python3 scripts/bench_compare.py "$out/bench.log" >"$out/bench_compare.txt" 2>&1
  cat "$out/bench_compare.txt"
fi

# Cases as numbered by test_attention_cuda.cpp. 1-3: many key tiles, max_seqlen unknown (case 1)
# and understated (case 2; by chunks a forward block then takes several query tiles), both
# backward modes, every forward launch; 30-36 d96 / d256 (lengths that differ, windows,
# softcap), 23-25 d96 causal MQA and d256; 42-46 d64 past 4096 queries (three consumers) and
# scores of standard deviation 6 (the d256 forward's lazy rescaling takes both branches).
sanitize() {  # sanitize TOOL NAME CASES FIRST [test arguments]
  local tool=$1 name=$2 cases=$3 first=$4
  shift 4
  step tests.log "${tool}_$name" "${SANITIZE_S:-150}" compute-sanitizer --tool "$tool" \
    --error-exitcode 9 $tests/test_attention_cuda "$@" 1 "$cases" "$first"
}
if [ -x $tests/test_attention_cuda ]; then
  sanitize memcheck small 3 0 "${launches[@]}"
  sanitize racecheck small 3 0 "${launches[@]}"
  if [ $quick = 0 ]; then
    sanitize memcheck d96_d256 7 30 --forward=library
    sanitize racecheck d96_d256 3 23 --forward=library
    sanitize memcheck d64_long 5 42 --forward=library
    sanitize racecheck d64_long 2 42 --forward=library
  fi
fi

[ -f "$out/tests.log" ] && grep -E "^(FAIL|FAILED|ERROR)" "$out/tests.log" | head -12
print_summary
