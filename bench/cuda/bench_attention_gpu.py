"""varpack's CUDA varlen attention against what users run today, in one process on one GPU.

Peers: torch.nn.attention.varlen.varlen_attn (FlashAttention-2 inside torch), SDPA with the cuDNN
backend and with the flash backend on the padded batch, and FlexAttention with a document mask on the
packed tokens. bf16, 16 heads x 128, causal. Points: 64k tokens as 64 x 1k, 16 x 4k, 4 x 16k, and
16 rows of 4096 at padding rates 3..90% exactly; then 16 x 4k at head dims 64, 96 and 256 (no
FlexAttention there: each new shape costs a compilation); then the options at full size:
grouped-query attention (16 q heads on 4 kv heads, K/V never copied), a sliding window of 2048
keys at 4 x 16k, and a score softcap of 30; a peer that lacks an option is left out of that
point. At 16 x 4k varpack's deterministic backward is timed too ("varpack deterministic", not a
peer). Times are medians of CUDA-event timings after warm-up, with every repetition queued before
the host waits (as in training, the host's per-call time is hidden; --sync-each-rep counts it, as
this script did until 2026-12-01). Every implementation of a point is timed once per round, in
turn, for --rounds rounds (5), and the table keeps the median of its rounds: the H200 runs at its
power cap in these kernels and its clock moves from second to second, so one timing of each, one
after the other, put varpack's d256 forward at 1.02x-1.22x cuDNN's from one table to the next,
and within one call its five rounds read 3.37-4.20 ms (2026-12-02). Useful TFLOP/s counts valid
tokens only: 4*H*D*sum(len^2)/2 forward (with a window: 4*H*D times the visible pairs), 2.5x that
backward (backward time = forward+backward time - forward time).

Run: python bench/cuda/bench_attention_gpu.py [--out table.md] [--reps 20] [--no-flex]
[--sync-each-rep] [--rounds 5] [--only "64 x 1k,d256"]
"""

from __future__ import annotations

import argparse
import inspect
import math
import os
import random
import statistics
import sys
from dataclasses import dataclass

import torch
import torch.nn.functional as F

import varpack

H = 16
DT = torch.bfloat16
DEV = "cuda"


