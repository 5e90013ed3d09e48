"""Data-parallel training on packed rows, token-balanced vs cost-balanced in the same run, with
every rank's compute time per step measured.

    torchrun --nproc_per_node=2 examples/train_ddp.py --out OUT                # GPUs: NCCL
    torchrun --nproc_per_node=2 examples/train_ddp.py --preset smoke --out OUT # CPU: gloo
    python examples/train_ddp.py --preset smoke --out OUT                      # one process

A Llama-style decoder (transformers, attn_implementation="varpack") wrapped in DDP trains on the
standard library's sources as bytes, cut at long-tailed (lognormal) lengths. Each rank takes its
rows of a step from varpack.BalancedPackedDataset, whose plan and balance every rank computes
alike, so all ranks have the same steps. Two modes, from the same initial weights and samples:

  token  method="round_robin": every rank gets rows_per_rank near-full rows, the same token count
         (what a DistributedSampler over packed rows gives);
  cost   method="lpt" with window_steps: rows dealt by predicted cost (--cost-model, from
         `python -m varpack calibrate`, or the reference fit of bench/results/distributed.md).

Per step, each rank's forward + backward runs under DDP's no_sync and is timed alone (the device
synchronised); then the gradients are summed over the ranks by one all-reduce, and the optimizer
steps. Timing the compute apart from the gradient all-reduce is what shows the imbalance: with
DDP's overlapped reduction, a fast rank's backward would stall on the slow one and look slow too.
The loss is the sum of token losses over the step's tokens on all ranks divided by their count,
so the summed gradient equals one process's gradient on all of the step's rows.

Both modes time the same whole windows of steps (window_steps), which hold the same rows in
either mode, after untimed warm-up steps. Rank 0 logs, per step, every rank's compute time and
max / mean, and writes results.json (per mode: mean over steps of max/mean compute time, the
predicted imbalance, total step time; the token/cost ratio) to --out.
"""
from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import pathlib
import socket
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from corpus import PAD, VOCAB_SIZE, Corpus  # noqa: E402

import varpack  # noqa: E402
from varpack.auto import ANCHOR_COST_MODEL, CostModel  # noqa: E402

log = logging.getLogger("train_ddp")
MODES = {"token": dict(method="round_robin", window_steps=1), "cost": dict(method="lpt")}


@dataclass
class Preset:
    layers: int
    hidden: int
    heads: int
    intermediate: int
    capacity: int          # tokens per row
    rows_per_rank: int
    window_steps: int
    median_length: int     # lognormal median of the sample lengths (sigma 1), clipped to capacity
    warmup_steps: int
    steps: int             # timed steps per mode


PRESETS = {
    # The reference model (542M): 8 layers, d_model 2048, 16 heads x 128, SwiGLU 5632; one row of 32k
    # per rank and step, lengths lognormal around 4k: at 2 ranks the token-balanced schedule is
    # predicted 1.16x its ideal, the most a balancer can gain there (simulate_steps.py has more ranks).
    "h200": Preset(8, 2048, 16, 5632, 32768, 1, 16, 4096, 2, 16),
    # A small model whose attention dominates on the CPU (rows of 4k, 4 heads x 32): the
    # CPU/gloo measurement, with a cost model from `python -m varpack calibrate --model
    # examples/train_ddp.py:cpu_model --capacity 4096 --device cpu`.
    "cpu": Preset(2, 128, 4, 256, 4096, 2, 8, 512, 1, 8),
    # Tiny, on the CPU: every code path in seconds, no meaningful timing.
    "smoke": Preset(1, 32, 2, 64, 256, 2, 4, 24, 1, 3),
}


def anchor_model():
    """The reference 542M model, for `python -m varpack calibrate --model examples/train_ddp.py:anchor_model`."""
    p = PRESETS["h200"]
    return make_model(p, seed=0)


def cpu_model():
    """The `cpu` preset's model, for calibration on the CPU."""
    return make_model(PRESETS["cpu"], seed=0)


