#!/usr/bin/env bash
# The one command for the GPU machine (the `run` tool): reports the machine, builds the standalone
# CUDA library + test + benchmark (cmake -S src/attn/cuda) and the torch extension (in place), runs
# the standalone test, compute-sanitizer memcheck and racecheck on a small case, the pytest GPU tests
# and both benchmarks. Full logs go to $OUT (or ./gpu-out); a short table is printed last.
# Carry .gpu-deps (simdjson header and library) for machines without libsimdjson.
# Usage: scripts/gpu_run.sh [all|test|bench]   (default all)
set -uo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
out=${OUT:-gpu-out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
summary=()
step() {  # step NAME TIMEOUT_S COMMAND...: runs with a time limit, logs to $out/NAME.log
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  summary+=("$(printf '%-22s rc=%-3s %4ss  %s' "$name" "$rc" "$((SECONDS - t0))" \
               "$(grep -E 'PASSED|FAILED|passed|failed|ERROR SUMMARY|RACECHECK SUMMARY|error' \
                  "$out/$name.log" | tail -1 | cut -c1-90)")")
  return $rc
}

{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, \
'cuda', torch.version.cuda, torch.cuda.get_device_name())"
  python3 -c "import torch.nn.attention.varlen as m, inspect; print('varlen_attn', \
inspect.signature(m.varlen_attn))" 2>&1 | tail -1
  nvcc --version | tail -1
  for h in /usr/include/simdjson.h /usr/local/include/simdjson.h; do [ -f $h ] && echo "simdjson: $h"; done
  ldconfig -p | grep -q libsimdjson && echo "libsimdjson: in ldconfig" || echo "libsimdjson: missing"
  command -v compute-sanitizer cuobjdump ncu
} >"$out/machine.txt" 2>&1
cat "$out/machine.txt"
if ! ldconfig -p | grep -q libsimdjson && [ -d .gpu-deps ]; then
  export CPATH=$PWD/.gpu-deps/include${CPATH:+:$CPATH}
  export LIBRARY_PATH=$PWD/.gpu-deps/lib${LIBRARY_PATH:+:$LIBRARY_PATH}
  export LD_LIBRARY_PATH=$PWD/.gpu-deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

# Standalone library, test and benchmark, and the torch extension: built side by side.
(cmake -S src/attn/cuda -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DVARPACK_WERROR=ON \
       -DCMAKE_CUDA_FLAGS=-Xptxas=-v &&
   cmake --build build-gpu -j 8 -- -v) >"$out/build_standalone.log" 2>&1 &
build_pid=$!
MAX_JOBS=8 step build_torch_ext 420 python3 setup.py build_ext --inplace
wait $build_pid
summary+=("$(printf '%-22s rc=%-3s' build_standalone $?)")
[ -x build-gpu/test_attention_cuda ] &&
  cuobjdump -sass build-gpu/libvarpack_cuda.a 2>/dev/null |
  awk '/Function :/ {f=$3} /HMMA/ {h[f]++} /LDSM/ {l[f]++} /LDL|STL/ {s[f]++}
       END {for (k in h) printf "%s HMMA %d LDSM %d local %d\n", k, h[k], l[k], s[k]}' \
  >"$out/sass_summary.txt"

if [ "$what" != bench ]; then
  if [ -x build-gpu/test_attention_cuda ]; then
    step standalone_test 120 build-gpu/test_attention_cuda
    step memcheck 120 compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu/test_attention_cuda 1 2
    step racecheck 150 compute-sanitizer --tool racecheck --error-exitcode 9 build-gpu/test_attention_cuda 1 1
  fi
  PYTHONPATH=$PWD/python step pytest 300 python3 -m pytest -q -ra tests/python/test_cuda_attention.py
fi
if [ "$what" != test ]; then
  [ -x build-gpu/bench_attention_cuda ] && step bench_standalone 120 build-gpu/bench_attention_cuda 20
  PYTHONPATH=$PWD/python step bench_peers 420 python3 bench/cuda/bench_attention_gpu.py \
    --out "$out/bench_peers.md"
fi

echo "==== logs in $out"
for f in standalone_test pytest; do
  [ -f "$out/$f.log" ] && grep -E "^(FAIL|FAILED|ERROR)" "$out/$f.log" | head -12
done
[ -f "$out/bench_standalone.log" ] && cat "$out/bench_standalone.log"
[ -f "$out/bench_peers.md" ] && cat "$out/bench_peers.md"
printf '%s\n' "${summary[@]}"
