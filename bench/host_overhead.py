"""Host time per attention call: what a training loop pays on the CPU before a kernel is queued.

With tiny inputs (4 sequences of 4 tokens, 2 heads x 64) the kernels take next to nothing, so the
time per call is the host's: Python argument handling, the dispatcher, autograd, the launches.
Timed in the same process, one after the other, median of --rounds rounds of --calls calls each:
- varpack.flash_attn_varlen_func (the library's entry point: varpack::varlen_attn, autograd in C++);
- torch.ops.varpack.varlen_fwd called directly (the same C++ autograd, without
  flash_attn_varlen_func's Python argument handling; until 2026-12-02 its autograd was registered
  in Python, and flash_attn_varlen_func wrapped it in a second, Python autograd.Function);
- torch's scaled_dot_product_attention on the same tokens as one padded batch (a native op: the
  floor of a torch call).
Forward under torch.no_grad(), and forward + backward. Run: python bench/host_overhead.py
[--device cuda] (on a GPU it waits for the device once per round, so queued kernels count only if
they, not the host, are the bottleneck).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import varpack


def per_call_us(fn, calls, rounds, device):
    """Median over rounds of the wall time per call of fn, in microseconds."""
    for _ in range(50):
        fn()
    times = []
    for _ in range(rounds):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--calls", type=int, default=2000, help="calls per round")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(1)  # the kernels' own threading is not what is measured
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    seqs, n, heads, d = 4, 4, 2, 64
    total = seqs * n

    def leaf(shape):
        return torch.randn(shape, device=args.device, dtype=dtype, requires_grad=True)

    q, k, v = (leaf((total, heads, d)) for _ in range(3))
    cu = torch.arange(0, total + 1, n, device=args.device, dtype=torch.int32)
    qp, kp, vp = (leaf((seqs, heads, n, d)) for _ in range(3))
    scale = d ** -0.5

    paths = {
        "varpack.flash_attn_varlen_func": lambda: varpack.flash_attn_varlen_func(q, k, v, cu, cu, n, n, causal=True),
        "torch.ops.varpack.varlen_fwd (the operator)":
            lambda: torch.ops.varpack.varlen_fwd(q, k, v, cu, cu, n, n, scale, True, -1, -1, 0.0)[0],
        "torch SDPA, padded (native op)": lambda: F.scaled_dot_product_attention(qp, kp, vp, is_causal=True),
    }
    print(f"device {args.device}, torch {torch.__version__}, {args.rounds} rounds x {args.calls} calls, "
          f"{seqs} x {n} tokens, {heads} heads x {d}")
    print(f"{'path':48s} {'forward us':>11s} {'fwd+bwd us':>11s}")
    for name, fwd in paths.items():
        with torch.no_grad():
            forward = per_call_us(fwd, args.calls, args.rounds, args.device)
        both = per_call_us(lambda: fwd().sum().backward(), args.calls // 4, args.rounds, args.device)
        print(f"{name:48s} {forward:11.1f} {both:11.1f}")


if __name__ == "__main__":
    main()
