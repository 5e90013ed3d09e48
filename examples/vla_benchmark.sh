#!/usr/bin/env bash
# The VLA training benchmark on a GPU machine in one command: builds varpack's extension in place
# with its CUDA kernels (as gpu_benchmark.sh does; if that build fails, a CPU-only one, so the
# padded modes still run and the varlen modes report the failure), then runs train_vla.py.
# Everything lands in the output folder: run.log, results.json, results.md, vla.png.
#
#   bash examples/vla_benchmark.sh OUT_DIR [extra train_vla.py options]
# BUILD=0 uses the extension already built in place. (With the `run` tool: give $OUT as OUT_DIR;
# nothing needs carrying.)
set -uo pipefail
out=${1:?give an output folder}
shift
cd "$(dirname "$0")/.."
mkdir -p "$out"
source examples/build_extension.sh  # the environment and build_extension

{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  start=$(date +%s)
  build_extension || exit 1
  python3 examples/train_vla.py --out "$out" "$@"
  echo "== total: $(( $(date +%s) - start )) s"
} 2>&1 | tee "$out/run.log"
