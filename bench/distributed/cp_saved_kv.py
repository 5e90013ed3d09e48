"""K/V bytes that each context-parallel rank keeps for the backward, read from the autograd graph's
saved tensors (torch.autograd.graph.saved_tensors_hooks around the forward), for every variant,
against the one-process kernel on the same document (which saves the whole document's K/V), in
the same run; CPU processes joined by gloo.

    python bench/distributed/cp_saved_kv.py                  # cp 2, 4, 8; 16384 tokens
    python bench/distributed/cp_saved_kv.py --cp 4 --length 32768

A saved tensor counts as K/V when its second dimension is the K/V head count (q, out and lse
have the query heads). Target: at most 1/CP of the document's K/V plus one block.
"""
from __future__ import annotations

import argparse
import os
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import varpack
from varpack.context_parallel import cp_layout, cp_varlen_attention
from varpack.cp_layout import SPLIT

VARIANTS = ("allgather", "ring", "ulysses")


def saved_bytes(fn, kv_heads: int) -> tuple[int, int]:
    """(K/V bytes, all bytes) that fn's autograd graph saves for the backward."""
    seen = {}

    def pack(t):
        seen[(t.data_ptr(), tuple(t.shape))] = t
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    kv = sum(t.nbytes for t in seen.values() if t.dim() == 3 and t.shape[1] == kv_heads)
    return kv, sum(t.nbytes for t in seen.values()), out


def inputs(args):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(args.length, h, args.head_dim, generator=g).requires_grad_()
            for h in (args.heads, args.kv_heads, args.kv_heads)]


def on_rank(rank, world, store, args, results):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    layout = cp_layout([0, args.length], world, owner=[SPLIT])
    rows = []
    for variant in VARIANTS:
        q, k, v = (layout.shard(x.detach(), rank).requires_grad_() for x in inputs(args))
        kv, total, out = saved_bytes(lambda: cp_varlen_attention(q, k, v, layout, variant=variant), args.kv_heads)
        out.sum().backward()  # the saved tensors are what the backward uses: run it
        rows.append((variant, kv, total))
    torch.save(rows, os.path.join(results, f"{world}-{rank}.pt"))
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--length", type=int, default=16384)
    parser.add_argument("--cp", default="2,4,8")
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--head-dim", type=int, default=16)
    args = parser.parse_args()
    q, k, v = inputs(args)
    cu = torch.tensor([0, args.length], dtype=torch.int32)
    doc_kv, doc_total, _ = saved_bytes(
        lambda: varpack.flash_attn_varlen_func(q, k, v, cu, cu, args.length, args.length, causal=True), args.kv_heads)
    print(f"cpu, fp32, one causal document of {args.length} tokens, {args.heads}/{args.kv_heads} heads x "
          f"{args.head_dim}; one process saves {doc_kv / 2**20:.2f} MiB of K/V ({doc_total / 2**20:.2f} MiB in all)\n")
    print("| variant | cp | K/V saved per rank (max) MiB | / document's K/V | target 1/cp + one block | "
          "all saved per rank MiB |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for world in (int(c) for c in args.cp.split(",")):
            store = os.path.join(tmp, f"store{world}")
            mp.spawn(on_rank, args=(world, store, args, tmp), nprocs=world, join=True)
            per_rank = [torch.load(os.path.join(tmp, f"{world}-{r}.pt")) for r in range(world)]
            for i, variant in enumerate(VARIANTS):
                kv = max(rows[i][1] for rows in per_rank)
                total = max(rows[i][2] for rows in per_rank)
                block = doc_kv / (2 * world)  # one zigzag chunk's K/V
                print(f"| {variant} | {world} | {kv / 2**20:.3f} | {kv / doc_kv:.4f} | "
                      f"{(doc_kv / world + block) / doc_kv:.4f} | {total / 2**20:.3f} |", flush=True)


if __name__ == "__main__":
    main()
