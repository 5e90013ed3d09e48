"""Benchmark of the Python packing API against what a Python user has today, in one process.

    .venv/bin/python bench/python/bench_packing_api.py [--samples 1000000] [--repeats 5]

plan:        varpack.plan (C++ best-fit-decreasing behind the binding) on lengths uniform 50..800
             into rows of 4096, vs the report's first-fit-decreasing loop in plain Python (run on
             fewer samples: it is O(samples x rows)), both in samples per second.
build_batch: varpack.build_batch on 8 rows of 4096 tokens from a list of token lists, vs Hugging
             Face's DataCollatorWithFlattening approach (Python list concatenation per sample); and
             on 64 rows from int32 arrays vs a vectorised numpy builder (no loss weights, no pads),
             all in tokens per second. Prints the medians and the ratios.
"""

import argparse
import statistics
import time

import numpy as np
import torch

import varpack


def median_seconds(fn, repeats):
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def python_ffd(lengths, capacity):
    """The report's loop: sort decreasing, put each sample in the first row with room."""
    rows, free = [], []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        for r, room in enumerate(free):
            if lengths[i] <= room:
                rows[r].append(i)
                free[r] -= lengths[i]
                break
        else:
            rows.append([i])
            free.append(capacity - lengths[i])
    return rows


def flattening_collator(samples):
    """Hugging Face DataCollatorWithFlattening's approach: Python lists per sample, then tensors."""
    input_ids, labels, position_ids, cu = [], [], [], [0]
    for ids in samples:
        input_ids += ids
        labels += [-100] + ids[1:]
        position_ids += list(range(len(ids)))
        cu.append(cu[-1] + len(ids))
    return (torch.tensor(input_ids), torch.tensor(labels), torch.tensor(position_ids),
            torch.tensor(cu, dtype=torch.int32))


def numpy_builder(arrays):
    """A vectorised numpy builder of the same tensors: concatenate, then fix labels and positions."""
    lengths = np.array([len(a) for a in arrays])
    cu = np.concatenate([[0], np.cumsum(lengths)])
    input_ids = np.concatenate(arrays).astype(np.int64)
    labels = input_ids.copy()
    labels[cu[:-1][lengths > 0]] = -100
    position_ids = np.arange(cu[-1]) - np.repeat(cu[:-1], lengths)
    return (torch.from_numpy(input_ids), torch.from_numpy(labels), torch.from_numpy(position_ids),
            torch.from_numpy(cu.astype(np.int32)))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--python-samples", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    capacity = 4096

    lengths = rng.integers(50, 801, size=args.samples)
    t_plan = median_seconds(lambda: varpack.plan(lengths, capacity), args.repeats)
    small = lengths[:args.python_samples]
    t_plan_small = median_seconds(lambda: varpack.plan(small, capacity), args.repeats)
    t_python = median_seconds(lambda: python_ffd(small.tolist(), capacity), 1)
    plan = varpack.plan(lengths, capacity)
    print(f"plan {args.samples} samples (bfd): {args.samples / t_plan:,.0f} samples/s, "
          f"gap to lower bound {plan.stats['gap_to_lower_bound']} rows of {plan.stats['rows']}")
    print(f"plan {len(small)} samples: varpack {len(small) / t_plan_small:,.0f} samples/s, "
          f"Python FFD {len(small) / t_python:,.0f} samples/s, ratio {t_python / t_plan_small:,.0f}x")

    token_lists = [rng.integers(0, 32000, size=n).tolist() for n in lengths[:50_000]]
    plan = varpack.plan(lengths[:50_000], capacity)
    rows = (0, 8)
    in_rows = plan.pieces[plan.row_begin[rows[0]]:plan.row_begin[rows[1]], 0].tolist()
    tokens = sum(len(token_lists[i]) for i in in_rows)
    t_build = median_seconds(lambda: varpack.build_batch(plan, token_lists, rows=rows), args.repeats)
    t_flat = median_seconds(lambda: flattening_collator([token_lists[i] for i in in_rows]), args.repeats)
    print(f"build_batch 8 rows of {capacity} ({tokens} tokens, {len(in_rows)} samples): varpack "
          f"{tokens / t_build / 1e6:.1f} M tokens/s ({t_build * 1e3:.2f} ms, torch tensors), "
          f"flattening collator {tokens / t_flat / 1e6:.1f} M tokens/s ({t_flat * 1e3:.2f} ms), "
          f"ratio {t_flat / t_build:.1f}x")

    arrays = [np.asarray(t, dtype=np.int32) for t in token_lists]
    rows = (0, 64)
    in_rows = plan.pieces[plan.row_begin[rows[0]]:plan.row_begin[rows[1]], 0].tolist()
    tokens = sum(len(arrays[i]) for i in in_rows)
    t_build = median_seconds(lambda: varpack.build_batch(plan, arrays, rows=rows), args.repeats)
    t_numpy = median_seconds(lambda: numpy_builder([arrays[i] for i in in_rows]), args.repeats)
    print(f"build_batch 64 rows of {capacity} ({tokens} tokens, {len(in_rows)} samples, int32 arrays): varpack "
          f"{tokens / t_build / 1e6:.1f} M tokens/s ({t_build * 1e3:.2f} ms), vectorised numpy builder "
          f"{tokens / t_numpy / 1e6:.1f} M tokens/s ({t_numpy * 1e3:.2f} ms), ratio {t_numpy / t_build:.2f}x")


if __name__ == "__main__":
    main()
