"""Which context-parallel variant to run: predicted forward + backward time per rank of each, from
the layout, the model's attention shape, the kernel's throughput and the links' bandwidth.

compute: the slowest rank's visible (query, key) pairs x 4 * heads * d flops (forward; the
    backward costs 2.5x that), at `flops` per second.
allgather: (CP-1) rank buffers of K/V gathered in the forward and again in the backward, dK/dV
    (fp32) reduce-scattered; nothing overlaps, all of it is exposed.
ring: the same K/V bytes in CP-1 point-to-point steps (backward: K/V and the fp32 dK/dV
    accumulator, CP steps), each overlapped with one step's compute (CP steps of compute / CP):
    exposed is what a step's transfer takes beyond its compute, plus the first/last transfer.
ulysses: all-to-all of q, k, v and out in the forward and q, out, dout, k, v, dq, dk, dv in the
    backward, (u-1)/u of each rank's rows; exposed. Needs heads % u == 0 and kv heads % u == 0 or
    u % kv heads == 0. With ring degree p = CP / u > 1 (hybrid), the all-to-all runs at
    `intra_bandwidth` (u consecutive ranks: one node) and the ring at `bandwidth`.
Splitting: a ring step after the first is one more kernel call per direction whose partial output
    is merged into the running fp32 output and whose dq, dK and dV are added into fp32 accumulators,
    ~20 bytes per q element and per K/V element per step at `memory_bandwidth` (split_s; ring and
    hybrid). Not modelled: the backward kernel's loss on a ring's smaller blocks (+15% at 8192 x 4096
    on an H100, bench/results/distributed.md).
Every message also pays `latency`. The rule picks the least predicted time; a variant within 1%
of it is taken first in the order allgather (exact: no LSE merge), ring, ulysses, hybrid. Defaults: 45 GB/s per rank across nodes (InfiniBand), 300 GB/s within one
(NVLink), 20 us a message, 300 Tflop/s of attention kernel, 2.3 TB/s of device memory (what the
ring's accumulation reached on an H100).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .cp_layout import CPLayout

__all__ = ["VariantCost", "choose_variant", "pairs", "variant_costs"]

BACKWARD_FACTOR = 2.5  # FlashAttention-2's backward runs ~2.5x its forward's flops


@dataclass(frozen=True)
class VariantCost:
    variant: str
    ulysses: int
    compute_s: float  # the rank's share of the attention kernels' work
    comm_s: float     # all bytes moved per rank / bandwidth (+ latency), forward + backward
    exposed_s: float  # the part of comm_s not hidden behind compute
    bytes: float      # bytes received per rank, forward + backward
    split_s: float = 0.0  # merging and accumulating the ring's per-block results

    @property
    def overhead_s(self) -> float:
        """What the variant adds to the rank's share of the kernels' work."""
        return self.split_s + self.exposed_s

    @property
    def total_s(self) -> float:
        return self.compute_s + self.overhead_s


def pairs(start: int, end: int, length: int, causal: bool, window: tuple) -> int:
    """(query, key) pairs that queries [start, end) of a document of `length` tokens see."""
    left, right = window
    right = 0 if causal else right
    i = np.arange(start, end, dtype=np.int64)
    lo = np.zeros_like(i) if left < 0 else np.maximum(0, i - left)
    hi = np.full_like(i, length) if right < 0 else np.minimum(length, i + right + 1)
    return int(np.maximum(0, hi - lo).sum())


def _rank_pairs(layout: CPLayout, causal: bool, window: tuple) -> list:
    lengths = [b - a for a, b in zip(layout.cu_seqlens, layout.cu_seqlens[1:])]
    return [sum(pairs(p.start, p.end, lengths[p.doc], causal, window) for p in pieces) for pieces in layout.pieces]


def variant_costs(layout: CPLayout, heads: int, kv_heads: int, head_dim: int, dtype_bytes: int = 2,
                  causal: bool = True, window: tuple = (-1, -1), bandwidth: float = 45e9,
                  intra_bandwidth: float = 300e9, latency: float = 20e-6, flops: float = 300e12,
                  memory_bandwidth: float = 2.3e12) -> list:
    """Predicted cost of each variant (and each Ulysses degree that divides CP) for one call."""
    cp = layout.cp
    rows = max(layout.tokens)
    forward = 4 * max(_rank_pairs(layout, causal, window)) * heads * head_dim / flops
    compute = forward * (1 + BACKWARD_FACTOR)
    kv = rows * 2 * kv_heads * head_dim * dtype_bytes          # one rank's K/V buffer
    dkv = rows * 2 * kv_heads * head_dim * 4                   # its fp32 dK/dV
    costs = []
    # allgather: gather fwd + gather bwd + reduce-scatter; all exposed.
    moved = (cp - 1) * (2 * kv + dkv)
    comm = moved / bandwidth + 3 * latency * (cp > 1)
    costs.append(VariantCost("allgather", 1, compute, comm, comm, moved))
    for u in [d for d in range(1, cp + 1) if cp % d == 0]:
        if u > 1 and (heads % u or (kv_heads % u and u % kv_heads)):
            continue
        p = cp // u
        # Ulysses part: fwd q, k, v, out; bwd q, out, dout (fp32 with lse), k, v, dq, dk, dv (fp32).
        q_bytes = rows * heads * head_dim
        a2a = (u - 1) / u * (q_bytes * dtype_bytes * 2 + kv + q_bytes * 4 * 4 + kv + dkv)
        a2a_s = a2a / (intra_bandwidth if p > 1 else bandwidth) + 6 * latency * (u - 1)
        # Ring part over p members; a buffer holds u ranks' rows of heads / u: one rank's bytes.
        step_fwd, step_bwd = forward / p, forward * BACKWARD_FACTOR / p
        ring_kv, ring_dkv = kv, dkv
        send_fwd = ring_kv / bandwidth + latency
        send_bwd = (ring_kv + ring_dkv) / bandwidth + 2 * latency
        ring_comm = (p - 1) * send_fwd + p * send_bwd if p > 1 else 0.0
        ring_exposed = ((p - 1) * max(0.0, send_fwd - step_fwd) + (p - 1) * max(0.0, send_bwd - step_bwd)
                        + ring_dkv / bandwidth) if p > 1 else 0.0
        # Per step: the forward's merge and the backward's dq += (10 bytes a q element each), dK and
        # dV += (10 bytes a K/V element each); a member's buffer holds u ranks' rows of heads / u.
        split = p * rows * head_dim * 20 * (heads + kv_heads) / memory_bandwidth if p > 1 else 0.0
        name = "ring" if u == 1 else ("ulysses" if p == 1 else "hybrid")
        moved = a2a + ((p - 1) * ring_kv + (p - 1) * ring_kv + p * ring_dkv if p > 1 else 0.0)
        costs.append(VariantCost(name, u, compute, a2a_s + ring_comm, a2a_s + ring_exposed, moved, split))
    return costs


PREFERENCE = ("allgather", "ring", "ulysses", "hybrid")


def choose_variant(layout: CPLayout, heads: int, kv_heads: int, head_dim: int, tie: float = 0.01,
                   **kwargs) -> VariantCost:
    """The variant of least predicted time (variant_costs' arguments); those within `tie` of it
    in PREFERENCE order."""
    costs = variant_costs(layout, heads, kv_heads, head_dim, **kwargs)
    best = min(c.total_s for c in costs)
    close = [c for c in costs if c.total_s <= best * (1 + tie)]
    return min(close, key=lambda c: (PREFERENCE.index(c.variant), c.total_s))
