"""The cost of splitting one document's attention over CP ranks, on one GPU: every variant's
per-rank kernel work (the varlen kernel calls and LSE merges a rank runs, with the K/V blocks it
would receive already in memory), summed over the ranks, against the one-process kernel on the
same document, forward + backward, in the same run; and the variant's result against the
one-process result (bf16).

    bash bench/distributed/cp_split_gpu.sh            # builds the extension, then runs this
    python bench/distributed/cp_split_cost.py --length 65536 --cp 2,4,8

No communication is timed (that is what a multi-GPU run adds); this isolates the kernels' cost of
cutting the document: smaller calls, the ring's partial blocks and merges, Ulysses' heads / CP.
The one-process call is timed again beside every row (a long run heats the GPU and lowers its
clock, so a peer timed once at the start flatters it), and --profile prints where each variant's
GPU time goes, by kernel.
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


def kernel_times(fn) -> dict:
    """GPU time (ms) of each kernel name while fn runs once (on CPU: each op's own CPU time)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    gpu = torch.cuda.is_available()
    sync()
    with profile(activities=[ProfilerActivity.CUDA if gpu else ProfilerActivity.CPU]) as prof:
        fn()
        sync()
    times = {}
    if gpu:
        for event in prof.events():
            if event.device_type == DeviceType.CUDA:
                times[event.name] = times.get(event.name, 0.0) + event.time_range.elapsed_us() / 1e3
    else:
        for event in prof.key_averages():
            times[event.key] = event.self_cpu_time_total / 1e3
    return times


def print_profile(label: str, times: dict, top: int = 8) -> None:
    total = sum(times.values())
    print(f"\n{label}: {total:.2f} ms of GPU time in kernels")
    for name, ms in sorted(times.items(), key=lambda kv: -kv[1])[:top]:
        print(f"  {ms:8.2f} ms {100 * ms / total:5.1f}%  {name[:110]}")


class ElementwiseMerged(Merged):
    """The merge as separate torch ops (varpack's before merge_partial): the peer of the ring's
    fused merge in the same run."""

    def __init__(self, q):
        super().__init__(q)
        self.covered = []

    def add(self, q0, q1, o, l):
        l = torch.where(l == float("inf"), float("-inf"), l)
        if not any(a < q1 and q0 < b for a, b in self.covered):
            self.out[q0:q1] = o
            self.lse[:, q0:q1] = l
        else:
            old_lse, old_out = self.lse[:, q0:q1], self.out[q0:q1]
            new = torch.logaddexp(old_lse, l)
            base = torch.where(torch.isinf(new), 0.0, new)
            w_old = torch.exp(old_lse - base).transpose(0, 1).unsqueeze(-1)
            w_new = torch.exp(l - base).transpose(0, 1).unsqueeze(-1)
            self.out[q0:q1] = old_out * w_old + o.float() * w_new
            self.lse[:, q0:q1] = new
        self.covered.append((q0, q1))


def rank_work(ql, dl, mine, sources, scale, keep, merge=Merged):
    """One rank's forward + backward kernel work: its queries ql (pieces `mine`, already local as
    on a CP rank) against the K/V of `sources` (a list of (pieces, k, v) buffers), merged; the
    backward from the merged result."""
    merged = merge(ql)
    for pieces, kb, vb in sources:
        attend(ql, kb, vb, plan_calls(mine, pieces, -1, 0), scale, 0.0, merged)
    out, lse = merged.result(ql.dtype)
    dq = torch.zeros(ql.shape, dtype=torch.float32, device=ql.device)
    for pieces, kb, vb in sources:
        dk = torch.zeros(kb.shape, dtype=torch.float32, device=ql.device)
        dv = torch.zeros(vb.shape, dtype=torch.float32, device=ql.device)
        attend_backward(dl, ql, kb, vb, out, lse, plan_calls(mine, pieces, -1, 0), scale, 0.0, False, dq, dk, dv)
    if keep is not None:
        keep.append(out)


def variant_sources(layout, variant, k, v):
    cp = layout.cp
    if variant == "ring":
        return [[(layout.pieces[s], layout.shard(k, s), layout.shard(v, s)) for s in range(cp)]] * cp
    _, pieces = canonical(layout, tuple(range(cp)), max(layout.tokens))
    return [[(pieces, k, v)]] * cp  # allgather: the row in order, as the gather + reorder gives it


def block_costs(q, k, v, dout, scale, repeats) -> None:
    """The varlen kernels' time per visible score on the ring's block shapes against the whole
    causal document: where splitting costs, by direction."""
    n = q.shape[0]
    shapes = [(n, n, True)] + [(m, c, False) for m, c in ((n // 8, n // 16), (n // 16, n // 8), (n // 4, n // 8),
                                                           (n // 8, n // 4), (n // 4, n // 4), (n // 2, n // 2))]
    print("\n| block (queries x keys) | forward ms | backward ms | forward / score vs whole | backward / score vs whole |")
    print("|---|---|---|---|---|")
    base = None
    for m, c, causal in shapes:
        cu_q = torch.tensor([0, m], dtype=torch.int32, device=q.device)
        cu_k = torch.tensor([0, c], dtype=torch.int32, device=q.device)
        args = (q[:m], k[:c], v[:c], cu_q, cu_k, m, c, scale, causal, -1, 0 if causal else -1, 0.0)
        out, lse = torch.ops.varpack.varlen_fwd(*args)
        t_fwd = timed(lambda: torch.ops.varpack.varlen_fwd(*args), repeats)
        t_bwd = timed(lambda: torch.ops.varpack.varlen_bwd(dout[:m], q[:m], k[:c], v[:c], out, lse, cu_q, cu_k, m, c,
                                                          scale, causal, -1, 0 if causal else -1, 0.0, False), repeats)
        scores = m * (m + 1) / 2 if causal else m * c
        per = (t_fwd / scores, t_bwd / scores)
        base = base or per
        name = f"{m} x {c}, {'causal' if causal else 'no mask'}"
        print(f"| {name} | {t_fwd * 1e3:.2f} | {t_bwd * 1e3:.2f} | {per[0] / base[0]:.3f} | {per[1] / base[1]:.3f} |",
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--length", type=int, default=65536)
    parser.add_argument("--cp", default="2,4,8")
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="print each ring degree's GPU time by kernel")
    parser.add_argument("--blocks", action="store_true", help="time the kernels on the ring's block shapes")
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
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    print(f"{name}, bf16, one causal document of {n} tokens, {args.heads}/{args.kv_heads} "
          f"heads x {d}, forward + backward, median of {args.repeats}; the one-process call "
          "timed beside each row\n")
    print("| variant | cp | kernel calls a direction | sum over ranks ms | one process ms | / one process | "
          "slowest rank ms | max abs err out |")
    print("|---|---|---|---|---|---|---|---|")
    profiles = []
    for cp in (int(c) for c in args.cp.split(",")):
        layout = cp_layout([0, n], cp, owner=[SPLIT])
        for variant in ("allgather", "ring", "ring, elementwise merge", "ulysses"):
            works, outs, calls = [], [], 0
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
                    sources = variant_sources(layout, variant.split(",")[0], k, v)[rank]
                    calls += sum(len(plan_calls(layout.pieces[rank], pieces, -1, 0)) for pieces, _, _ in sources)
                    merge = ElementwiseMerged if "elementwise" in variant else Merged

                    local = (layout.shard(q, rank), layout.shard(dout, rank), layout.pieces[rank])

                    def work(local=local, sources=sources, keep=None, merge=merge):
                        rank_work(*local, sources, scale, keep, merge)
                works.append(work)
            t_whole = timed(whole, args.repeats)
            per_rank = [timed(work, args.repeats) for work in works]
            for work in works:
                work(keep=outs)
            if variant == "ulysses":
                got = torch.cat(outs, dim=1).float()
            else:
                got = layout.unshard(outs).float()
            err = float((got - reference).abs().max())
            total = sum(per_rank)
            print(f"| {variant} | {cp} | {calls} | {total * 1e3:.2f} | {t_whole * 1e3:.2f} | {total / t_whole:.3f} | "
                  f"{max(per_rank) * 1e3:.2f} | {err:.2e} |", flush=True)
            if args.profile and variant == "ring":
                profiles.append((f"ring, cp {cp}, all ranks", kernel_times(lambda: [w() for w in works])))
    if args.blocks:
        block_costs(q, k, v, dout, scale, args.repeats)
    if args.profile:
        print_profile("one process, one call", kernel_times(whole))
        for label, times in profiles:
            print_profile(label, times)


if __name__ == "__main__":
    main()
