"""Context-parallel attention over the ranks of torchrun against one rank running the whole
sample, in the same run: forward + backward time (median after warm-up) and the error of the CP
result against the one-rank result.

    torchrun --nproc_per_node=2 bench/distributed/cp_bench.py --length 65536   # 2 GPUs
    python bench/distributed/cp_bench.py --length 65536                         # 1 rank: the peer only

Every rank times the whole sample on its own device (the one-rank peer), then cp_attention on its
zigzag share (varpack.context_parallel), and rank 0 prints max over ranks of the CP time, the
speedup and the CP error. With one rank there is no CP to measure: it prints the peer's time and
the one-rank CP path's (two kernel calls instead of one) as an overhead check, and says so.
Attention only (no projections or MLP, which split evenly over CP ranks anyway).
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch
import torch.distributed as dist

import varpack
from varpack.context_parallel import cp_attention, zigzag_shard, zigzag_unshard


def timed(fn, device, warmup: int, repeats: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        dist.barrier()
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--length", type=int, default=65536, help="tokens of the sample")
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv-heads", type=int, default=16)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if "RANK" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="29511")
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dtype = torch.bfloat16 if cuda else torch.float32
    length = -(-args.length // (2 * world)) * (2 * world)
    g = torch.Generator(device="cpu").manual_seed(0)
    q, k, v, dout = (torch.randn(length, h, args.head_dim, generator=g).to(device, dtype)
                     for h in (args.heads, args.kv_heads, args.kv_heads, args.heads))
    cu = torch.tensor([0, length], dtype=torch.int32, device=device)

    def whole():
        x = [t.detach().requires_grad_() for t in (q, k, v)]
        out = varpack.flash_attn_varlen_func(*x, cu, cu, length, length, causal=True)
        out.backward(dout)
        return out, *(t.grad for t in x)

    local = [zigzag_shard(t, world, rank) for t in (q, k, v, dout)]

    def sharded():
        x = [t.detach().requires_grad_() for t in local[:3]]
        out = cp_attention(*x)
        out.backward(local[3])
        return out, *(t.grad for t in x)

    t_whole = timed(whole, device, args.warmup, args.repeats)
    t_cp = torch.tensor([timed(sharded, device, args.warmup, args.repeats)], device=device)
    dist.all_reduce(t_cp, op=dist.ReduceOp.MAX)

    # Error of the CP result (gathered) against the one-rank result, relative to its largest value.
    errors = []
    for mine, full in zip((t.detach() for t in sharded()), (t.detach() for t in whole())):
        parts = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(parts, mine.contiguous())
        got = zigzag_unshard(parts).float()
        errors.append(float((got - full.float()).abs().max() / full.float().abs().max()))
    if rank == 0:
        name = torch.cuda.get_device_name(device) if cuda else "cpu"
        print(f"{name}, {dtype}, sample of {length} tokens, {args.heads}/{args.kv_heads} heads x {args.head_dim}, "
              f"causal, forward + backward, median of {args.repeats}")
        print(f"one rank, whole sample: {t_whole * 1e3:.2f} ms")
        what = f"CP over {world} ranks (slowest rank)" if world > 1 else "CP path on 1 rank (two calls; no CP measured)"
        print(f"{what}: {float(t_cp) * 1e3:.2f} ms; speedup {t_whole / float(t_cp):.3f}x")
        print("max |CP - one rank| / max |one rank|: out %.2e, dq %.2e, dk %.2e, dv %.2e" % tuple(errors))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
