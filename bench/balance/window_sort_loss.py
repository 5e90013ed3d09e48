"""Does sorting rows by cost within windows of steps (balance_rows(window_steps=W)) hurt the loss?
A small Llama trained on CPU on the same packed rows in two orders, same initialisation: the rows
dealt in the plan's shuffled order (round robin, window 1) against LPT with windows of W steps,
which groups rows of similar cost into the same steps (a sawtooth of sample lengths over the
window). Each step trains on all ranks' rows at once (what data parallelism with a global loss
normalisation computes). Printed: the held-out loss every --eval-every steps for both orders and
each seed; the seeds' spread is the noise to compare the orders' difference against.

    python bench/balance/window_sort_loss.py                 # 150 steps, 2 seeds
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np
import torch

import varpack
import varpack.hf
from varpack.auto import ANCHOR_COST_MODEL

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples"))
from corpus import Corpus  # noqa: E402
from train_packed import Trainer, make_model  # noqa: E402


def step_batch(plan, rows, samples) -> dict:
    """The rows of one step as one packed sequence (documents never attend across each other)."""
    picked = [samples[i] for r in rows for i in plan.pieces[plan.row_begin[r]:plan.row_begin[r + 1], 0]]
    lengths = [len(s) for s in picked]
    built = varpack.build_batch(varpack.plan(lengths, sum(lengths), algorithm="none"), picked)
    return {"input_ids": built["input_ids"][None], "labels": built["labels"][None],
            "position_ids": built["position_ids"][None], "cu_seq_lens_q": built["cu_seqlens"],
            "cu_seq_lens_k": built["cu_seqlens"], "max_length_q": built["max_seqlen"],
            "max_length_k": built["max_seqlen"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--capacity", type=int, default=256)
    parser.add_argument("--window", type=int, default=16)
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--hidden", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(1)  # the machine is shared; one thread is as fast under load
    varpack.hf.register()
    corpus = Corpus()
    device = torch.device("cpu")
    rng = np.random.default_rng(1234)
    heldout = corpus.cut([256] * 16, "heldout", rng.integers(0, len(corpus.heldout), size=16))
    print(f"cpu, Llama 2 x {args.hidden} (4 heads), byte tokens of the stdlib corpus; {args.ranks} ranks x 1 row of "
          f"{args.capacity} per step, {args.steps} steps, window {args.window}, held-out loss on 16 x 256 tokens\n")
    print("| seed | order | " + " | ".join(f"step {s}" for s in range(args.eval_every, args.steps + 1,
                                                                     args.eval_every)) + " | train s |")
    print("|---|---|" + "---|" * (args.steps // args.eval_every + 1))
    for seed in (int(s) for s in args.seeds.split(",")):
        rng = np.random.default_rng(seed)
        def draw(size):
            return np.clip(np.rint(rng.lognormal(np.log(80), 1.0, size=size)), 16, args.capacity).astype(np.int64)

        count = int(args.steps * args.ranks * args.capacity * 1.1 / draw(20000).mean()) + 1
        lengths = draw(count)
        samples = corpus.cut(lengths.tolist(), "train", rng.integers(0, len(corpus.train), size=count))
        plan = varpack.plan(lengths, args.capacity, shuffle=True, seed=seed)
        if plan.num_rows < args.steps * args.ranks:
            raise RuntimeError(f"{plan.num_rows} rows for {args.steps} steps of {args.ranks}; draw more samples")
        costs = varpack.row_costs(plan, ANCHOR_COST_MODEL)
        orders = {"random (round robin)": varpack.balance_rows(costs, args.ranks, 1, method="round_robin"),
                  f"window-sorted (LPT, W={args.window})": varpack.balance_rows(costs, args.ranks, 1, method="lpt",
                                                                               window_steps=args.window)}
        model = make_model(2, args.hidden, 4, 2 * args.hidden, args.capacity * args.ranks, device, seed)
        model.config._attn_implementation = "varpack"
        eval_batch = step_batch(varpack.plan([len(s) for s in heldout], 256), range(16), heldout)
        trainer = Trainer(model, args.lr, device, warmup=20, total=args.steps)  # keeps the initial weights
        for name, balance in orders.items():
            trainer.reset()
            losses, start = [], time.perf_counter()
            for step in range(args.steps):
                rows = np.concatenate(balance.step(step))
                model.train()
                batch = step_batch(plan, rows, samples)
                loss = model(**batch).loss
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                trainer.optimizer.step()
                trainer.scheduler.step()
                trainer.optimizer.zero_grad(set_to_none=True)
                if (step + 1) % args.eval_every == 0:
                    model.eval()
                    with torch.no_grad():
                        losses.append(float(model(**eval_batch).loss))
            print(f"| {seed} | {name} | " + " | ".join(f"{x:.4f}" for x in losses) +
                  f" | {time.perf_counter() - start:.0f} |", flush=True)


if __name__ == "__main__":
    main()
