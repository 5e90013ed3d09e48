#!/usr/bin/env bash
# Issue 12's GPU measurements in one command, on as many GPUs as the machine has (NPROC overrides):
#   1. build the extension (examples/build_extension.sh, as gpu_benchmark.sh does);
#   2. calibrate the reference 542M model on rows of 16k and 32k tokens (python -m varpack calibrate):
#      calibration.json, the fitted c + alpha*tokens + beta*sum(len^2) and each row's fit error;
#   3. train_ddp.py under torchrun on NPROC GPUs (NCCL), token- vs cost-balanced with that cost
#      model: every rank's compute per step, max/mean, the step-time ratio (ddp/results.json);
#   4. the step-time simulator at 8..1024 ranks with the calibrated cost (simulate.md);
#   5. context-parallel attention on a 64k sample over NPROC GPUs vs one GPU (cp.txt); with one
#      GPU it prints the one-GPU time only and says that no CP was measured.
# Everything lands in OUT_DIR (run.log plus the files above). About 2 minutes after the build on
# one H200 (estimated; not yet run).
#   bash examples/distributed_gpu.sh OUT_DIR        (with the `run` tool: OUT_DIR=$OUT)
set -uo pipefail
out=${1:?give an output folder}
cd "$(dirname "$0")/.."
mkdir -p "$out/ddp"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python MAX_JOBS=${MAX_JOBS:-$(nproc)}
nproc_gpu=${NPROC:-$(nvidia-smi -L | wc -l)}
source examples/build_extension.sh

{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  build_extension || exit 1
  echo "== calibrate ($((SECONDS)) s)"
  timeout 100 python3 -m varpack calibrate --model examples/train_ddp.py:anchor_model --capacity 32768 \
    --device cuda --autocast bf16 --out "$out/calibration.json"
  cost=(); [ -f "$out/calibration.json" ] && cost=(--cost-model "$out/calibration.json")
  echo "== train_ddp on $nproc_gpu GPU(s) ($((SECONDS)) s)"
  timeout 150 python3 -m torch.distributed.run --standalone --nproc_per_node="$nproc_gpu" examples/train_ddp.py --preset h200 \
    "${cost[@]}" --out "$out/ddp"
  echo "== simulator ($((SECONDS)) s)"
  timeout 90 python3 bench/balance/simulate_steps.py --ranks 8,64,1024 --k 2 --steps 64 --window 16 \
    "${cost[@]}" | tee "$out/simulate.md"
  echo "== context parallelism, 64k tokens over $nproc_gpu GPU(s) ($((SECONDS)) s)"
  timeout 90 python3 -m torch.distributed.run --standalone --nproc_per_node="$nproc_gpu" bench/distributed/cp_bench.py --length 65536 \
    | tee "$out/cp.txt"
  echo "== done ($((SECONDS)) s)"
} 2>&1 | tee "$out/run.log"