def make_model(preset: Preset, seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM
    import varpack.hf
    varpack.hf.register()
    config = LlamaConfig(vocab_size=VOCAB_SIZE, hidden_size=preset.hidden, intermediate_size=preset.intermediate,
                         num_hidden_layers=preset.layers, num_attention_heads=preset.heads,
                         num_key_value_heads=preset.heads, max_position_embeddings=preset.capacity,
                         pad_token_id=PAD, tie_word_embeddings=False)
    config._attn_implementation = "varpack"
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


def long_tailed_samples(corpus: Corpus, preset: Preset, rows: int, seed: int) -> list[np.ndarray]:
    """Cuts of the corpus at lognormal lengths (median preset.median_length, sigma 1, clipped to
    [2, capacity]), enough for about `rows` full rows."""
    rng = np.random.default_rng(seed)
    lengths, total = [], 0
    while total < rows * preset.capacity:
        n = int(np.clip(rng.lognormal(np.log(preset.median_length), 1.0), 2, preset.capacity))
        lengths.append(n)
        total += n
    starts = rng.integers(0, len(corpus.train), size=len(lengths))
    return corpus.cut(lengths, "train", starts)


# ---------------------------------------------------------------- one step

def targets_in(batch: dict) -> int:
    """Tokens of the batch that have a target (the model shifts labels by one)."""
    return int((batch["labels"][:, 1:] != -100).sum())


def forward_backward(model, batch: dict, total_targets: int, device: torch.device) -> torch.Tensor:
    """Sum of this batch's token losses / total_targets, backpropagated; returns it (detached)."""
    inputs = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in batch.items() if k != "labels"}
    labels = batch["labels"].to(device)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        logits = model(**inputs).logits
    losses = torch.nn.functional.cross_entropy(logits[0, :-1].float(), labels[0, 1:], ignore_index=-100,
                                               reduction="sum")
    loss = losses / max(total_targets, 1)
    loss.backward()
    return loss.detach()


