#!/usr/bin/env bash
# Issue 63's measurement on every GPU of the machine (NCCL; NPROC overrides the count), one command
# from the repository root; everything lands in OUT_DIR (run.log and the files below):
#   1. build the extension (examples/build_extension.sh; BUILD=0 skips it, on a warm machine);
#   2. calibrate the 542M model on one GPU (python -m varpack calibrate): calibration.json;
#   3. bench/distributed/cp_multi.py under torchrun: each context-parallel variant on a 64k and a
#      128k-token document and a packed long-tailed row against one GPU: cp.md, cp.json;
#   4. bench/distributed/schedule_multi.py under torchrun: the (dp, cp) schedule against token
#      balancing and LPT without the window sort, measured beside the simulator's prediction with
#      that calibration: schedule.md, schedule.json;
#   5. bench/balance/simulate_steps.py on the same configuration at NPROC, 64 and 1024 ranks: simulate.md.
# Each step has its own time limit, and all of them end by DEADLINE_S (570 s from the start, under the
# device tool's 600 s): a step with too little time left is skipped and says how to run it alone,
# e.g. `BUILD=0 PARTS="calibrate schedule" bash bench/distributed/multi_gpu.sh OUT_DIR` (PARTS:
# any of calibrate cp schedule simulate). With one GPU it runs and says that no CP or data parallelism was
# measured. TINY=1 runs the same steps on the CPU over gloo at small sizes (NPROC processes, default 2).
#   bash bench/distributed/multi_gpu.sh OUT_DIR        (with the `run` tool: OUT_DIR=$OUT)
set -uo pipefail
out=${1:?give an output folder}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../.."
# NVLink multicast stays off (the lent machines' rule: it can take a shared host's GPUs down).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
deadline=$((SECONDS + ${DEADLINE_S:-570}))
parts=" ${PARTS:-calibrate cp schedule simulate} "
if [ "${TINY:-0}" = 1 ]; then  # the installed varpack (scripts/setup.sh), no build
  nproc=${NPROC:-2}
  tiny=(--tiny --device cpu)
  threads=(OMP_NUM_THREADS=1)
  capacity=512 model=(--layers 1 --heads 4 --kv-heads 4 --head-dim 16 --params 8.2e4)
  calibrate=(--model bench/distributed/schedule_multi.py:tiny_model --capacity "$capacity" --device cpu)
  build_extension() { python3 -c 'import varpack; print("varpack from", varpack.__file__)'; }
else
  source examples/build_extension.sh
  nproc=${NPROC:-$(nvidia-smi -L | wc -l)}
  tiny=() threads=()
  capacity=32768 model=(--layers 8 --heads 16 --kv-heads 16 --head-dim 128 --params 542e6)
  calibrate=(--model examples/train_ddp.py:anchor_model --capacity "$capacity" --device cuda --autocast bf16)
fi
torchrun=(python3 -m torch.distributed.run --standalone --nproc_per_node="$nproc")

step() {  # step NAME LIMIT_S NEEDED_S COMMAND...: runs COMMAND under min(LIMIT, time left)
  local name=$1 limit=$2 needed=$3 left=$((deadline - SECONDS))
  shift 3
  if [[ $parts != *" $name "* ]]; then return; fi
  if [ "$left" -lt "$needed" ]; then
    echo "== $name: skipped, $left s left of the deadline; run it alone: BUILD=0 PARTS=\"calibrate $name\" $0 OUT_DIR"
    return
  fi
  echo "== $name ($SECONDS s; limit $((limit < left ? limit : left)) s)"
  timeout "$((limit < left ? limit : left))" "$@"
  echo "== $name: exit status $? ($SECONDS s)"
}

{
  [ "${TINY:-0}" = 1 ] || nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  echo "== $nproc process(es), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  build_extension || exit 1
  # One thread on the CPU, as torchrun gives each process: the fit must time what the ranks run.
  step calibrate 90 30 env "${threads[@]}" python3 -m varpack calibrate "${calibrate[@]}" \
    --out "$out/calibration.json"
  cost=(); [ -f "$out/calibration.json" ] && cost=(--cost-model "$out/calibration.json")
  step cp 150 60 "${torchrun[@]}" bench/distributed/cp_multi.py "${tiny[@]}" --out "$out"
  step schedule 240 90 "${torchrun[@]}" bench/distributed/schedule_multi.py "${tiny[@]}" "${cost[@]}" \
    --out "$out"
  # The simulator on schedule_multi's configuration (its mixes, capacity, k, window), also at 64 and 1024 ranks.
  step simulate 60 10 bash -c 'python3 bench/balance/simulate_steps.py "$@" | tee "$0"' "$out/simulate.md" \
    --ranks "$nproc,64,1024" --k 2 --window 8 --capacity "$capacity" --median $((capacity / 8)) \
    --max-length $((nproc * capacity)) "${model[@]}" "${cost[@]}"
  echo "== done ($SECONDS s)"
} 2>&1 | tee -a "$out/run.log"
