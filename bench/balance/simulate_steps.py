"""Simulated training step time at 8..1024 ranks for five schedules of the same documents, with
communication and cost noise, over varpack's C++ planner and balancer and the cost model.

Every schedule is planned with the cost model's predictions and scored with "true" costs: each
row's (or context-parallel share's) prediction times 1 + e, e ~ Normal(0, noise), noise being the
calibration's residuals (their RMS; the default fit's six points by default) or a given level.
A step takes its slowest rank plus the gradient all-reduce (ring: 2 (R-1)/R x parameters x bytes
/ bandwidth, not overlapped). Ideal: the mean rank's true compute plus the all-reduce, per step.

  round robin:        rows (long documents cut at --capacity, overlong="split") dealt in order, k per
                      rank per step (what a DistributedSampler does);
  rr + window sort:   the same after sorting each --window steps of rows by cost;
  LPT:                varpack.balance_rows(method="lpt"), no window;
  LPT + windows:      varpack.balance_rows(method="lpt", window_steps=--window);
  DP + CP:            varpack.cp_schedule: documents longer than a row kept whole and run
                      context-parallel over g ranks (their exposed communication and splitting cost from
                      varpack.cp_cost's choice of variant, NVLink within 8 ranks, --bandwidth
                      across), the rest packed and balanced by LPT with windows.
The first four cut long documents into row-sized pieces (attention no longer spans them); DP + CP
keeps them whole, so its epoch holds more attention work: compare step/ideal (balance), and epoch
seconds for the absolute cost.

    python bench/balance/simulate_steps.py                      # lognormal + stdlib, 8/64/1024 ranks
    python bench/balance/simulate_steps.py --cost-model calibration.json --noise 0.1

Mixes: lognormal (median --median, 1100 by default, sigma 1.0, clipped to [1, --max-length]) and stdlib (the running
Python's standard-library sources, one document per file, as byte tokens; the list repeated).
"""
from __future__ import annotations

import argparse
import functools
import json
import pathlib
import sys
import time

import numpy as np

import varpack
from varpack.auto import ANCHOR_COST_MODEL, CostModel
from varpack.cp_cost import VariantCost, choose_variant
from varpack.cp_layout import SPLIT, cp_layout
from varpack.cp_schedule import cp_schedule

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples"))

# The default fit's points: rows of 32768 tokens on the H200 (542M model), (samples x length, seconds).
ANCHOR_POINTS = [([128] * 256, 0.242), ([512] * 64, 0.248), ([2048] * 16, 0.265), ([8192] * 4, 0.336),
                 ([16384] * 2, 0.430), ([32768], 0.618)]


def lognormal_lengths(count: int, max_length: int, rng: np.random.Generator, median: float = 1100) -> np.ndarray:
    return np.clip(np.rint(rng.lognormal(np.log(median), 1.0, size=count)), 1, max_length).astype(np.int64)


def stdlib_lengths(count: int, max_length: int, rng: np.random.Generator) -> np.ndarray:
    from corpus import stdlib_files
    sizes = np.array([p.stat().st_size + 2 for p in stdlib_files()], dtype=np.int64)  # + BOS, EOS
    return rng.permutation(np.minimum(np.resize(sizes, count), max_length))


MIXES = {"lognormal": lognormal_lengths, "stdlib": stdlib_lengths}


def residual_noise(model: CostModel, points) -> float:
    """RMS of the fit's relative errors at its measured points."""
    errors = [model.predict(lengths) / seconds - 1 for lengths, seconds in points]
    return float(np.sqrt(np.mean(np.square(errors))))


def allreduce_seconds(ranks: int, params: float, grad_bytes: int, bandwidth: float) -> float:
    """The gradient all-reduce of a step (ring): 2 (R-1)/R x parameters x bytes / bandwidth."""
    return 2 * (ranks - 1) / ranks * params * grad_bytes / bandwidth


def cp_choice(length: int, g: int, args) -> VariantCost:
    """choose_variant's pick for one document of `length` tokens over g ranks, for args' attention
    shape (heads, kv_heads, head_dim), --intra-bandwidth within 8 ranks and --bandwidth across."""
    layout = cp_layout([0, length], g, owner=[SPLIT])
    bandwidth = args.intra_bandwidth if g <= 8 else args.bandwidth
    return choose_variant(layout, args.heads, args.kv_heads, args.head_dim, bandwidth=bandwidth,
                          intra_bandwidth=args.intra_bandwidth)


def scored(step_loads: list, allreduce: float) -> tuple[float, float]:
    """(sum over steps of slowest rank + all-reduce, sum of mean rank + all-reduce)."""
    loads = np.asarray(step_loads)
    return float((loads.max(axis=1) + allreduce).sum()), float((loads.mean(axis=1) + allreduce).sum())


def baseline_lines(lengths, args, ranks, model, noise, rng, allreduce):
    plan = varpack.plan(lengths, args.capacity, overlong="split", shuffle=True, seed=args.seed)
    predicted = varpack.row_costs(plan, model)
    true = predicted * np.maximum(0.05, 1 + noise * rng.standard_normal(len(predicted)))
    lines = {}
    for name, method, window in (("round robin", "round_robin", 1), ("rr + window sort", "round_robin", args.window),
                                 ("LPT", "lpt", 1), ("LPT + windows", "lpt", args.window)):
        balance = varpack.balance_rows(predicted, ranks, args.k, method=method, window_steps=window)
        rows = balance.as_array()
        lines[name] = scored(true[rows].sum(axis=2), allreduce) + (balance.num_steps,)
    return lines


