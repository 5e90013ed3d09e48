"""How much of the Hopper forward's time a launch order loses to its tail, by simulation.

The GPU starts a launch's blocks in index order, each on the first multiprocessor that frees up
(one block per multiprocessor: the forward's blocks fill one). This replays that greedy schedule
on 132 multiprocessors with a block's time = heads x (key tiles + a per-head overhead) + a
per-block overhead (in key-tile units), for the orders of src/attn/cuda/tile_bounds.cuh
(LaunchOrder): by sequence (the library's), by rank over all sequences, and by chunks of sequences.
It prints the makespan over the ideal (total work / 132); 1.068 means 6.8% lost to the tail.
It models neither L2 nor clocks: by rank over all sequences measured slower on the H200 than by
sequence (bench/results/cuda.md), which this model cannot show.

Run: python3 bench/cuda/simulate_launch_order.py
"""
import heapq
import random

MULTIPROCESSORS = 132
BLOCK = 128  # query and key tile rows (head dim 128)


def padded_rows(rows, row, rate, seed=7):
    """The lengths of bench_problem.h's padded_rows (uniform around the mean, then nudged)."""
    rng = random.Random(seed)
    mean = row * (1 - rate)
    lengths = [round(rng.uniform(max(1.0, 2 * mean - row), min(row, 2 * mean))) for _ in range(rows)]
    target, total, i = round(rows * row * (1 - rate)), sum(lengths), 0
    while total != target:
        step = 1 if total < target else -1
        j = i % rows
        if 1 <= lengths[j] + step <= row:
            lengths[j] += step
            total += step
        i += 1
    return lengths


def makespan(durations):
    free_at = [0.0] * MULTIPROCESSORS
    for d in durations:
        heapq.heappush(free_at, heapq.heappop(free_at) + d)
    return max(free_at)


def orders(lengths, heads=16, heads_per_block=4, chunk=4, block_overhead=0.3, head_overhead=0.3):
    tiles = [(n + BLOCK - 1) // BLOCK for n in lengths]

    def duration(b, k):  # causal: query tile k of sequence b sees k + 1 key tiles (at most)
        key_tiles = (min((k + 1) * BLOCK, lengths[b]) + BLOCK - 1) // BLOCK
        return block_overhead + heads_per_block * (key_tiles + head_overhead)

    groups = heads // heads_per_block
    ranks = max(tiles)
    by_sequence = [duration(b, k) for _ in range(groups) for b in reversed(range(len(lengths)))
                   for k in reversed(range(tiles[b]))]
    by_rank = [duration(b, ranks - 1 - r) for r in range(ranks) for _ in range(groups)
               for b in range(len(lengths)) if ranks - 1 - r < tiles[b]]
    by_chunks = [duration(b, ranks - 1 - r) for _ in range(groups)
                 for start in range(0, len(lengths), chunk) for r in range(ranks)
                 for b in range(start, min(start + chunk, len(lengths))) if ranks - 1 - r < tiles[b]]
    ideal = sum(by_sequence) / MULTIPROCESSORS
    return {name: makespan(d) / ideal
            for name, d in (("by sequence", by_sequence), ("by rank", by_rank), ("by chunks", by_chunks))}


def main():
    cases = [("64 x 1k", [1024] * 64, 16), ("16 x 4k", [4096] * 16, 4), ("4 x 16k", [16384] * 4, 1)]
    cases += [(f"16 x 4096, {int(rate * 100)}% padding", padded_rows(16, 4096, rate), 4)
              for rate in (0.03, 0.10, 0.25, 0.50)]
    for name, lengths, chunk in cases:
        for heads_per_block in (1, 2, 4):
            result = orders(lengths, heads_per_block=heads_per_block, chunk=chunk)
            print(f"{name:26} {heads_per_block} heads/block, chunks of {chunk:2}: " +
                  "  ".join(f"{k} {v:.3f}" for k, v in result.items()))


if __name__ == "__main__":
    main()
