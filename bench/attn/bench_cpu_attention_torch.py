"""varpack's CPU varlen attention against torch's own CPU attention on the padded batch, in one process.

For each padding rate the same tokens run three ways: varpack.flash_attn_varlen_func on the packed
tokens; torch.nn.functional.scaled_dot_product_attention on the padded batch [B, H, L, d] with a
boolean mask (key padding, and causal when asked), the correct padded computation; and the same SDPA
without a mask (is_causal only), the fastest a padded batch can go in torch, with wrong values in
the padding. Times are medians after a warm-up; forward under no_grad, backward = forward+backward
minus forward. Lengths are drawn as in attention_cpu_bench (evenly spread quantiles, shuffled).

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


def median_ms(fn, repeats):
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


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
    print("| padding | varpack fwd ms | torch masked fwd ms | torch unmasked fwd ms | fwd speed-up vs masked "
          "| vs unmasked | varpack bwd ms | torch masked bwd ms | torch unmasked bwd ms | bwd speed-up vs masked "
          "| vs unmasked | max |out diff| |")
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

        def varpack_fwd(grad=False):
            return varpack.flash_attn_varlen_func(q, k, v, cu, cu, max(lengths), max(lengths), causal=a.causal)

        def torch_masked(x, y, z):
            return F.scaled_dot_product_attention(x, y, z, attn_mask=mask)

        def torch_unmasked(x, y, z):
            return F.scaled_dot_product_attention(x, y, z, is_causal=a.causal)

        with torch.no_grad():
            t_vp = median_ms(varpack_fwd, a.repeats)
            t_tm = median_ms(lambda: torch_masked(qp, kp, vp), a.repeats)
            t_tu = median_ms(lambda: torch_unmasked(qp, kp, vp), a.repeats)
            out = varpack_fwd()
            ref = torch_masked(qp, kp, vp).transpose(1, 2)
            diff = max(float((out[int(cu[b]):int(cu[b]) + n] - ref[b, :n]).abs().max()) for b, n in enumerate(lengths))

        def fwd_bwd(fn, inputs, grad):
            xs = [x.detach().requires_grad_() for x in inputs]
            fn(*xs).backward(grad)

        b_vp = median_ms(lambda: fwd_bwd(lambda x, y, z: varpack.flash_attn_varlen_func(
            x, y, z, cu, cu, max(lengths), max(lengths), causal=a.causal), (q, k, v), dout), a.repeats) - t_vp
        b_tm = median_ms(lambda: fwd_bwd(torch_masked, (qp, kp, vp), doutp), a.repeats) - t_tm
        b_tu = median_ms(lambda: fwd_bwd(torch_unmasked, (qp, kp, vp), doutp), a.repeats) - t_tu
        print(f"| {100 * actual:.1f}% | {t_vp:.2f} | {t_tm:.2f} | {t_tu:.2f} | {t_tm / t_vp:.2f}x | {t_tu / t_vp:.2f}x "
              f"| {b_vp:.2f} | {b_tm:.2f} | {b_tu:.2f} | {b_tm / b_vp:.2f}x | {b_tu / b_vp:.2f}x | {diff:.1e} |",
              flush=True)


if __name__ == "__main__":
    main()
