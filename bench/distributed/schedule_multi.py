"""The data + context-parallel schedule (varpack.cp_schedule) training the benchmark model on the
ranks of torchrun, against token-count balancing and against LPT without the window sort on the
same documents in the same run, with the simulator's prediction of each beside what was measured
(issue 63, parts 2 and 3).

    python -m varpack calibrate --model examples/train_ddp.py:anchor_model --capacity 32768 \\
        --device cuda --autocast bf16 --out OUT/calibration.json
    torchrun --nproc_per_node=N bench/distributed/schedule_multi.py --cost-model OUT/calibration.json --out OUT
    torchrun --nproc_per_node=2 bench/distributed/schedule_multi.py --tiny --out OUT   # CPU, gloo, small

Model: the 542M Llama of the benchmarks (examples/train_ddp.py: 8 layers, hidden 2048, 16 heads,
SwiGLU 5632, vocab 320 of byte tokens here), bf16 autocast; --tiny: 1 layer, hidden 64, rows of 512.
Mixes (bench/balance/simulate_steps.py's lengths, contents cut from examples/corpus.py's standard-
library stream): stdlib (the files' sizes) and lognormal (median --median), both clipped to what
the ranks can hold together (world x capacity), so documents longer than one rank's row occur.
Modes, on the same documents, each a whole epoch of full steps (--steps sets its size):

  schedule  cp_schedule: documents longer than a row whole over an aligned group of ranks
            (cp_varlen_attention, the variant simulate_steps.cp_choice picks), the rest packed into
            rows, LPT with --window steps sorted by cost;
  token     plan(overlong="split") + balance_rows(method="round_robin"): k near-full rows per rank;
  lpt       the same plan + balance_rows(method="lpt"), no window sort.
The baselines cut long documents into row-sized pieces (less attention work than the schedule,
which keeps them whole); tokens per second compares the three.

Per step each rank runs its slots one forward + backward each (idle slots: nothing), timed with the
device synchronised (a CP slot includes waiting for its group); then the gradients are summed over
all ranks in one all-reduce (train_ddp.all_reduce_gradients) and AdamW steps. Logged per step:
every rank's compute, max/mean, the all-reduce. Predicted (the simulator's model): the planners'
per-rank loads under --cost-model, the ones they balanced with (CP shares with cp_choice's exposed
communication), plus simulate_steps.allreduce_seconds; compared with measured compute + all-reduce.
Rank 0 prints a table and the targets, and writes schedule.json to --out. With one rank there is
no data or context parallelism to measure: the modes differ only by their order.
"""
from __future__ import annotations

import argparse
import logging
import pathlib
import sys
import time
from types import SimpleNamespace

import numpy as np
import torch
import torch.distributed as dist

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "examples"), str(ROOT / "bench" / "balance"), str(ROOT / "bench" / "distributed")]
import simulate_steps  # noqa: E402
import train_ddp  # noqa: E402
from corpus import PAD, Corpus  # noqa: E402
from cp_multi import finish, target_lines, write_results  # noqa: E402

import varpack  # noqa: E402
from varpack.auto import ANCHOR_COST_MODEL, CostModel  # noqa: E402
from varpack.context_parallel import cp_varlen_attention, register_hf  # noqa: E402
from varpack.cp_layout import SPLIT, cp_layout  # noqa: E402
from varpack.cp_schedule import cp_schedule, rank_batches  # noqa: E402

log = logging.getLogger("schedule_multi")
TARGETS = ("per-step rank imbalance <= 3% (schedule)", "schedule >= 1.15x the token-balanced step (lognormal)",
           "simulator within 5% of the measured step time (schedule)")
TINY = train_ddp.Preset(layers=1, hidden=64, heads=4, intermediate=128, capacity=512, rows_per_rank=2,
                        window_steps=4, median_length=64, warmup_steps=1, steps=12)