def dpcp_line(lengths, args, ranks, model, noise, rng, allreduce):
    def overhead(length, g):
        return cp_choice(length, g, args).overhead_s * args.layers

    sched = cp_schedule(lengths, ranks, args.k, args.capacity, model, window_steps=args.window, seed=args.seed,
                        cp_overhead=overhead)
    predicted_rows = varpack.row_costs(sched.rows, model)
    true_rows = predicted_rows * np.maximum(0.05, 1 + noise * rng.standard_normal(len(predicted_rows)))
    loads = np.zeros((len(sched.steps), ranks))
    for s, (rows, cps, _) in enumerate(sched.steps):
        for r, mine in enumerate(rows):
            loads[s, r] = true_rows[mine].sum()
        for w in cps:
            n = int(lengths[w.doc])
            base = model.overhead + (model.alpha * n + model.beta * float(n) ** 2) / w.size
            loads[s, w.first_rank:w.first_rank + w.size] += (
                base * np.maximum(0.05, 1 + noise * rng.standard_normal(w.size)) + overhead(n, w.size))
    # Drop the trailing partial steps, as drop_last does for the baselines.
    full = [s for s in range(len(sched.steps)) if (sched.steps[s][2] != -1).all()]
    return scored(loads[full], allreduce) + (len(full),), len(sched.long)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mixes", default="lognormal,stdlib", help="comma-separated: " + ", ".join(MIXES))
    parser.add_argument("--ranks", default="8,64,1024", help="comma-separated rank counts")
    parser.add_argument("--k", type=int, default=2, help="rows per rank per step")
    parser.add_argument("--window", type=int, default=16, help="steps pooled by cost (window_steps)")
    parser.add_argument("--steps", type=int, default=64, help="about this many steps of documents")
    parser.add_argument("--capacity", type=int, default=32768, help="tokens per row (one rank's row)")
    parser.add_argument("--max-length", type=int, default=262144, help="longest document (lognormal clip)")
    parser.add_argument("--median", type=float, default=1100, help="median length of the lognormal mix")
    parser.add_argument("--cost-model", help="JSON from `python -m varpack calibrate` (default: the built-in "
                        "fit, 3.38 ms + 7.26 us/token + 351 ps/token^2 per row); its points give the noise")
    parser.add_argument("--noise", default="calibration,0.1",
                        help="comma-separated relative cost noise levels; 'calibration' = the fit's residual RMS")
    parser.add_argument("--params", type=float, default=542e6, help="model parameters (gradient all-reduce)")
    parser.add_argument("--grad-bytes", type=int, default=2, help="bytes per gradient element")
    parser.add_argument("--bandwidth", type=float, default=45e9, help="bytes/s per rank across nodes")
    parser.add_argument("--intra-bandwidth", type=float, default=300e9, help="bytes/s per rank within a node")
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.cost_model:
        model = CostModel.load(args.cost_model)
        points = [(p["lengths"], p["seconds"]) for p in json.loads(pathlib.Path(args.cost_model).read_text())
                  .get("points", [])]
    else:
        model, points = ANCHOR_COST_MODEL, ANCHOR_POINTS
    calibration = residual_noise(model, points) if points else 0.0
    print(f"cost per row: {model.overhead * 1e3:.3f} ms + {model.alpha * 1e6:.3f} us/token + "
          f"{model.beta * 1e12:.1f} ps/token^2; calibration residual RMS {calibration:.4f}; capacity "
          f"{args.capacity}; k {args.k}; window {args.window}; {args.params / 1e6:.0f}M parameters, "
          f"{args.bandwidth / 1e9:.0f} GB/s across nodes, {args.intra_bandwidth / 1e9:.0f} GB/s within; seed {args.seed}\n")
    print("| mix | ranks | noise | schedule | steps | step / ideal | epoch s | all-reduce share |")
    print("|---|---|---|---|---|---|---|---|")
    for mix in args.mixes.split(","):
        for ranks in (int(r) for r in args.ranks.split(",")):
            rng = np.random.default_rng(args.seed)
            draw = functools.partial(lognormal_lengths, median=args.median) if mix == "lognormal" else MIXES[mix]
            probe = draw(20000, args.max_length, rng)
            count = int(ranks * args.k * args.steps * args.capacity * 0.95 / probe.mean()) + 1
            lengths = draw(count, args.max_length, rng)
            allreduce = allreduce_seconds(ranks, args.params, args.grad_bytes, args.bandwidth)
            for level in args.noise.split(","):
                noise = calibration if level == "calibration" else float(level)
                start = time.perf_counter()
                lines = baseline_lines(lengths, args, ranks, model, noise, np.random.default_rng(args.seed + 1),
                                       allreduce)
                lines["DP + CP"], long = dpcp_line(lengths, args, ranks, model, noise,
                                                   np.random.default_rng(args.seed + 2), allreduce)
                for name, (total, ideal, steps) in lines.items():
                    print(f"| {mix} | {ranks} | {noise:.3f} | {name}{f' ({long} CP docs)' if name == 'DP + CP' else ''} "
                          f"| {steps} | {total / ideal:.3f} | {total:.1f} | {allreduce * steps / total:.3f} |",
                          flush=True)
                print(f"<!-- {mix} {ranks} noise {noise:.3f}: {time.perf_counter() - start:.1f} s -->", flush=True)


if __name__ == "__main__":
    main()
