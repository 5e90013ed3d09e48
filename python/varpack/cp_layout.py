"""Which tokens of a packed row each context-parallel rank holds (the varlen CP layout).

A packed row holds documents d = 0..n-1 at [cu[d], cu[d+1]). A document marked for splitting is
cut into 2 * CP chunks (boundaries floor(i * L / 2CP), so chunk sizes differ by at most one token)
and rank r holds chunks r and 2CP-1-r (zigzag: causal work even over the ranks); any other
document is held whole by one rank (its owner). A rank's local tokens are its pieces in the order
of the row. `cp_layout` decides the split from the cost model: documents are placed longest
first, each on the least loaded rank, and a document is split instead when placing it whole would
take that rank more than `slack` (10%) past the balanced share (total cost / CP): splitting costs
communication, so a slightly uneven whole placement is preferred. Documents shorter than 2 * CP
tokens are never split.

    layout = cp_layout(cu_seqlens, cp=4)              # or owner=[-1, 2, ...] given by a schedule
    q_local = layout.shard(q_row, rank)              # (tokens of rank, heads, d)
    pos = layout.positions(rank)                     # position of each local token in its document
"""
from __future__ import annotations

import functools
import operator
from dataclasses import dataclass

import numpy as np
import torch

from .auto import ANCHOR_COST_MODEL, CostModel

__all__ = ["CPLayout", "Piece", "cp_layout"]

SPLIT = -1  # owner value of a zigzag-split document


@dataclass(frozen=True)
class Piece:
    """Tokens [start, end) of document `doc` (positions within the document), at local row `row`."""
    doc: int
    start: int
    end: int
    row: int

    @property
    def length(self) -> int:
        return self.end - self.start


@dataclass(frozen=True, eq=False)
class CPLayout:
    """cu_seqlens: the row's document boundaries (ints, from 0). owner: per document, SPLIT (-1)
    or the rank that holds it whole. pieces[r]: rank r's pieces in local order."""
    cp: int
    cu_seqlens: tuple
    owner: tuple

    @functools.cached_property
    def pieces(self) -> tuple:
        per_rank = [[] for _ in range(self.cp)]
        rows = [0] * self.cp
        for d, own in enumerate(self.owner):
            length = self.cu_seqlens[d + 1] - self.cu_seqlens[d]
            if own == SPLIT:
                bounds = [i * length // (2 * self.cp) for i in range(2 * self.cp + 1)]
                spans = {r: [(bounds[r], bounds[r + 1]), (bounds[2 * self.cp - 1 - r], bounds[2 * self.cp - r])]
                         for r in range(self.cp)}
            else:
                spans = {own: [(0, length)]}
            for r, parts in spans.items():
                for start, end in parts:
                    if end > start:
                        per_rank[r].append(Piece(d, start, end, rows[r]))
                        rows[r] += end - start
        return tuple(tuple(p) for p in per_rank)

    @functools.cached_property
    def tokens(self) -> tuple:
        """Local token count of each rank."""
        return tuple(sum(p.length for p in pieces) for pieces in self.pieces)

    def global_index(self, rank: int) -> np.ndarray:
        """int64 row positions (in the packed row) of rank `rank`'s local tokens, in local order."""
        starts = self.cu_seqlens
        parts = [np.arange(starts[p.doc] + p.start, starts[p.doc] + p.end) for p in self.pieces[rank]]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def positions(self, rank: int) -> np.ndarray:
        """int64 position of each local token within its document (RoPE's position_ids)."""
        parts = [np.arange(p.start, p.end) for p in self.pieces[rank]]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def shard(self, x: torch.Tensor, rank: int, dim: int = 0) -> torch.Tensor:
        """Rank `rank`'s local tokens of `x`, a whole packed row along `dim`."""
        return x.index_select(dim, torch.from_numpy(self.global_index(rank)).to(x.device))

    def unshard(self, parts: list, dim: int = 0) -> torch.Tensor:
        """The whole row along `dim` from every rank's local tokens (parts[r] from rank r)."""
        order = torch.from_numpy(np.argsort(np.concatenate([self.global_index(r) for r in range(self.cp)]),
                                            kind="stable"))
        return torch.cat(parts, dim=dim).index_select(dim, order.to(parts[0].device))

    def encode(self) -> torch.Tensor:
        """The layout as one int64 CPU tensor [cp, documents, cu..., owner...] (what the attention
        operator takes, so torch.compile sees a tensor and no Python object)."""
        return torch.tensor([self.cp, len(self.owner), *self.cu_seqlens, *self.owner], dtype=torch.int64)

    @staticmethod
    def decode(code: torch.Tensor) -> "CPLayout":
        return _decoded(tuple(code.tolist()))


@functools.lru_cache(maxsize=64)
def _decoded(values: tuple) -> CPLayout:
    cp, n = values[0], values[1]
    return CPLayout(cp, values[2:3 + n], values[3 + n:3 + 2 * n])


def _attention_cost(length: int, model: CostModel, causal: bool) -> float:
    return model.alpha * length + model.beta * length * length * (0.5 if causal else 1.0)


def cp_layout(cu_seqlens, cp: int, owner=None, cost_model: CostModel | None = None, causal: bool = True,
              slack: float = 0.1) -> CPLayout:
    """The layout of a packed row (cu_seqlens: document boundaries, from 0) over `cp` ranks.
    owner: per document SPLIT (-1) or a rank, as a schedule decided it; None: decided here by the
    cost model (default: the default fit) as the module docstring says."""
    cp = operator.index(cp)
    cu = [operator.index(int(c)) for c in np.asarray(cu_seqlens).reshape(-1)]
    if cp < 1 or not cu or cu[0] != 0 or any(b < a for a, b in zip(cu, cu[1:])):
        raise ValueError(f"cp_layout: cp={cp} must be >= 1 and cu_seqlens start at 0 and never decrease, "
                         f"got {cu[:8]}{'...' if len(cu) > 8 else ''}")
    lengths = np.diff(cu)
    if owner is None:
        owner = _choose_owners(lengths, cp, cost_model or ANCHOR_COST_MODEL, causal, slack)
    owner = tuple(int(o) for o in owner)
    if len(owner) != len(lengths):
        raise ValueError(f"cp_layout: {len(owner)} owners for {len(lengths)} documents")
    bad = [d for d, o in enumerate(owner) if not SPLIT <= o < cp]
    if bad:
        raise ValueError(f"cp_layout: document {bad[0]} has owner {owner[bad[0]]}; give -1 (split) or a rank "
                         f"in [0, {cp})")
    return CPLayout(cp, tuple(cu), owner)


def _choose_owners(lengths: np.ndarray, cp: int, model: CostModel, causal: bool, slack: float) -> list:
    costs = [_attention_cost(int(n), model, causal) for n in lengths]
    share = sum(costs) / cp * (1 + slack)
    load = np.zeros(cp)
    owner = [0] * len(lengths)
    for d in sorted(range(len(lengths)), key=lambda i: (-costs[i], i)):
        least = int(np.argmin(load))
        if cp > 1 and lengths[d] >= 2 * cp and load[least] + costs[d] > share:
            owner[d] = SPLIT
            load += costs[d] / cp
        else:
            owner[d] = least
            load[least] += costs[d]
    return owner