def tiny_model():
    """The --tiny model, for `python -m varpack calibrate --model bench/distributed/schedule_multi.py:tiny_model`."""
    return train_ddp.make_model(TINY, seed=0)


# ---------------------------------------------------------------- the documents and each mode's steps

def mix_documents(mix: str, corpus: Corpus, args, world: int) -> list:
    """The mix's documents: enough for about args.steps full steps of every rank's rows."""
    rng = np.random.default_rng(args.seed)
    longest = world * args.capacity
    draw = {"lognormal": lambda n: simulate_steps.lognormal_lengths(n, longest, rng, median=args.median),
            "stdlib": lambda n: simulate_steps.stdlib_lengths(n, longest, rng)}[mix]
    count = int(world * args.rows_per_rank * args.steps * args.capacity * 0.97 / draw(4000).mean()) + 1
    lengths = np.maximum(draw(count), 2)
    starts = rng.integers(0, len(corpus.train), size=count) if mix == "lognormal" else None
    return corpus.cut(lengths.tolist(), "train", starts)


def row_inputs(built: dict) -> dict:
    """A packed row (build_batch) as the model's inputs with varpack's attention."""
    cu, longest = built["cu_seqlens"], int(built["max_seqlen"])
    return {"input_ids": built["input_ids"][None], "position_ids": built["position_ids"][None],
            "labels": built["labels"][None], "cu_seq_lens_q": cu, "cu_seq_lens_k": cu,
            "max_length_q": longest, "max_length_k": longest}


def schedule_steps(samples, world, rank, args, model_cost, cp_overhead):
    """(predicted loads [steps, world], each step's slots on this rank): the full steps of cp_schedule."""
    lengths = [len(s) for s in samples]
    sched = cp_schedule(lengths, world, args.rows_per_rank, args.capacity, model_cost, window_steps=args.window,
                        seed=args.seed, cp_overhead=cp_overhead)
    full = [s for s, (_, _, slots) in enumerate(sched.steps) if (slots != -1).all()]
    keep = set(full)
    steps = [step for s, step in enumerate(rank_batches(sched, samples, rank)) if s in keep]
    return sched.predicted[full], steps


def baseline_steps(samples, world, rank, args, model_cost, method):
    """(predicted loads, slots) of plan(overlong="split") + balance_rows(method), no window sort."""
    plan = varpack.plan([len(s) for s in samples], args.capacity, overlong="split", shuffle=True, seed=args.seed)
    balance = varpack.balance_rows(varpack.row_costs(plan, model_cost), world, args.rows_per_rank, method=method)
    steps = [[("row", varpack.build_batch(varpack.select_rows(plan, [int(r)]), samples))
              for r in balance.rows_of(s, rank)] for s in range(balance.num_steps)]
    return np.asarray(balance.rank_cost), steps


# ---------------------------------------------------------------- running a step

class CPGroups:
    """This rank's process group of each aligned block size g (cp_schedule's groups: ranks
    [b, b + g)), its NCCL / gloo links made before any timing, and one attention implementation
    registered with transformers per (g, variant, Ulysses degree)."""

    def __init__(self, world: int, rank: int, device, heads: int, head_dim: int):
        self.rank, self.groups, self.names = rank, {}, set()
        sizes = [2 ** i for i in range(1, world.bit_length()) if 2 ** i <= world]
        for g in sizes:
            for b in range(0, world - g + 1, g):
                group = dist.new_group(list(range(b, b + g)))
                if b <= rank < b + g:
                    self.groups[g] = group
        for g, group in self.groups.items():  # every link a variant uses, once, untimed
            for variant in ("allgather", "ring") + (("ulysses",) if heads % g == 0 else ()) + (
                    ("hybrid",) if g >= 4 and heads % 2 == 0 else ()):
                x = torch.randn(4 * g, heads, head_dim, device=device, dtype=torch.bfloat16, requires_grad=True)
                layout = cp_layout([0, 4 * g * g], g, owner=[SPLIT])
                cp_varlen_attention(x, x, x, layout, group, variant=variant, ulysses=2 if variant == "hybrid" else None
                                    ).sum().backward()

    def attention(self, size: int, choice) -> str:
        name = f"varpack_cp_{size}_{choice.variant}_{choice.ulysses}"
        if name not in self.names:
            register_hf(name, group=self.groups[size], variant=choice.variant, ulysses=choice.ulysses)
            self.names.add(name)
        return name


