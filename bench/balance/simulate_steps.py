"""Simulated data-parallel step time at 8..1024 ranks: token-count balancing vs cost balancing, in
the same run, over varpack's C++ planner and balancer, with a fitted cost model.

For each length mix and rank count: lengths -> varpack.plan (best-fit-decreasing into rows of
--capacity, rows shuffled) -> row costs (c + alpha * tokens + beta * sum(len^2) per row) ->
  token:  rows dealt in order, k per rank per step (varpack.balance_rows method="round_robin"):
          every rank runs k near-full rows, i.e. the same token count, as a DistributedSampler does;
  cost:   varpack.balance_rows with method="lpt" and window_steps W (rows of W steps pooled by cost).
Per step the ranks wait for the slowest. Printed: mean over steps of max / mean rank time, and the
epoch's step time (sum over steps of the slowest rank) over the ideal, the epoch's total cost /
ranks (every rank busy all the time, rows divisible at will); "bound" is the best any whole-row
assignment can do, the larger of ideal and the costliest single row's share, summed per step of the
cost-balanced schedule.

    python bench/balance/simulate_steps.py                     # ANCHORS fit, lognormal + stdlib
    python bench/balance/simulate_steps.py --cost-model calibration.json --ranks 8,64,1024

Mixes: lognormal (median 1100, sigma 1.0, clipped to [1, capacity]: the long tail of ANCHORS'
simulation) and stdlib (the running Python's standard-library sources, one sample per file, as
byte tokens; files longer than the capacity split; the file list repeated to fill the steps).
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np

import varpack
from varpack.auto import ANCHOR_COST_MODEL, CostModel

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples"))


def lognormal_lengths(count: int, capacity: int, rng: np.random.Generator) -> np.ndarray:
    return np.clip(np.rint(rng.lognormal(np.log(1100), 1.0, size=count)), 1, capacity).astype(np.int64)


def stdlib_lengths(count: int, capacity: int, rng: np.random.Generator) -> np.ndarray:
    from corpus import stdlib_files
    sizes = np.array([p.stat().st_size + 2 for p in stdlib_files()], dtype=np.int64)  # + BOS, EOS
    return rng.permutation(np.resize(sizes, count))


MIXES = {"lognormal": lognormal_lengths, "stdlib": stdlib_lengths}


def lengths_for(mix: str, rows: int, capacity: int, seed: int) -> np.ndarray:
    """Enough samples of the mix for about `rows` full rows (10% spare for the packing's waste)."""
    rng = np.random.default_rng(seed)
    probe = MIXES[mix](20000, capacity, rng)
    mean = float(np.minimum(probe, capacity).mean())
    return MIXES[mix](int(rows * capacity * 1.1 / mean) + 1, capacity, rng)


def simulate(mix: str, ranks: int, k: int, window: int, steps: int, capacity: int, model: CostModel,
             seed: int) -> dict:
    rows = ranks * k * steps
    lengths = lengths_for(mix, rows, capacity, seed)
    plan = varpack.plan(lengths, capacity, overlong="split", shuffle=True, seed=seed)
    if plan.num_rows < rows:
        raise RuntimeError(f"{mix}: {len(lengths)} samples filled {plan.num_rows} rows, fewer than the "
                           f"{rows} that {steps} steps take; raise the spare in lengths_for")
    costs = varpack.row_costs(plan, model)[:rows]  # exactly `steps` steps of the shuffled rows
    token = varpack.balance_rows(costs, ranks, k, method="round_robin")
    cost = varpack.balance_rows(costs, ranks, k, method="lpt", window_steps=window)
    ideal = cost.stats["ideal_step_time"]
    # Whole rows: a step can end no sooner than its costliest row.
    biggest = np.array([max(costs[r].max() for r in cost.step(s) if len(r)) for s in range(cost.num_steps)])
    bound = float(np.maximum(cost.rank_cost.mean(axis=1), biggest).sum())
    return {"mix": mix, "ranks": ranks, "k": k, "window": window, "steps": cost.num_steps,
            "rows": plan.num_rows, "samples": len(lengths),
            "token_imbalance": token.stats["mean_imbalance"], "cost_imbalance": cost.stats["mean_imbalance"],
            "token_vs_ideal": token.stats["step_time"] / token.stats["ideal_step_time"],
            "cost_vs_ideal": cost.stats["step_time"] / ideal, "bound_vs_ideal": bound / ideal,
            "speedup": token.stats["step_time"] / cost.stats["step_time"]}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mixes", default="lognormal,stdlib", help="comma-separated: " + ", ".join(MIXES))
    parser.add_argument("--ranks", default="8,64,1024", help="comma-separated rank counts")
    parser.add_argument("--k", default="2", help="rows per rank per step (comma-separated to compare)")
    parser.add_argument("--window", type=int, default=16, help="steps pooled by cost (window_steps)")
    parser.add_argument("--steps", type=int, default=64, help="steps per simulated epoch")
    parser.add_argument("--capacity", type=int, default=32768, help="tokens per row (one rank's row)")
    parser.add_argument("--cost-model", help="JSON from `python -m varpack calibrate` (default: the "
                        "ANCHORS fit, 3.38 ms + 7.26 us/token + 351 ps/token^2 per row)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    model = CostModel.load(args.cost_model) if args.cost_model else ANCHOR_COST_MODEL
    print(f"cost per row: {model.overhead * 1e3:.3f} ms + {model.alpha * 1e6:.3f} us/token + "
          f"{model.beta * 1e12:.1f} ps/token^2; capacity {args.capacity}; {args.steps} steps; "
          f"window {args.window} steps; seed {args.seed}\n")
    print("| mix | ranks | k | samples | rows planned | token max/mean | cost max/mean | token step/ideal | "
          "cost step/ideal | whole-row bound/ideal | token / cost | s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for mix in args.mixes.split(","):
        for ranks in (int(r) for r in args.ranks.split(",")):
            for k in (int(x) for x in args.k.split(",")):
                start = time.perf_counter()
                r = simulate(mix, ranks, k, args.window, args.steps, args.capacity, model, args.seed)
                print(f"| {mix} | {ranks} | {k} | {r['samples']:,} | {r['rows']:,} | {r['token_imbalance']:.3f} | "
                      f"{r['cost_imbalance']:.3f} | {r['token_vs_ideal']:.3f} | {r['cost_vs_ideal']:.3f} | "
                      f"{r['bound_vs_ideal']:.3f} | {r['speedup']:.3f} | {time.perf_counter() - start:.1f} |",
                      flush=True)


if __name__ == "__main__":
    main()