def median_ms(fn, reps, warmup=3, sync_each=False, min_window_ms=20.0):
    """Median GPU time of fn() between CUDA events. By default the host queues every repetition
    before waiting, as a training loop does, so the host's own time per call (Python, argument
    checks, launches) is hidden behind the previous call's kernels; sync_each waits after each one,
    so that time counts too. At least reps repetitions, more for a short call, until they span about
    min_window_ms: 20 repetitions of a 0.1 ms call span 2 ms, which one stall of the host or the GPU
    can cover (2026-12-02, the 90% padding point: a forward median of 0.538 ms in one table; 0.097
    ms in the next table, 0.097-0.112 ms in 24 medians of the same call timed alone in between)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    fn()
    b.record()
    b.synchronize()
    reps = max(reps, min(1000, math.ceil(min_window_ms / max(a.elapsed_time(b), 1e-3))))
    pairs = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        if sync_each:
            b.synchronize()
        pairs.append((a, b))
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in pairs)


def padded_lengths(rows, row, rate, seed):
    """rows lengths in [1, row] (uniform around the mean, seeded) nudged one token at a time until
    they fill exactly round(rows * row * (1 - rate)) tokens, so the padding rate is the one named."""
    rng = random.Random(seed)
    mean = row * (1 - rate)
    lo, hi = max(1.0, 2 * mean - row), min(float(row), 2 * mean)
    lens = [int(round(rng.uniform(lo, hi))) for _ in range(rows)]
    target = round(rows * row * (1 - rate))
    i = 0
    while sum(lens) != target:
        step = 1 if sum(lens) < target else -1
        if 1 <= lens[i % rows] + step <= row:
            lens[i % rows] += step
        i += 1
    return lens


@dataclass(frozen=True)
class Point:
    name: str
    lens: list
    row: int  # padded row length
    d: int = 128
    kv_heads: int = H
    window: int = -1  # keys left of the diagonal a query sees (-1: all)
    softcap: float = 0.0

    def flops(self):
        """Forward FLOPs: 4*H*d per visible (query, key) pair; causal without a window counted as
        len^2/2, as every table since 2026-11-30 has."""
        if self.window < 0:
            return sum(4 * H * self.d * n * n / 2 for n in self.lens)
        w = self.window + 1  # keys a query sees once it is past the first w
        pairs = sum(n * (n + 1) // 2 if n <= w else w * (w + 1) // 2 + (n - w) * w for n in self.lens)
        return 4 * H * self.d * pairs


def points():
    pts = [Point("64 x 1k", [1024] * 64, 1024), Point("16 x 4k", [4096] * 16, 4096),
           Point("4 x 16k", [16384] * 4, 16384)]
    for rate in (0.03, 0.10, 0.25, 0.50, 0.75, 0.90):
        lens = padded_lengths(16, 4096, rate, seed=7)
        real = 1 - sum(lens) / (16 * 4096)
        pts.append(Point(f"16x4096 pad {real:.1%}", lens, 4096))
    for d in (64, 96, 256):
        pts.append(Point(f"16 x 4k d{d}", [4096] * 16, 4096, d))
    pts += [Point("16 x 4k GQA 16/4", [4096] * 16, 4096, kv_heads=4),
            Point("4 x 16k window 2048", [16384] * 4, 16384, window=2048),
            Point("16 x 4k softcap 30", [4096] * 16, 4096, softcap=30.0)]
    return pts


def torch_varlen():
    """(q, k, v, cu, max_len, window) -> causal varlen_attn, or None without it. A window needs its
    window_size argument (ValueError without it); a softcap it does not take at all."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    params = inspect.signature(varlen_attn).parameters

    def run(q, k, v, cu, m, window=-1):
        if window >= 0:
            if "window_size" not in params:
                raise ValueError("this torch's varlen_attn takes no window_size")
            return varlen_attn(q, k, v, cu, cu, m, m, window_size=(window, 0))
        if "is_causal" in params:
            return varlen_attn(q, k, v, cu, cu, m, m, is_causal=True)
        return varlen_attn(q, k, v, cu, cu, m, m, window_size=(-1, 0))

    return run


