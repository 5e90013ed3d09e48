"""The cost of splitting one document's attention over CP ranks, on one GPU: every variant's
per-rank kernel work (the varlen kernel calls and LSE merges a rank runs, with the K/V blocks it
would receive already in memory), summed over the ranks, against the one-process kernel on the
same document, forward + backward, in the same run; and the variant's result against the
one-process result (bf16).

    bash bench/distributed/cp_split_gpu.sh            # builds the extension, then runs this
    python bench/distributed/cp_split_cost.py --length 65536 --cp 2,4,8

No communication is timed (that is what a multi-GPU run adds); this isolates the kernels' cost of
cutting the document: smaller calls, the ring's partial blocks and merges, Ulysses' heads / CP.
"""
from __future__ import annotations

import argparse
import time

import torch

import varpack
from varpack.cp_kernels import Merged, attend, attend_backward, plan_calls
from varpack.cp_layout import SPLIT, cp_layout
from varpack.cp_variants import canonical


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn, repeats: int) -> float:
    fn()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def rank_work(layout, rank, q, k, v, dout, sources, scale, keep):
    """One rank's forward + backward kernel work: its queries against the K/V of `sources`
    (a list of (pieces, k, v) buffers), merged; the backward from the merged result."""
    ql, dl = layout.shard(q, rank), layout.shard(dout, rank)
    merged = Merged(ql)
    mine = layout.pieces[rank]
    for pieces, kb, vb in sources:
        attend(ql, kb, vb, plan_calls(mine, pieces, -1, 0), scale, 0.0, merged)
    out, lse = merged.result(q.dtype)
    dq = torch.zeros(ql.shape, dtype=torch.float32, device=q.device)
    for pieces, kb, vb in sources:
        dk = torch.zeros(kb.shape, dtype=torch.float32, device=q.device)
        dv = torch.zeros(vb.shape, dtype=torch.float32, device=q.device)
        attend_backward(dl, ql, kb, vb, out, lse, plan_calls(mine, pieces, -1, 0), scale, 0.0, False, dq, dk, dv)
    if keep is not None:
        keep.append(out)


def variant_sources(layout, variant, k, v):
    cp = layout.cp
    if variant == "ring":
        return [[(layout.pieces[s], layout.shard(k, s), layout.shard(v, s)) for s in range(cp)]] * cp
    _, pieces = canonical(layout, tuple(range(cp)), max(layout.tokens))
    return [[(pieces, k, v)]] * cp  # allgather: the row in order, as the gather + reorder gives it


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--length", type=int, default=65536)
    parser.add_argument("--cp", default="2,4,8")
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # CPU: a small smoke run
    g = torch.Generator(device="cpu").manual_seed(0)
    n, d = args.length, args.head_dim
    q, k, v, dout = (torch.randn(n, h, d, generator=g).to(device, torch.bfloat16)
                     for h in (args.heads, args.kv_heads, args.kv_heads, args.heads))
    cu = torch.tensor([0, n], dtype=torch.int32, device=device)
    scale = d ** -0.5

    def whole():
        x = [t.detach().requires_grad_() for t in (q, k, v)]
        out = varpack.flash_attn_varlen_func(*x, cu, cu, n, n, causal=True)
        out.backward(dout)
        return out

    reference = whole().detach().float()
    t_whole = timed(whole, args.repeats)
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    print(f"{name}, bf16, one causal document of {n} tokens, {args.heads}/{args.kv_heads} "
          f"heads x {d}, forward + backward, median of {args.repeats}")
    print(f"one process, one call: {t_whole * 1e3:.2f} ms\n")
    print("| variant | cp | kernel calls a direction | sum over ranks ms | / one process | slowest rank ms | "
          "max abs err out |")
    print("|---|---|---|---|---|---|---|")
    for cp in (int(c) for c in args.cp.split(",")):
        layout = cp_layout([0, n], cp, owner=[SPLIT])
        for variant in ("allgather", "ring", "ulysses"):
            per_rank, outs, calls = [], [], 0
            for rank in range(cp):
                if variant == "ulysses":  # heads / cp of the whole document: one call
                    hq = slice(rank * args.heads // cp, (rank + 1) * args.heads // cp)
                    hk = slice(rank * args.kv_heads // cp, max((rank + 1) * args.kv_heads // cp,
                                                              rank * args.kv_heads // cp + 1))
                    parts = [t[:, h].contiguous() for t, h in ((q, hq), (k, hk), (v, hk), (dout, hq))]

                    calls += 1

                    def work(parts=parts, keep=None):
                        x = [t.detach().requires_grad_() for t in parts[:3]]
                        out = varpack.flash_attn_varlen_func(*x, cu, cu, n, n, causal=True)
                        out.backward(parts[3])
                        if keep is not None:
                            keep.append(out.detach())
                else:
                    sources = variant_sources(layout, variant, k, v)[rank]
                    calls += sum(len(plan_calls(layout.pieces[rank], pieces, -1, 0)) for pieces, _, _ in sources)

                    def work(rank=rank, sources=sources, keep=None):
                        rank_work(layout, rank, q, k, v, dout, sources, scale, keep)
                per_rank.append(timed(work, args.repeats))
                work(keep=outs)
            if variant == "ulysses":
                got = torch.cat(outs, dim=1).float()
            else:
                got = layout.unshard(outs).float()
            err = float((got - reference).abs().max())
            total = sum(per_rank)
            print(f"| {variant} | {cp} | {calls} | {total * 1e3:.2f} | {total / t_whole:.3f} | {max(per_rank) * 1e3:.2f} | "
                  f"{err:.2e} |", flush=True)


if __name__ == "__main__":
    main()
