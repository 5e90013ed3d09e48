"""The backward timed two ways, for varpack and cuDNN's padded SDPA in one process: as the peer
table derives it (forward+backward time - forward time, bench_attention_gpu.py) and alone (the
autograd graph of one forward kept, torch.autograd.grad over it repeated). A difference between the
two is time the derivation charges to the backward that the backward's kernels do not take (the
forward recording its graph, allocations), and it would move every peer's figure, not only
varpack's. bf16, 16 heads x 128, causal; the peer table's 64 x 1k and 16 x 4k points and its
median_ms.

Run: python bench/cuda/backward_alone.py [--reps 20]
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_attention_gpu import DEV, DT, H, Point, median_ms  # noqa: E402

import varpack  # noqa: E402


def timings(fn, inputs, dout, reps):
    """(forward ms, forward+backward ms, backward alone ms) of out = fn(*inputs)."""
    with torch.no_grad():
        fwd = median_ms(lambda: fn(*inputs), reps)

    def step():
        for t in inputs:
            t.grad = None
        fn(*inputs).backward(dout)

    both = median_ms(step, reps)
    out = fn(*inputs)
    alone = median_ms(lambda: torch.autograd.grad(out, inputs, dout, retain_graph=True), reps)
    return fwd, both, alone


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}")
    print("| point | implementation | forward ms | fwd+bwd - fwd ms (TFLOP/s) "
          "| backward alone ms (TFLOP/s) |")
    print("|---|---|---|---|---|")
    for pt in (Point("64 x 1k", [1024] * 64, 1024), Point("16 x 4k", [4096] * 16, 4096)):
        total, n, b = sum(pt.lens), pt.row, len(pt.lens)
        cu = torch.arange(0, total + 1, n, dtype=torch.int32, device=DEV)
        q, k, v = (torch.randn(total, H, pt.d, device=DEV, dtype=DT, requires_grad=True)
                   for _ in range(3))
        dout = torch.randn(total, H, pt.d, device=DEV, dtype=DT)
        qp, kp, vp = (torch.randn(b, H, n, pt.d, device=DEV, dtype=DT, requires_grad=True)
                      for _ in range(3))
        dp = torch.randn(b, H, n, pt.d, device=DEV, dtype=DT)
        results = {"varpack": timings(lambda q, k, v: varpack.flash_attn_varlen_func(
            q, k, v, cu, cu, n, n, causal=True), (q, k, v), dout, args.reps)}
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            results["cuDNN SDPA padded"] = timings(
                lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                (qp, kp, vp), dp, args.reps)
        bwd_flops = 2.5 * pt.flops()
        for name, (fwd, both, alone) in results.items():
            derived = both - fwd
            print(f"| {pt.name} | {name} | {fwd:.3f} | {derived:.3f} ({bwd_flops / derived / 1e9:.0f}) "
                  f"| {alone:.3f} ({bwd_flops / alone / 1e9:.0f}) |")
        del q, k, v, dout, qp, kp, vp, dp


if __name__ == "__main__":
    main()