def measure(fn_fwd, inputs, dout, reps, sync_each):
    """(forward ms, forward+backward ms) of out = fn_fwd(*inputs)."""
    with torch.no_grad():
        fwd = median_ms(lambda: fn_fwd(*inputs), reps, sync_each=sync_each)

    def step():
        for t in inputs:
            t.grad = None
        fn_fwd(*inputs).backward(dout)

    both = median_ms(step, reps, sync_each=sync_each)
    return fwd, both


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None, help="write the markdown table here too")
    ap.add_argument("--reps", type=int, default=20,
                    help="timed repetitions per measurement, at least (more for calls under 1 ms)")
    ap.add_argument("--no-flex", action="store_true")
    ap.add_argument("--sync-each-rep", action="store_true",
                    help="wait for each repetition, so the host's time per call counts too")
    ap.add_argument("--rounds", type=int, default=5,
                    help="time every implementation of a point this many times, in turn, and keep "
                         "the median of each one's medians (drift of the GPU's clock evens out)")
    ap.add_argument("--only", default=None,
                    help="only the points whose name holds one of these comma-separated parts")
    args = ap.parse_args()

    from torch.nn.attention import SDPBackend, sdpa_kernel
    varlen_attn = torch_varlen()
    flex = None
    if not args.no_flex:
        try:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
            flex = (torch.compile(flex_attention), create_block_mask)
        except Exception as e:  # noqa: BLE001 - report and go on without the peer
            print(f"FlexAttention unavailable: {e}", file=sys.stderr)

    dev = torch.cuda.get_device_name()
    print(f"device: {dev}; torch {torch.__version__}; varlen_attn: {varlen_attn is not None}")
    rows = []
    for pt in points():
        if args.only and not any(part in pt.name for part in args.only.split(",")):
            continue
        name, lens, row, d = pt.name, pt.lens, pt.row, pt.d
        total = sum(lens)
        flops = pt.flops()
        cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0).tolist()), dtype=torch.int32,
                          device=DEV)
        mx = max(lens)
        q = torch.randn(total, H, d, device=DEV, dtype=DT, requires_grad=True)
        k, v = (torch.randn(total, pt.kv_heads, d, device=DEV, dtype=DT, requires_grad=True)
                for _ in range(2))
        dout = torch.randn(total, H, d, device=DEV, dtype=DT)
        # Every implementation of the point, timed after all are set up: in --rounds rounds, each
        # implementation once per round, so that a drift of the GPU's clock or temperature over
        # the point's time reaches them all alike.
        candidates = []

        def attempt(label, fn, inputs, grad):
            candidates.append((label, fn, inputs, grad))

        window = (pt.window, 0) if pt.window >= 0 else (-1, -1)
        attempt("varpack", lambda q, k, v: varpack.flash_attn_varlen_func(
            q, k, v, cu, cu, mx, mx, causal=True, window_size=window, softcap=pt.softcap),
            (q, k, v), dout)
        if name == "16 x 4k":
            attempt("varpack deterministic", lambda q, k, v: varpack.flash_attn_varlen_func(
                q, k, v, cu, cu, mx, mx, causal=True, deterministic=True), (q, k, v), dout)
        if varlen_attn is not None and pt.softcap == 0:
            attempt("torch varlen (FA2)", lambda q, k, v: varlen_attn(q, k, v, cu, mx, pt.window),
                    (q, k, v), dout)
        # Padded batch: one sequence per row of `row` tokens, [B, H, L, d]; no window or softcap.
        if pt.window < 0 and pt.softcap == 0:
            b = len(lens)
            qp = torch.randn(b, H, row, d, device=DEV, dtype=DT, requires_grad=True)
            kp, vp = (torch.randn(b, pt.kv_heads, row, d, device=DEV, dtype=DT, requires_grad=True)
                      for _ in range(2))
            dp = torch.randn(b, H, row, d, device=DEV, dtype=DT)
            gqa = {"enable_gqa": True} if pt.kv_heads != H else {}
            for label, backend in (("cuDNN SDPA padded", SDPBackend.CUDNN_ATTENTION),
                                   ("FA2 SDPA padded", SDPBackend.FLASH_ATTENTION)):
                def padded_sdpa(q, k, v, backend=backend):
                    with sdpa_kernel(backend):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa)

                attempt(label, padded_sdpa, (qp, kp, vp), dp)
        if flex is not None and d == 128:
            try:
                flex_fn, create_block_mask = flex
                padded_total = (total + 127) // 128 * 128
                doc = torch.full((padded_total,), -1, dtype=torch.int32, device=DEV)
                doc[:total] = torch.repeat_interleave(
                    torch.arange(len(lens), device=DEV, dtype=torch.int32),
                    torch.tensor(lens, device=DEV))
                left = pt.window if pt.window >= 0 else padded_total

                def doc_causal(b_, h_, qi, ki):
                    return (doc[qi] == doc[ki]) & (qi >= ki) & (qi - ki <= left)

                mask = create_block_mask(doc_causal, None, None, padded_total, padded_total,
                                         device=DEV)
                cap = pt.softcap

                def softcap(score, b_, h_, qi, ki):
                    return cap * torch.tanh(score / cap)

                qf = torch.randn(1, H, padded_total, d, device=DEV, dtype=DT, requires_grad=True)
                kf, vf = (torch.randn(1, pt.kv_heads, padded_total, d, device=DEV, dtype=DT,
                                      requires_grad=True) for _ in range(2))
                dfl = torch.randn(1, H, padded_total, d, device=DEV, dtype=DT)
                options = {"block_mask": mask, "enable_gqa": pt.kv_heads != H,
                           "score_mod": softcap if cap > 0 else None}
                attempt("Flex doc mask", lambda q, k, v: flex_fn(q, k, v, **options),
                        (qf, kf, vf), dfl)
            except Exception as e:  # noqa: BLE001
                print(f"Flex failed at {name}: {e}", file=sys.stderr)
        timings = {}
        for round_no in range(args.rounds):
            # Each round starts one implementation later, so that none is always the one timed
            # right after the heaviest (under the H200's power cap the clock moved between 1755
            # and 1980 MHz from second to second, 2026-12-02).
            turn = round_no % len(candidates)
            for label, fn, inputs, grad in candidates[turn:] + candidates[:turn]:
                if round_no > 0 and label not in timings:
                    continue  # it failed in the first round
                # A peer that cannot run this point (an option it lacks, a shape it refuses) is
                # left out.
                try:
                    timing = measure(fn, inputs, grad, args.reps, args.sync_each_rep)
                    timings.setdefault(label, []).append(timing)
                except Exception as e:  # noqa: BLE001 - report and go on with the others
                    print(f"{label} failed at {name}: {type(e).__name__}: {e}", file=sys.stderr)
        res = {label: (statistics.median(f for f, _ in ts), statistics.median(b for _, b in ts))
               for label, ts in timings.items()}
        if args.rounds > 1:  # the spread the medians hide
            for label, ts in timings.items():
                print(f"{name} | {label} | fwd ms by round " + " ".join(f"{f:.3f}" for f, _ in ts)
                      + " | fwd+bwd " + " ".join(f"{b:.3f}" for _, b in ts))
        del candidates
        for peer, (fwd, both) in res.items():
            bwd = both - fwd
            rows.append((name, peer, fwd, flops / fwd / 1e9, bwd, 2.5 * flops / bwd / 1e9,
                         both))
        del q, k, v, dout
        torch.cuda.empty_cache()

    lines = ["| case | implementation | fwd ms | fwd TFLOP/s | bwd ms | bwd TFLOP/s | fwd+bwd ms |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r[0]} | {r[1]} | {r[2]:.3f} | {r[3]:.0f} | {r[4]:.3f} | {r[5]:.0f} | "
                     f"{r[6]:.3f} |")
    # How far varpack is from the fastest peer at each point (ratio of times, > 1 = varpack slower).
    lines += ["", "| case | fastest peer fwd | varpack / it (fwd) | fastest peer fwd+bwd | "
              "varpack / it (fwd+bwd) |", "|---|---|---|---|---|"]
    for name in dict.fromkeys(r[0] for r in rows):
        mine = [r for r in rows if r[0] == name and r[1] == "varpack"]
        peers = [r for r in rows if r[0] == name and not r[1].startswith("varpack")]
        if not mine or not peers:
            continue
        pf = min(peers, key=lambda r: r[2])
        pb = min(peers, key=lambda r: r[6])
        lines.append(f"| {name} | {pf[1]} {pf[2]:.3f} ms | {mine[0][2] / pf[2]:.2f}x | "
                     f"{pb[1]} {pb[6]:.3f} ms | {mine[0][6] / pb[6]:.2f}x |")
    table = "\n".join(lines)
    print(table)
    if args.out:  # whole or not at all: written aside, then renamed over it
        with open(args.out + ".tmp", "w") as f:
            f.write(f"device: {dev}; torch {torch.__version__}; the median of {args.rounds} "
                    f"rounds per implementation and point\n\n{table}\n")
        os.replace(args.out + ".tmp", args.out)


if __name__ == "__main__":
    main()
