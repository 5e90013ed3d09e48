"""varpack's CPU varlen attention against torch's own CPU attention on the padded batch, in one process.

For each padding rate the same tokens run three ways: varpack.flash_attn_varlen_func on the packed
tokens; torch.nn.functional.scaled_dot_product_attention on the padded batch [B, H, L, d] with a
boolean mask (key padding, and causal when asked), the correct padded computation; and the same SDPA
without a mask (is_causal only), the fastest a padded batch can go in torch, with wrong values in
the padding. Times are medians after a warm-up, wall-clock and CPU; forward under no_grad, backward =
forward+backward minus forward. Lengths are drawn as in attention_cpu_bench (evenly spread quantiles,
shuffled).

    PYTHONPATH=python .venv/bin/python bench/attn/bench_cpu_attention_torch.py [--batch 8] [--seq-len 1024]
        [--heads 8] [--head-dim 64] [--causal] [--threads 0] [--repeats 3]
"""

import argparse
import platform
import random
import statistics
import time

import torch
import torch.nn.functional as F

import varpack

RATES = (0.03, 0.10, 0.25, 0.50, 0.75, 0.90)


def draw_lengths(batch, seq_len, rate, rng):
    mean = (1 - rate) * seq_len
    lo, hi = (seq_len - 2 * rate * seq_len, seq_len) if rate <= 0.5 else (1, 2 * mean - 1)
    lengths = [int(min(max(round(lo + (hi - lo) * (i + 0.5) / batch), 1), seq_len)) for i in range(batch)]
    rng.shuffle(lengths)
    return lengths


def measure(fns, repeats):
    """(wall ms, CPU ms) medians of each function. They run alternately, so a burst of outside load
    hits every peer alike; CPU time (all threads of the process) is the work, which load does not inflate."""
    for fn in fns:
        fn()  # warm-up
    wall, cpu = [[] for _ in fns], [[] for _ in fns]
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            c0, t0 = time.process_time(), time.perf_counter()
            fn()
            wall[i].append((time.perf_counter() - t0) * 1e3)
            cpu[i].append((time.process_time() - c0) * 1e3)
    return [(statistics.median(w), statistics.median(c)) for w, c in zip(wall, cpu)]


def ratio(peer, ours):
    return f"{peer[0] / ours[0]:.1f}x / {peer[1] / ours[1]:.1f}x"


def ms(t):
    return f"{t[0]:.1f} / {t[1]:.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (varpack uses the same); 0 = default")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    B, L, H, D = a.batch, a.seq_len, a.heads, a.head_dim
    print(f"# torch {torch.__version__}, {platform.processor() or platform.machine()}, {torch.get_num_threads()} "
          f"threads; batch {B} x L {L}, heads {H}, head_dim {D}, {'causal' if a.causal else 'not causal'}, "
          f"float32, median of {a.repeats}\n")
    print("Times are medians, wall-clock / CPU (all threads); speed-up = torch time / varpack time on each. "
          "Backward = (forward + backward) - forward.\n")
    print("| padding | varpack fwd ms | torch masked fwd ms | torch unmasked fwd ms | fwd speed-up vs masked "
          "| vs unmasked | varpack bwd ms | torch masked bwd ms | torch unmasked bwd ms | bwd speed-up vs masked "
          "| vs unmasked | max abs out diff |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for rate in RATES:
        lengths = draw_lengths(B, L, rate, rng)
        actual = 1 - sum(lengths) / (B * L)
        total = sum(lengths)
        cu = torch.tensor([0] + list(torch.tensor(lengths).cumsum(0)), dtype=torch.int32)
        q, k, v, dout = (torch.randn(total, H, D) for _ in range(4))
        # The padded batch [B, H, L, d] holds the same tokens at the start of each row.
        qp, kp, vp, doutp = (torch.zeros(B, L, H, D) for _ in range(4))
        for b, n in enumerate(lengths):
            s = int(cu[b])
            for src, dst in ((q, qp), (k, kp), (v, vp), (dout, doutp)):
                dst[b, :n] = src[s:s + n]
        qp, kp, vp, doutp = (x.transpose(1, 2).contiguous() for x in (qp, kp, vp, doutp))
        pos = torch.arange(L)
        mask = (pos[None, None, :] < torch.tensor(lengths)[:, None, None]).expand(B, L, L)
        if a.causal:
            mask = mask & (pos[None, :, None] >= pos[None, None, :])
        mask = mask[:, None]  # [B, 1, L, L]; padded query rows see the real keys, so no row is empty

        def varpack_fwd():
            return varpack.flash_attn_varlen_func(q, k, v, cu, cu, max(lengths), max(lengths), causal=a.causal)

        def torch_masked(x, y, z):
            return F.scaled_dot_product_attention(x, y, z, attn_mask=mask)

        def torch_unmasked(x, y, z):
            return F.scaled_dot_product_attention(x, y, z, is_causal=a.causal)

        with torch.no_grad():
            t_vp, t_tm, t_tu = measure([varpack_fwd, lambda: torch_masked(qp, kp, vp),
                                        lambda: torch_unmasked(qp, kp, vp)], a.repeats)
            out = varpack_fwd()
            ref = torch_masked(qp, kp, vp).transpose(1, 2)
            diff = max(float((out[int(cu[b]):int(cu[b]) + n] - ref[b, :n]).abs().max()) for b, n in enumerate(lengths))

        def fwd_bwd(fn, inputs, grad):
            xs = [x.detach().requires_grad_() for x in inputs]
            fn(*xs).backward(grad)

        def varpack_op(x, y, z):
            return varpack.flash_attn_varlen_func(x, y, z, cu, cu, max(lengths), max(lengths), causal=a.causal)

        fb = measure([lambda: fwd_bwd(varpack_op, (q, k, v), dout),
                      lambda: fwd_bwd(torch_masked, (qp, kp, vp), doutp),
                      lambda: fwd_bwd(torch_unmasked, (qp, kp, vp), doutp)], a.repeats)
        b_vp, b_tm, b_tu = ((t[0] - f[0], t[1] - f[1]) for t, f in zip(fb, (t_vp, t_tm, t_tu)))
        print(f"| {100 * actual:.1f}% | {ms(t_vp)} | {ms(t_tm)} | {ms(t_tu)} | {ratio(t_tm, t_vp)} "
              f"| {ratio(t_tu, t_vp)} | {ms(b_vp)} | {ms(b_tm)} | {ms(b_tu)} | {ratio(b_tm, b_vp)} | {ratio(b_tu, b_vp)} | {diff:.0e} |",
              flush=True)


if __name__ == "__main__":
    main()
