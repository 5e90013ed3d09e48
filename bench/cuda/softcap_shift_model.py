#!/usr/bin/env python3
"""How exact softcap's softmax stays without its row maximum (hopper_forward.cuh, SoftcapFixedMax).

With softcap every raw score t is a tanh in [-1, 1], so the forward could take P = 2^(t c) with
c = softcap * log2(e) and no maximum subtracted (P within 2^-92 .. 2^92 for softcap <= 64). This
model compares the output's error against a float64 softmax for both ways, P rounded to bf16 for
O += P V as the kernel does, the row sum in fp32 from P before rounding (the kernel's) or after
(--rounded-sum). Rows alternate between spread scores and a few dominant keys; with the maximum
subtracted a row's largest P is exactly 1 and loses nothing to the rounding, without it it does.

Run: python3 bench/cuda/softcap_shift_model.py [--rounded-sum]
"""
import argparse

import numpy as np


def to_bf16(x):
    """Rounds fp32 values to bf16 (to nearest, ties to even), kept as fp32."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return bits.astype(np.uint32).view(np.float32)


def output_error(raw, v, softcap, subtract_max, rounded_sum):
    c = np.float32(softcap * np.log2(np.e))
    shift = np.float32(raw.max() * c) if subtract_max else np.float32(0)
    p = np.exp2(raw * c - shift).astype(np.float32)
    p_used = to_bf16(p)
    row_sum = (p_used if rounded_sum else p).sum(dtype=np.float32)
    out = (p_used @ v) / row_sum
    ref = np.exp((raw.astype(np.float64) - raw.max()) * softcap)
    ref = ref @ v.astype(np.float64) / ref.sum()
    return float(np.abs(out - ref).max())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounded-sum", action="store_true",
                        help="the row sum from P after its rounding to bf16")
    parser.add_argument("--rows", type=int, default=20, help="rows per softcap")
    parser.add_argument("--keys", type=int, default=4096, help="keys per row")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    for softcap in (10.0, 30.0, 50.0, 64.0):
        worst = {True: 0.0, False: 0.0}
        for row in range(args.rows):
            scale = rng.uniform(0.5, 20.0)
            shift = rng.uniform(0.0, 3.0) * (row % 2)
            raw = np.tanh(rng.standard_normal(args.keys) * scale / softcap - shift)
            raw = raw.astype(np.float32)
            v = to_bf16(rng.standard_normal((args.keys, 64)))
            for subtract_max in worst:
                err = output_error(raw, v, softcap, subtract_max, args.rounded_sum)
                worst[subtract_max] = max(worst[subtract_max], err)
        print(f"softcap {softcap:4.0f}: max|error| with the row maximum {worst[True]:.2e}, "
              f"without {worst[False]:.2e}")


if __name__ == "__main__":
    main()
