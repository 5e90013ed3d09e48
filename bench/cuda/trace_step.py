"""Where one forward+backward step of varpack's attention spends its GPU time, kernel by kernel.

bench_attention_gpu.py times the backward as (forward+backward) - forward through torch, and at
16 x 4k that came out ~0.29 ms slower than the standalone benchmark's calls of the same kernels
(on 2026-12-02 this script found no idle time and no extra kernel in the step: the forward runs
slower inside a step than alone; bench/results/cuda.md). This script times the forward and the
step as that benchmark does (an event pair per repetition, every repetition queued before the
host waits, the median), then records the step
with torch.profiler (after a step of profiler warm-up) and prints every CUDA kernel (and memset /
copy) it ran, with its count and mean time, and how long the GPU was busy against the span from
the first kernel's start to the last one's end: a kernel that only the torch path runs, the same
kernels running slower there, or the GPU waiting between them.

With --impl cudnn the same for the peer, SDPA's cuDNN backend on the padded batch (its forward,
dO.O, backward and dQ conversion kernels beside varpack's forward, Delta, backward and dQ
conversion).

Run: python bench/cuda/trace_step.py [--rows 16] [--len 4096] [--d 128] [--steps 20]
[--impl varpack|cudnn]
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile, schedule

import varpack
from bench_attention_gpu import median_ms  # this script's directory is on sys.path


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=16, help="sequences in the batch")
    ap.add_argument("--len", type=int, default=4096, help="tokens per sequence (causal, bf16)")
    ap.add_argument("--d", type=int, default=128, help="head dim: 64, 96, 128 or 256")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--steps", type=int, default=20, help="steps timed, then steps profiled")
    ap.add_argument("--impl", choices=("varpack", "cudnn"), default="varpack",
                    help="cudnn: the peer, SDPA's cuDNN backend on the padded batch (rows x heads "
                         "x len x d), to see its kernels beside varpack's")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("trace_step.py: no CUDA device; it times varpack's GPU kernels (run it on the GPU "
                 "machine, e.g. through scripts/gpu_bench.sh)")

    total = args.rows * args.len
    cu = torch.arange(0, total + 1, args.len, dtype=torch.int32, device="cuda")
    shape = (total, args.heads, args.d) if args.impl == "varpack" else \
        (args.rows, args.heads, args.len, args.d)
    q, k, v = (torch.randn(*shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    dout = torch.randn_like(q)

    def attention():
        if args.impl == "varpack":
            return varpack.flash_attn_varlen_func(q, k, v, cu, cu, args.len, args.len, causal=True)
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def step():
        for t in (q, k, v):
            t.grad = None
        attention().backward(dout)

    # As bench_attention_gpu.py times (its own function): an event pair per repetition, all
    # queued, the median, after warm-up.
    with torch.no_grad():
        forward_ms = median_ms(attention, args.steps)
    step_ms = median_ms(step, args.steps)
    # The profiler's first step pays its own start-up (a ~1 ms gap): recorded steps follow one
    # warm-up step, finished before they start (else its last kernel is counted with them), and
    # the last one's kernels are finished before its prof.step() ends the recording.
    with profile(activities=[ProfilerActivity.CUDA],
                 schedule=schedule(wait=0, warmup=1, active=args.steps, repeat=1)) as prof:
        for i in range(1 + args.steps):
            step()
            if i in (0, args.steps):
                torch.cuda.synchronize()
            prof.step()

    # Device-side events only: kernels, memsets and copies, grouped by name.
    kernels = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                     key=lambda e: e.time_range.start)
    times = defaultdict(list)
    for e in kernels:
        times[e.name].append(e.device_time)  # microseconds
    first_start, last_end = kernels[0].time_range.start, kernels[-1].time_range.end
    print(f"{args.impl}: {args.rows} x {args.len}, d{args.d}, {args.heads} heads: {args.steps} steps")
    print(f"{'count':>6} {'mean us':>10} {'total us/step':>14}  name")
    per_step = 0.0
    for name, ts in sorted(times.items(), key=lambda kv: -sum(kv[1])):
        share = sum(ts) / args.steps
        per_step += share
        print(f"{len(ts):>6} {sum(ts) / len(ts):>10.1f} {share:>14.1f}  {name[:110]}")
    # Where the GPU waited: the longest gaps between one kernel's end and the next one's start.
    gaps = sorted(((b.time_range.start - a.time_range.end, a.name, b.name)
                   for a, b in zip(kernels, kernels[1:])), reverse=True)
    print("longest gaps (us, after -> before):")
    for gap, after, before in gaps[:6]:
        print(f"{gap:>10.1f}  {after[:50]} -> {before[:50]}")
    span = (last_end - first_start) / args.steps
    print(f"the benchmark's method: forward {forward_ms:.3f} ms, step {step_ms:.3f} ms, "
          f"so backward {step_ms - forward_ms:.3f} ms")
    idle = span - per_step
    print(f"per step, profiled: GPU busy {per_step / 1000:.3f} ms of a {span / 1000:.3f} ms span "
          f"(idle {idle / 1000:.3f} ms)")


if __name__ == "__main__":
    main()
