#!/usr/bin/env bash
# The project-level GPU measurements in as few `run` calls as the 600 s limit allows: builds the
# torch extension once (in place; later calls on a still-warm machine reuse it with BUILD=0), then
# runs the parts named on the command line, each under its own time limit so that the call ends
# with its logs. Kernel work has its own script (scripts/gpu_test.sh, gpu_bench.sh,
# gpu_tune.sh: standalone build, tests, sanitizers, benchmarks, experiments).
#   vla     examples/train_vla.py's H200 preset: padded / dynamic / varlen / varlen + view pruning
#   cuda    the GPU pytest (both kernel paths) and bench/cuda/bench_attention_gpu.py (the peers)
#   dist    bench/distributed/multi_gpu.sh: calibration, CP variants, the (dp, cp) schedule vs
#           token / LPT balancing beside the simulator, on every GPU
# Usage (with the run tool): bash scripts/gpu_measure.sh $OUT vla cuda   then, while still warm,
#        BUILD=0 bash scripts/gpu_measure.sh $OUT dist
# Logs land in OUT (one folder per part); a summary is printed last.
set -uo pipefail
out=${1:?give an output folder}
shift
cd "$(dirname "$0")/.."
mkdir -p "$out"
source examples/build_extension.sh
summary=()
part() {  # part NAME LIMIT_S LOG COMMAND...: runs one part under a time limit, output to LOG
  local name=$1 limit=$2 log=$3 t0=$SECONDS
  shift 3
  timeout "$limit" "$@" >"$log" 2>&1
  summary+=("$(printf '%-10s rc=%-3s %4ss' "$name" "$?" "$((SECONDS - t0))")")
}

build_extension >"$out/build.log" 2>&1
summary+=("build      $(tail -1 "$out/build.log")")
for p in "$@"; do
  case $p in
    # vla and dist keep their own run.log in their folder (OUT may bring back only 8 files).
    vla) part vla 330 /dev/null env BUILD=0 bash examples/vla_benchmark.sh "$out/vla" ;;
    cuda)
      part pytest_gpu 90 "$out/pytest_gpu.log" python3 -m pytest -q tests/python/test_cuda_attention.py
      part bench_peers 200 "$out/bench_peers.log" python3 bench/cuda/bench_attention_gpu.py --out "$out/bench_peers.md" ;;
    dist) part dist 330 /dev/null env BUILD=0 DEADLINE_S=320 bash bench/distributed/multi_gpu.sh "$out/dist" ;;
    *) echo "unknown part: $p (vla, cuda, dist)"; exit 2 ;;
  esac
done

[ -f "$out/vla/results.md" ] && cat "$out/vla/results.md"
[ -f "$out/pytest_gpu.log" ] && tail -3 "$out/pytest_gpu.log"
[ -f "$out/bench_peers.md" ] && cat "$out/bench_peers.md"
[ -f "$out/dist/run.log" ] && tail -30 "$out/dist/run.log"
printf '%s\n' "${summary[@]}"