def cp_forward_backward(model, batch: dict, total_targets: int, device) -> None:
    inputs = {"input_ids": batch["input_ids"].to(device), "position_ids": batch["position_ids"].to(device),
              "cp_layout": batch["cp_layout"]}
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        logits = model(**inputs).logits
    loss = torch.nn.functional.cross_entropy(logits[0].float(), batch["shift_labels"][0].to(device),
                                             ignore_index=-100, reduction="sum") / max(total_targets, 1)
    loss.backward()


def run_step(model, optimizer, slots, groups, choose, device, world) -> list:
    """One step of this rank's slots; returns [compute s, all-reduce s, step s, tokens] of every rank."""
    targets, tokens = 0, 0
    for slot in slots:
        if slot[0] == "row":
            targets += int((slot[1]["labels"][1:] != -100).sum())
            tokens += int(slot[1]["cu_seqlens"][-1])
        elif slot[0] == "cp":
            targets += int((slot[2]["shift_labels"] != -100).sum())
            tokens += int(slot[2]["input_ids"].numel())
    count = torch.tensor([targets], dtype=torch.int64, device=device)
    dist.all_reduce(count)
    train_ddp.sync(device)
    dist.barrier()
    start = time.perf_counter()
    for slot in slots:
        if slot[0] == "row":
            model.config._attn_implementation = "varpack"
            train_ddp.forward_backward(model, row_inputs(slot[1]), int(count), device)
        elif slot[0] == "cp":
            work = slot[1]
            model.config._attn_implementation = groups.attention(work.size, choose(work))
            cp_forward_backward(model, slot[2], int(count), device)
    train_ddp.sync(device)
    compute = time.perf_counter() - start
    train_ddp.all_reduce_gradients(model)
    train_ddp.sync(device)
    allreduce = time.perf_counter() - start - compute
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    train_ddp.sync(device)
    mine = torch.tensor([compute, allreduce, time.perf_counter() - start, tokens], dtype=torch.float64, device=device)
    every = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(every, mine)
    return [t.tolist() for t in every]


def run_mode(mode, steps, predicted, model, optimizer, groups, choose, device, world, rank, allreduce_predicted):
    """Every step of the mode (the first once more, untimed, before); per-step records and a summary."""
    if steps:
        run_step(model, optimizer, steps[0], groups, choose, device, world)
    records = []
    for s, slots in enumerate(steps):
        every = run_step(model, optimizer, slots, groups, choose, device, world)
        compute = [r[0] for r in every]
        record = {"rank_compute_s": compute, "allreduce_s": max(r[1] for r in every),
                  "step_s": max(r[2] for r in every), "tokens": int(sum(r[3] for r in every)),
                  "imbalance": max(compute) / np.mean(compute), "predicted_s": list(map(float, predicted[s])),
                  "predicted_imbalance": float(predicted[s].max() / predicted[s].mean())}
        records.append(record)
        if rank == 0:
            log.info("%s step %d: compute per rank %s ms, max/mean %.3f (predicted %.3f), all-reduce %.1f ms",
                     mode, s, " ".join(f"{t * 1e3:.1f}" for t in compute), record["imbalance"],
                     record["predicted_imbalance"], record["allreduce_s"] * 1e3)
    measured = sum(max(r["rank_compute_s"]) + r["allreduce_s"] for r in records)
    predicted_total = sum(max(r["predicted_s"]) + allreduce_predicted for r in records)
    tokens = sum(r["tokens"] for r in records)
    return {"steps": records, "summary": {
        "steps": len(records), "tokens": tokens,
        "mean_imbalance": float(np.mean([r["imbalance"] for r in records])) if records else None,
        "time_weighted_imbalance": (sum(max(r["rank_compute_s"]) for r in records) /
                                    sum(np.mean(r["rank_compute_s"]) for r in records)) if records else None,
        "mean_predicted_imbalance": float(np.mean([r["predicted_imbalance"] for r in records])) if records else None,
        "compute_allreduce_s": measured, "step_s": sum(r["step_s"] for r in records),
        "allreduce_s": sum(r["allreduce_s"] for r in records), "predicted_s": predicted_total,
        "predicted_vs_measured": predicted_total / measured if measured else None,
        "tokens_per_s": tokens / measured if measured else None}}


