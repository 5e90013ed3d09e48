# Sourced by scripts/gpu_test.sh, gpu_bench.sh and gpu_tune.sh (the GPU machine's kernel scripts,
# run through the `run` tool from the repository root): the output folder, a step runner with a
# time limit and a one-line summary, the machine's description, and the builds they share.
# Needs only what the GPU image has (torch with CUDA, nvcc, cmake, ninja).
set -uo pipefail
out=${OUT:-gpu-out}
bin=build-gpu
mkdir -p "$out"
export PYTHONUNBUFFERED=1
summary=()

# DEADLINE_S: no step runs past that many seconds of the script (the `run` tool's limit is 600 s;
# past it the summary would be lost): a step's limit is cut to what is left, and a step with
# nothing left is skipped and named in the summary.
step() {  # step LOG NAME TIMEOUT_S COMMAND...: runs with a time limit, appends to $out/LOG
  local log=$out/$1 name=$2 limit=$3
  shift 3
  local t0=$SECONDS left=$(( ${DEADLINE_S:-100000} - SECONDS ))
  if [ "$left" -lt 10 ]; then
    summary+=("$(printf '%-22s skipped: past DEADLINE_S=%s' "$name" "${DEADLINE_S:-}")")
    return 124
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "==== $name: $*" >>"$log"
  timeout "$limit" "$@" >"$out/.step" 2>&1
  local rc=$?
  cat "$out/.step" >>"$log"
  summary+=("$(printf '%-22s rc=%-3s %4ss  %s' "$name" "$rc" "$((SECONDS - t0))" \
               "$(grep -E 'PASSED|FAILED|passed|failed|ERROR SUMMARY|RACECHECK SUMMARY|rror' \
                  "$out/.step" | tail -1 | cut -c1-90)")")
  rm -f "$out/.step"
  return $rc
}

print_summary() {
  echo "==== logs in $out"
  printf '%s\n' "${summary[@]}"
}

describe_machine() {
  {
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
    python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', \
torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
    nvcc --version | tail -1
  } >"$out/machine.txt" 2>&1
  cat "$out/machine.txt"
}

# build_standalone SOURCE_DIR BUILD_DIR JOBS [cmake options...] [-- targets...]: the CUDA library
# with its standalone test and benchmark (cmake -S SOURCE_DIR/src/attn/cuda), into
# $out/build_<BUILD_DIR>.log.
build_standalone() {
  local source=$1 build=$2 jobs=$3
  shift 3
  local options=() targets=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do options+=("$1"); shift; done
  [ $# -gt 0 ] && shift && targets=("$@")
  local target_args=()
  [ ${#targets[@]} -gt 0 ] && target_args=(--target "${targets[@]}")
  (cmake -S "$source/src/attn/cuda" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
     "${options[@]}" && cmake --build "$build" -j "$jobs" "${target_args[@]}") \
    >"$out/build_$(basename "$build").log" 2>&1
}

# The torch extension in place, with the system compiler where there is one: the image's CXX (a
# wrapper) linked libstdc++ statically into the extension, beside the one torch loads, and an
# ostream insertion crashed there (bench/results/cuda.md, 2026-12-02).
build_torch() {
  local compilers=()
  [ -x /usr/bin/g++ ] && compilers=(CC=/usr/bin/gcc CXX=/usr/bin/g++)
  MAX_JOBS=${1:-8} step build_torch.log build_torch_ext 420 env "${compilers[@]}" \
    python3 setup.py build_ext --inplace
}