def all_reduce_gradients(model) -> None:
    """Sums every gradient over the ranks, in one flat buffer (one collective)."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ---------------------------------------------------------------- a mode

def timed_steps(preset: Preset) -> int:
    """Timed steps per mode: whole windows, so that both modes run the same rows (a window's
    steps hold the same rows in either mode, only dealt differently)."""
    return -(-preset.steps // preset.window_steps) * preset.window_steps


def train_step(ddp, optimizer, batch: dict, device: torch.device, world: int) -> dict:
    """One step; returns this rank's loss share and its compute and step times."""
    count = torch.tensor([targets_in(batch)], dtype=torch.int64, device=device)
    dist.all_reduce(count)
    dist.barrier()
    sync(device)
    start = time.perf_counter()
    with ddp.no_sync():
        loss = forward_backward(ddp, batch, int(count), device)
    sync(device)
    compute = time.perf_counter() - start
    all_reduce_gradients(ddp.module)
    torch.nn.utils.clip_grad_norm_(ddp.module.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    sync(device)
    return {"loss": loss, "compute": compute, "step": time.perf_counter() - start}


def run_mode(mode: str, ddp, optimizer, initial: dict, samples: list, preset: Preset, cost_model,
             device: torch.device, rank: int, world: int) -> dict:
    options = dict(MODES[mode])
    options.setdefault("window_steps", preset.window_steps)
    ds = varpack.BalancedPackedDataset(samples, preset.capacity, rank=rank, world_size=world,
                                       rows_per_rank=preset.rows_per_rank, cost_model=cost_model, seed=0,
                                       pad_token_id=PAD, **options)
    steps = timed_steps(preset)
    if len(ds) < steps:
        raise SystemExit(f"train_ddp: {mode}: the plan has {len(ds)} steps, fewer than the {steps} to time")
    for _ in range(preset.warmup_steps):  # untimed, then the weights and optimizer start afresh
        train_step(ddp, optimizer, ds[0], device, world)
    ddp.module.load_state_dict(initial)
    optimizer.state.clear()
    records = []
    for step in range(steps):
        batch = ds[step]
        r = train_step(ddp, optimizer, batch, device, world)
        dist.all_reduce(r["loss"])
        times = torch.tensor([r["compute"], r["step"], float(batch["input_ids"].numel())], dtype=torch.float64,
                             device=device)
        gathered = [torch.empty_like(times) for _ in range(world)]
        dist.all_gather(gathered, times)
        rank_compute = [float(t[0]) for t in gathered]
        record = {"step": step, "loss": float(r["loss"]), "rank_compute_s": rank_compute,
                  "rank_tokens": [int(t[2]) for t in gathered], "step_s": max(float(t[1]) for t in gathered),
                  "compute_imbalance": max(rank_compute) / (sum(rank_compute) / world),
                  "predicted_imbalance": float(ds.balance.step_imbalance[step])}
        records.append(record)
        if rank == 0:
            log.info("%s step %d: loss %.4f, compute per rank %s ms, max/mean %.3f (predicted %.3f), step %.1f ms",
                     mode, step, record["loss"], " ".join(f"{t * 1e3:.1f}" for t in rank_compute),
                     record["compute_imbalance"], record["predicted_imbalance"], record["step_s"] * 1e3)
    return {"steps": records, "balance": dict(ds.balance.stats),
            "mean_compute_imbalance": float(np.mean([r["compute_imbalance"] for r in records])),
            "total_max_compute_s": float(sum(max(r["rank_compute_s"]) for r in records)),
            # Time-weighted: the slowest rank's compute over the mean rank's, summed over steps
            # (a cheap step's imbalance costs little time; the plain mean counts it fully).
            "compute_vs_even": float(sum(max(r["rank_compute_s"]) for r in records) /
                                     sum(sum(r["rank_compute_s"]) / world for r in records)),
            "total_step_s": float(sum(r["step_s"] for r in records)),
            "mean_predicted_imbalance": float(np.mean([r["predicted_imbalance"] for r in records]))}


# ---------------------------------------------------------------- main

def init_distributed(device_arg: str) -> tuple[int, int, torch.device]:
    """Joins torchrun's process group (NCCL on GPUs, gloo on the CPU), or makes a group of one."""
    if not dist.is_initialized():
        if "RANK" not in os.environ:  # plain `python train_ddp.py`: one rank
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                              MASTER_PORT=str(port))
        use_cuda = device_arg == "cuda" or (device_arg == "auto" and torch.cuda.is_available())
        dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    use_cuda = device_arg == "cuda" or (device_arg == "auto" and torch.cuda.is_available())
    if use_cuda:
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        return rank, world, torch.device("cuda", local)
    return rank, world, torch.device("cpu")


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="h200")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--cost-model", help="calibration JSON (python -m varpack calibrate); default: the 542M-model fit of bench/results/distributed.md")
    parser.add_argument("--steps", type=int, help="timed steps per mode (default: the preset's)")
    parser.add_argument("--max-files", type=int, help="read only this many stdlib files (quicker start)")
    parser.add_argument("--out", required=True, help="folder for results.json (written by rank 0)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    rank, world, device = init_distributed(args.device)
    preset = PRESETS[args.preset]
    if args.steps is not None:
        preset = Preset(**{**preset.__dict__, "steps": args.steps})
    cost_model = CostModel.load(args.cost_model) if args.cost_model else ANCHOR_COST_MODEL
    if device.type == "cuda" and not torch._C._dispatch_has_kernel_for_dispatch_key("varpack::varlen_fwd", "CUDA"):
        raise SystemExit("train_ddp: varpack's CUDA kernels are not built in this extension; build with "
                         "CUDA (examples/gpu_benchmark.sh does) or run with --device cpu")

    corpus = Corpus(max_files=args.max_files)
    # 10% more rows than the timed steps take: packing leaves some room in the rows.
    samples = long_tailed_samples(corpus, preset, rows=int(timed_steps(preset) * world * preset.rows_per_rank * 1.1)
                                  + world, seed=1)
    model = make_model(preset, seed=0).to(device)
    initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=3e-4, weight_decay=0.0, fused=device.type == "cuda")

    results = {"world_size": world, "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
               "backend": dist.get_backend(), "preset": args.preset, "cost_model": cost_model.to_dict(),
               "samples": len(samples), "modes": {}}
    for mode in MODES:
        results["modes"][mode] = run_mode(mode, ddp, optimizer, initial, samples, preset, cost_model, device,
                                          rank, world)
    token, cost = results["modes"]["token"], results["modes"]["cost"]
    # Both modes ran the same rows (whole windows), so their total times compare like for like.
    results["cost_vs_token_step_speedup"] = token["total_step_s"] / cost["total_step_s"]
    results["cost_vs_token_compute_speedup"] = token["total_max_compute_s"] / cost["total_max_compute_s"]
    if rank == 0:
        out = pathlib.Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(results, indent=1))
        for mode, r in results["modes"].items():
            log.info("%s: compute max/mean %.3f per step (predicted %.3f), %.3f time-weighted; over %d steps: "
                     "slowest rank's compute %.3f s, steps %.3f s", mode, r["mean_compute_imbalance"],
                     r["mean_predicted_imbalance"], r["compute_vs_even"], len(r["steps"]), r["total_max_compute_s"],
                     r["total_step_s"])
        log.info("cost-balanced vs token-balanced: step %.3fx, slowest compute %.3fx (world size %d, %s)",
                 results["cost_vs_token_step_speedup"], results["cost_vs_token_compute_speedup"], world,
                 results["device"])
    return results


if __name__ == "__main__":
    main()
    gc.collect()  # DDP's reducer sits in reference cycles and holds the process group
    dist.destroy_process_group()