# ---------------------------------------------------------------- main

def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mixes", default="stdlib,lognormal", help="comma-separated: stdlib, lognormal")
    parser.add_argument("--capacity", type=int, help="tokens per row (default 32768; --tiny 512)")
    parser.add_argument("--rows-per-rank", type=int, default=2, help="slots (rows) per rank per step (default 2)")
    parser.add_argument("--steps", type=int, help="about this many full steps per mode (default 8; --tiny 12)")
    parser.add_argument("--window", type=int, default=8, help="the schedule's window_steps (default 8)")
    parser.add_argument("--median", type=int, help="the lognormal mix's median length (default capacity / 8)")
    parser.add_argument("--cost-model", help="calibration JSON (python -m varpack calibrate) of this model on this "
                        "device; default: the built-in fit of the 542M model on an H200")
    parser.add_argument("--intra-bandwidth", type=float, default=300e9, help="bytes/s per rank within a node "
                        "(the simulator's all-reduce and CP terms)")
    parser.add_argument("--bandwidth", type=float, default=45e9, help="bytes/s per rank across nodes (CP groups past 8)")
    parser.add_argument("--tiny", action="store_true", help="CPU sizes: the tiny model (1 layer, hidden 64, 4 heads), rows of 512 tokens")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                        help="auto: CUDA (NCCL) where there is a GPU, else the CPU (gloo)")
    parser.add_argument("--max-files", type=int, help="read only this many stdlib files (quicker start)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="folder for schedule.json and schedule.md (rank 0)")
    args = parser.parse_args(argv)
    preset = TINY if args.tiny else train_ddp.PRESETS["h200"]
    args.capacity = args.capacity or preset.capacity
    args.steps = args.steps or (TINY.steps if args.tiny else 8)
    args.median = args.median or args.capacity // 8
    return args, preset


def run(args, preset, rank: int, world: int, device) -> dict:
    """Both mixes, every mode, on this rank (a process group is joined); rank 0's report in "text"."""
    model_cost = CostModel.load(args.cost_model) if args.cost_model else ANCHOR_COST_MODEL
    shape = SimpleNamespace(heads=preset.heads, kv_heads=preset.heads, head_dim=preset.hidden // preset.heads,
                            bandwidth=args.bandwidth, intra_bandwidth=args.intra_bandwidth)
    choices = {}

    def choice(length, g):
        if (length, g) not in choices:
            choices[length, g] = simulate_steps.cp_choice(length, g, shape)
        return choices[length, g]

    def cp_overhead(length, g):
        return choice(length, g).overhead_s * preset.layers

    model = train_ddp.make_model(preset, seed=0).to(device)
    params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=device.type == "cuda")
    groups = CPGroups(world, rank, device, preset.heads, preset.hidden // preset.heads)
    allreduce_predicted = simulate_steps.allreduce_seconds(world, params, 4, args.intra_bandwidth) if world > 1 else 0.0
    corpus = Corpus(max_files=args.max_files)
    results = {"world_size": world, "backend": dist.get_backend(), "parameters": params,
               "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
               "cost_model": model_cost.to_dict(), "args": vars(args), "mixes": {}}
    for mix in args.mixes.split(","):
        samples = mix_documents(mix, corpus, args, world)
        lengths = np.array([len(s) for s in samples])
        modes = {"schedule": schedule_steps(samples, world, rank, args, model_cost, cp_overhead),
                 "token": baseline_steps(samples, world, rank, args, model_cost, "round_robin"),
                 "lpt": baseline_steps(samples, world, rank, args, model_cost, "lpt")}
        docs = {i: int(n) for i, n in enumerate(lengths)}

        def choose(work):
            return choice(docs[work.doc], work.size)

        out = {"documents": len(samples), "tokens": int(lengths.sum()),
               "longer_than_a_row": int((lengths > args.capacity).sum()), "modes": {}}
        for mode, (predicted, steps) in modes.items():
            out["modes"][mode] = run_mode(f"{mix} {mode}", steps, predicted, model, optimizer, groups, choose, device,
                                          world, rank, allreduce_predicted)
        results["mixes"][mix] = out
    results["text"], results["targets"] = report(results, world)
    return results


def report(results, world) -> tuple[str, dict]:
    cpu = results["device"] == "cpu"
    lines = [f"{results['device']}, {world} rank(s) ({results['backend']}), {results['parameters'] / 1e6:.1f}M "
             f"parameters; cost model {results['cost_model']}", ""]
    if world == 1:
        lines.append("One rank: no data or context parallelism measured (the modes differ only by their order).\n")
    lines += ["| mix | mode | steps | tokens/s | vs token | max/mean per step (time-weighted) | predicted max/mean | "
              "compute + all-reduce s | predicted s (pred / meas) |", "|---|---|---|---|---|---|---|---|---|"]
    targets = {t: [] for t in TARGETS}
    for mix, out in results["mixes"].items():
        head = f"{mix} ({out['documents']} docs, {out['longer_than_a_row']} past a row)"
        token = out["modes"]["token"]["summary"]["tokens_per_s"]
        for mode, r in out["modes"].items():
            s = r["summary"]
            if not s["steps"]:
                lines.append(f"| {head} | {mode} | 0 | | | | | | |")
                continue
            lines.append(f"| {head} | {mode} | {s['steps']} | {s['tokens_per_s']:.0f} | "
                         f"{s['tokens_per_s'] / token:.3f}x | {s['mean_imbalance']:.3f} ({s['time_weighted_imbalance']:.3f}) | "
                         f"{s['mean_predicted_imbalance']:.3f} | {s['compute_allreduce_s']:.3f} | {s['predicted_s']:.3f} "
                         f"({s['predicted_vs_measured']:.3f}) |")
        sched = out["modes"]["schedule"]["summary"]
        if sched["steps"] and world > 1:
            targets[TARGETS[0]].append((f"{mix} {sched['mean_imbalance'] - 1:.1%}", sched["mean_imbalance"] <= 1.03))
            if mix == "lognormal":
                ratio = sched["tokens_per_s"] / token
                targets[TARGETS[1]].append((f"{ratio:.3f}x", ratio >= 1.15))
            err = sched["predicted_vs_measured"] - 1
            targets[TARGETS[2]].append((f"{mix} {err:+.1%}", abs(err) <= 0.05))
    merged = {t: (", ".join(f[0] for f in found) or f"not measured ({world} rank(s))",
                  all(f[1] for f in found) if found else None) for t, found in targets.items()}
    return "\n".join(lines + target_lines(merged, cpu)), {t: {"measured": m, "pass": ok} for t, (m, ok) in merged.items()}


def main(argv=None) -> None:
    args, preset = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    rank, world, device = train_ddp.init_distributed(args.device)
    results = run(args, preset, rank, world, device)
    if rank == 0:
        write_results(args.out, "schedule", results)
    finish()


if __name__ == "__main__":
    main()
