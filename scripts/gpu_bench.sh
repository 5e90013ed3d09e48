#!/usr/bin/env bash
# The CUDA kernels' benchmarks on the GPU machine (the `run` tool): builds the standalone library
# and benchmark (cmake -S src/attn/cuda) and the torch extension, then runs
#   - the peer table (bench/cuda/bench_attention_gpu.py: varpack against torch's kernels in one
#     process, bench_peers.md), with the clock, power and throttle reasons sampled meanwhile;
#   - the standalone benchmark (bench/cuda/bench_attention_cuda) on both kernel paths;
#   - one torch step kernel by kernel, varpack's and cuDNN's, at 16 x 4k and 64 x 1k
#     (bench/cuda/trace_step.py), and the host time per call (bench/host_overhead.py).
# Logs go to $OUT (or ./gpu-out); the tables are printed last.
# Usage: scripts/gpu_bench.sh [--peers] [--notorch] [--help]
#   --peers: the peer table alone (about 190 s); --notorch: the standalone benchmark alone.
cd "$(dirname "$0")/.."
usage() { sed -n '2,/^cd /p' "$0" | sed '$d; s/^# \{0,1\}//'; }
peers_only=0 torch=1
while [ $# -gt 0 ]; do
  case $1 in
    --peers) peers_only=1 ;;
    --notorch) torch=0 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu_bench.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
source scripts/gpu_common.sh
describe_machine

if [ $peers_only = 0 ]; then
  build_standalone . $bin $((torch ? 8 : 16)) -DVARPACK_WERROR=ON -- bench_attention_cuda &
  build_pid=$!
fi
[ $torch = 1 ] && build_torch 8
if [ $peers_only = 0 ]; then
  wait $build_pid
  summary+=("$(printf '%-22s rc=%-3s' build_standalone $?)")
  step bench.log bench_standalone 120 $bin/bench/bench_attention_cuda 20 &&
    VARPACK_CUDA_KERNELS=mma step bench.log bench_mma 120 $bin/bench/bench_attention_cuda 20
fi
if [ $torch = 1 ]; then
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
if [ $torch = 1 ] && [ $peers_only = 0 ]; then
  for impl in varpack cudnn; do
    for shape in "--rows 16 --len 4096" "--rows 64 --len 1024"; do
      PYTHONPATH=$PWD/python step bench_peers.log trace_step 120 python3 \
        bench/cuda/trace_step.py --impl $impl $shape --steps 10
    done
  done
  PYTHONPATH=$PWD/python step bench_peers.log host_overhead 60 python3 bench/host_overhead.py \
    --device cuda
fi

[ -f "$out/bench.log" ] && grep -A11 -E "==== bench_(standalone|mma)" "$out/bench.log"
[ -f "$out/bench_peers.md" ] && cat "$out/bench_peers.md"
print_summary
