#!/usr/bin/env bash
# The whole-training-step benchmark on the GPU machine, as one `run` call: builds the extension in
# place (examples/build_extension.sh), installs the wheels carried in .whl/ (liger-kernel, for the
# varpack_liger mode), runs bench/train/hf_step.py with the arguments given, logs under $OUT.
#   OUT=dir scripts/gpu_train_step.sh --profiles short --compile-peers     # carry: [".whl"]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
source examples/build_extension.sh
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
  export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
build_extension 2>&1 | tee "$out/build.log"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv | tee "$out/gpu.txt"
python3 bench/train/hf_step.py --out "$out" "$@" 2>&1 | tee "$out/hf_step.log"
