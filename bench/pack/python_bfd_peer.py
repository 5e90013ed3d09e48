"""The Python peer for the packing benchmark: best-fit-decreasing over a segment tree of free
space, the approach Hugging Face TRL's packing takes ("bfd" strategy), written here from its
description (not copied): lengths sorted longest first (numpy), a max segment tree whose leaf s
is s while some row has exactly s tokens free, and a dict from free space to the rows that have
it. Each sample walks the tree to the smallest free space >= its length (a new row when none).

    python bench/pack/python_bfd_peer.py LENGTHS.int64 CAPACITY      # prints a JSON summary

bench/pack/run_pack_bench.py imports it and runs it on the same lengths as the C++ packers.
"""
import json
import sys
import time

import numpy as np


class FreeSpaceTree:
    """Max segment tree over free-space values 0..capacity."""

    def __init__(self, capacity):
        size = 1
        while size < capacity + 1:
            size *= 2
        self.size = size
        self.tree = [0] * (2 * size)

    def set(self, space, present):
        node = self.size + space
        self.tree[node] = space if present else 0
        node //= 2
        while node:
            best = max(self.tree[2 * node], self.tree[2 * node + 1])
            if self.tree[node] == best:
                break
            self.tree[node] = best
            node //= 2

    def smallest_at_least(self, need):
        """The smallest present free space >= need (leaves hold their own index)."""
        tree = self.tree
        if tree[1] < need:
            return -1
        node = 1
        size = self.size
        while node < size:
            node *= 2
            if tree[node] < need:
                node += 1
        return node - size


def pack_bfd(lengths, capacity):
    """Rows as lists of sample indices, best-fit-decreasing."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.size and (lengths.min() < 0 or lengths.max() > capacity):
        raise ValueError(f"lengths must lie in [0, {capacity}]")
    order = np.argsort(-lengths, kind="stable").tolist()
    sizes = lengths.tolist()
    tree = FreeSpaceTree(capacity)
    rows_by_space = {}
    rows = []
    for sample in order:
        need = sizes[sample]
        if need == 0:
            continue
        space = tree.smallest_at_least(need)
        if space < 0:
            rows.append([sample])
            row, left = len(rows) - 1, capacity - need
        else:
            bucket = rows_by_space[space]
            row = bucket.pop()
            if not bucket:
                tree.set(space, False)
            rows[row].append(sample)
            left = space - need
        if left > 0:
            bucket = rows_by_space.setdefault(left, [])
            if not bucket:
                tree.set(left, True)
            bucket.append(row)
    return rows


def run(lengths, capacity):
    """Packs and checks; returns a summary with wall and CPU seconds."""
    wall0, cpu0 = time.perf_counter(), time.process_time()
    rows = pack_bfd(lengths, capacity)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    lengths = np.asarray(lengths, dtype=np.int64)
    placed = sorted(s for row in rows for s in row)
    expected = np.flatnonzero(lengths > 0).tolist()
    if placed != expected:
        raise AssertionError("the Python peer lost or duplicated a sample")
    if any(int(lengths[row].sum()) > capacity for row in rows):
        raise AssertionError("the Python peer overfilled a row")
    tokens = int(lengths.sum())
    return {
        "samples": int(lengths.size),
        "capacity": capacity,
        "rows": len(rows),
        "lower_bound_rows": -(-tokens // capacity),
        "seconds": wall,
        "cpu_seconds": cpu,
        "samples_per_second": lengths.size / wall,
        "cpu_samples_per_second": lengths.size / cpu,
    }


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    print(json.dumps(run(np.fromfile(sys.argv[1], dtype=np.int64), int(sys.argv[2])), indent=1))
