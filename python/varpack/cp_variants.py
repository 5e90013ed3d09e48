"""The three context-parallel attention variants over a CPLayout, forward and backward, each built
from varpack's varlen kernels (cp_kernels) and torch.distributed collectives.

Every rank passes its local tokens (layout.pieces[rank]); buffers sent between ranks are padded to
the longest rank's token count. Each variant returns this rank's out and lse (kernel convention)
and in the backward needs only this rank's q, k, v, out and lse: no rank keeps another rank's K/V
for the backward.

allgather: all-gather K/V of the whole row, reorder it into the row's order, and run each local
    query piece against its document's visible keys in one call (no merge: bit-exact with one
    process where the key ranges match). The backward gathers K/V again, `head_groups` KV heads
    groups at a time (peak memory of the gathered copy / head_groups), and reduce-scatters dK/dV.
ring: the K/V buffers travel around the ring by isend/irecv posted before the kernel runs on the
    block in hand, so the transfer of block t+1 overlaps the compute of block t; partial results
    merge by their LSE. The backward passes K/V around again, with each block's dK/dV accumulator
    following one step behind, and returns the accumulator to its owner.
ulysses (degree u): all-to-all from "my tokens, all heads" to "u ranks' tokens, heads / u", then
    the ring among the P / u ranks that hold the same heads (none when u = P: one kernel call on
    the whole row), and all-to-all back. Ranks r = ring index * u + ulysses index, so a Ulysses
    group is u consecutive ranks (one node's GPUs, where all-to-all bandwidth is high).
"""
from __future__ import annotations

import functools

import numpy as np
import torch
import torch.distributed as dist

from .cp_kernels import Merged, attend, attend_backward, plan_calls
from .cp_layout import CPLayout, Piece

__all__ = ["Mask", "cp_backward", "cp_forward"]


class Mask(tuple):
    """(left, right, scale, softcap): causal is right = 0; -1 unbounded."""
    __slots__ = ()

    def __new__(cls, left, right, scale, softcap):
        return super().__new__(cls, (int(left), int(right), float(scale), float(softcap)))


# ---------------------------------------------------------------- buffers in the row's order

@functools.lru_cache(maxsize=128)
def canonical(layout: CPLayout, sources: tuple, rows: int):
    """The buffer of `sources`' local tokens (each padded to `rows`, concatenated) put in the row's
    order: (index into the concatenated buffer, the pieces of the reordered buffer, adjacent pieces
    of a document merged so one kernel call covers a whole document)."""
    found = [(p.doc, p.start, p.end, i * rows + p.row) for i, r in enumerate(sources) for p in layout.pieces[r]]
    found.sort()
    index, merged, row = [], [], 0
    for doc, start, end, at in found:
        index.append(np.arange(at, at + end - start))
        last = merged[-1] if merged else None
        if last is not None and last.doc == doc and last.end == start:
            merged[-1] = Piece(doc, last.start, end, last.row)
        else:
            merged.append(Piece(doc, start, end, row))
        row += end - start
    index = np.concatenate(index) if index else np.zeros(0, dtype=np.int64)
    return torch.from_numpy(index), tuple(merged)


def _pad(x: torch.Tensor, rows: int) -> torch.Tensor:
    if x.shape[0] == rows:
        return x.contiguous()
    return torch.cat([x, x.new_zeros((rows - x.shape[0], *x.shape[1:]))])


def _to_row_order(buffer, index):
    return buffer.index_select(0, index.to(buffer.device))


def _from_row_order(x, index, rows):
    out = x.new_zeros((rows, *x.shape[1:]))
    return out.index_copy_(0, index.to(x.device), x)


# ---------------------------------------------------------------- communication

class Comm:
    """The group, this rank, and point-to-point exchanges by global rank."""

    def __init__(self, group, layout: CPLayout):
        self.group = group
        self.cp = layout.cp
        self.rank = dist.get_rank(group) if self.cp > 1 else 0
        self.peers = [dist.get_global_rank(group, r) for r in range(self.cp)] if self.cp > 1 else [0]
        self.nccl = self.cp > 1 and dist.get_backend(group) == "nccl"

    def start(self, ops):
        """ops: (send: bool, tensor, group rank, tag); returns requests to wait on."""
        p2p = [dist.P2POp(dist.isend if send else dist.irecv, t, self.peers[r], self.group, tag)
               for send, t, r, tag in ops]
        return dist.batch_isend_irecv(p2p) if p2p else []

    def all_gather(self, x):
        parts = [torch.empty_like(x) for _ in range(self.cp)]
        dist.all_gather(parts, x, group=self.group)
        return parts

    def reduce_scatter(self, blocks):
        """blocks: (cp, ...) summed over the ranks; returns this rank's block of the sum."""
        if self.nccl:
            out = torch.empty_like(blocks[0])
            dist.reduce_scatter_tensor(out, blocks, group=self.group)
            return out
        dist.all_reduce(blocks, group=self.group)  # gloo has no reduce_scatter (CPU runs are tests)
        return blocks[self.rank]

    def all_to_all(self, send, members, recv_shape, dtype, tag):
        """send[i]: the tensor for members[i] (group ranks); returns what each member sent here."""
        me = members.index(self.rank)
        got = [torch.empty(shape, dtype=dtype, device=send[me].device) for shape in recv_shape]
        got[me] = send[me]
        ops = [op for i, m in enumerate(members) if i != me
               for op in ((True, send[i].contiguous(), m, tag), (False, got[i], m, tag))]
        for req in self.start(ops):
            req.wait()
        return got


# ---------------------------------------------------------------- all-gather

def _gather_rows(comm, layout, x):
    """x (local rows, ...) from every rank, in the row's order, and the index used."""
    rows = max(layout.tokens)
    index, pieces = canonical(layout, tuple(range(layout.cp)), rows)
    parts = comm.all_gather(_pad(x, rows)) if layout.cp > 1 else [_pad(x, rows)]
    return _to_row_order(torch.cat(parts), index), index, pieces


def allgather_forward(comm, layout, q, k, v, mask):
    kv, _, pieces = _gather_rows(comm, layout, torch.stack([k, v], dim=1))
    calls = plan_calls(layout.pieces[comm.rank], pieces, mask[0], mask[1])
    merged = Merged(q)
    attend(q, kv[:, 0], kv[:, 1], calls, mask[2], mask[3], merged)
    return merged.result(q.dtype)


def allgather_backward(comm, layout, dout, q, k, v, out, lse, mask, deterministic, head_groups):
    heads, kv_heads = q.shape[1], k.shape[1]
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    dkv = torch.zeros((k.shape[0], 2, kv_heads, k.shape[2]), dtype=torch.float32, device=k.device)
    rows = max(layout.tokens)
    for g in range(head_groups):
        hq = slice(g * heads // head_groups, (g + 1) * heads // head_groups)
        hk = slice(g * kv_heads // head_groups, (g + 1) * kv_heads // head_groups)
        kv, index, pieces = _gather_rows(comm, layout, torch.stack([k[:, hk], v[:, hk]], dim=1))
        calls = plan_calls(layout.pieces[comm.rank], pieces, mask[0], mask[1])
        dq_g = torch.zeros_like(dq[:, hq])
        dkv_full = torch.zeros(kv.shape, dtype=torch.float32, device=kv.device)
        attend_backward(dout[:, hq].contiguous(), q[:, hq].contiguous(), kv[:, 0], kv[:, 1], out[:, hq].contiguous(),
                        lse[hq].contiguous(), calls, mask[2], mask[3], deterministic, dq_g, dkv_full[:, 0],
                        dkv_full[:, 1])
        dq[:, hq] = dq_g
        blocks = _from_row_order(dkv_full, index, rows * layout.cp).reshape(layout.cp, rows, *kv.shape[1:])
        mine = comm.reduce_scatter(blocks) if layout.cp > 1 else blocks[0]
        dkv[:, :, hk] = mine[:k.shape[0]]
    return dq.to(q.dtype), dkv[:, 0].to(k.dtype), dkv[:, 1].to(v.dtype)


# ---------------------------------------------------------------- ring

KV_TAG, DKV_TAG = 1, 2


def ring_forward(comm, q, k, v, q_pieces, block_pieces, ring, mask):
    """Attention of q (q_pieces) over the K/V buffers of the ring's members (group ranks `ring`,
    block_pieces[j] the pieces of member j's buffer, this rank's k, v among them)."""
    me, p = ring.index(comm.rank), len(ring)
    merged = Merged(q)
    kv = torch.stack([k, v])
    for t in range(p):
        reqs = []
        if t < p - 1:
            incoming = torch.empty_like(kv)
            reqs = comm.start([(True, kv, ring[(me + 1) % p], KV_TAG), (False, incoming, ring[(me - 1) % p], KV_TAG)])
        calls = plan_calls(q_pieces, block_pieces[(me - t) % p], mask[0], mask[1])
        attend(q, kv[0], kv[1], calls, mask[2], mask[3], merged)
        for req in reqs:
            req.wait()
        if t < p - 1:
            kv = incoming
    return merged.result(q.dtype)


def ring_backward(comm, dout, q, k, v, out, lse, q_pieces, block_pieces, ring, mask, deterministic):
    """dq of this rank and dK/dV of this rank's buffer: each block's dK/dV accumulator follows its
    K/V one step behind around the ring and ends at its owner."""
    me, p = ring.index(comm.rank), len(ring)
    nxt, prev = ring[(me + 1) % p], ring[(me - 1) % p]
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    kv = torch.stack([k, v])
    acc = None
    for t in range(p):
        ops, incoming, acc_in = [], None, None
        if t < p - 1:
            incoming = torch.empty_like(kv)
            ops += [(True, kv, nxt, KV_TAG), (False, incoming, prev, KV_TAG)]
        if t > 0:
            acc_in = torch.empty_like(acc)
            ops += [(True, acc, nxt, DKV_TAG), (False, acc_in, prev, DKV_TAG)]
        reqs = comm.start(ops)
        dkv = torch.zeros(kv.shape, dtype=torch.float32, device=kv.device)
        calls = plan_calls(q_pieces, block_pieces[(me - t) % p], mask[0], mask[1])
        attend_backward(dout, q, kv[0], kv[1], out, lse, calls, mask[2], mask[3], deterministic, dq, dkv[0], dkv[1])
        for req in reqs:
            req.wait()
        acc = dkv if acc_in is None else dkv + acc_in
        if incoming is not None:
            kv = incoming
    if p > 1:
        mine = torch.empty_like(acc)
        for req in comm.start([(True, acc, nxt, DKV_TAG), (False, mine, prev, DKV_TAG)]):
            req.wait()
        acc = mine
    return dq, acc[0], acc[1]


# ---------------------------------------------------------------- Ulysses (+ ring across)

def _head_ranges(heads, kv_heads, u):
    """Per Ulysses member: its q heads and the kv heads they read."""
    per, share = heads // u, heads // kv_heads
    return [(slice(g * per, (g + 1) * per), slice(g * per // share, ((g + 1) * per - 1) // share + 1))
            for g in range(u)]


class _Grid:
    """Rank = ring index * u + Ulysses index."""

    def __init__(self, layout, rank, u):
        self.u, self.p = u, layout.cp // u
        self.ring_index, self.uly_index = divmod(rank, u)
        self.members = [self.ring_index * u + i for i in range(u)]
        self.ring = [j * u + self.uly_index for j in range(self.p)]
        self.rows = max(layout.tokens)
        groups = [tuple(j * u + i for i in range(u)) for j in range(self.p)]
        self.index, self.pieces = canonical(layout, groups[self.ring_index], self.rows)
        self.block_pieces = [canonical(layout, g, self.rows)[1] for g in groups]


def _scatter_heads(comm, grid, x, ranges, tag):
    """(local rows, heads, ...) -> (u group's rows in the row's order, this member's heads, ...)."""
    x = _pad(x, grid.rows)
    send = [x[:, r] for r in ranges]
    mine = ranges[grid.uly_index]
    width = mine.stop - mine.start
    got = comm.all_to_all(send, grid.members, [(grid.rows, width, *x.shape[2:])] * grid.u, x.dtype, tag)
    # Padded again, so that every ring member's buffer has the same rows.
    return _pad(_to_row_order(torch.cat(got), grid.index), grid.rows * grid.u)


def _gather_heads(comm, grid, x, ranges, local_rows, heads, tag, dtype=None):
    """The inverse of _scatter_heads: each member's rows back, every head; heads that several members
    computed (a kv head shared by their q heads) summed."""
    x = _from_row_order(x[:len(grid.index)], grid.index, grid.rows * grid.u)
    send = list(x.split(grid.rows))
    shapes = [(grid.rows, r.stop - r.start, *x.shape[2:]) for r in ranges]
    got = comm.all_to_all(send, grid.members, shapes, x.dtype, tag)
    out = torch.zeros((grid.rows, heads, *x.shape[2:]), dtype=dtype or x.dtype, device=x.device)
    for r, part in zip(ranges, got):
        out[:, r] += part
    return out[:local_rows]


def ulysses_forward(comm, layout, q, k, v, mask, u):
    grid = _Grid(layout, comm.rank, u)
    ranges = _head_ranges(q.shape[1], k.shape[1], u)
    qh = _scatter_heads(comm, grid, q, [r[0] for r in ranges], 3)
    kvh = _scatter_heads(comm, grid, torch.stack([k, v], dim=2), [r[1] for r in ranges], 4)
    out, lse = ring_forward(comm, qh, kvh[:, :, 0].contiguous(), kvh[:, :, 1].contiguous(), grid.pieces,
                            grid.block_pieces, grid.ring, mask)
    both = torch.cat([out.float(), lse.t().unsqueeze(-1)], dim=-1)
    local = _gather_heads(comm, grid, both, [r[0] for r in ranges], q.shape[0], q.shape[1], 5)
    d = q.shape[-1]
    return local[..., :d].to(q.dtype).contiguous(), local[..., d].t().contiguous()


def ulysses_backward(comm, layout, dout, q, k, v, out, lse, mask, deterministic, u):
    grid = _Grid(layout, comm.rank, u)
    ranges = _head_ranges(q.shape[1], k.shape[1], u)
    q_heads, kv_heads = [r[0] for r in ranges], [r[1] for r in ranges]
    d = q.shape[-1]
    # One all-to-all for q, out, dout and lse; fp32, so lse crosses unrounded (q, out, dout come back exact).
    rows = torch.cat([q.float(), out.float(), dout.float(), lse.t().unsqueeze(-1)], dim=-1)
    rows = _scatter_heads(comm, grid, rows, q_heads, 6)
    qh, outh, douth = (rows[..., i * d:(i + 1) * d].to(q.dtype).contiguous() for i in range(3))
    lseh = rows[..., 3 * d].t().contiguous().float()
    kvh = _scatter_heads(comm, grid, torch.stack([k, v], dim=2), kv_heads, 7)
    dq, dk, dv = ring_backward(comm, douth, qh, kvh[:, :, 0].contiguous(), kvh[:, :, 1].contiguous(), outh, lseh,
                               grid.pieces, grid.block_pieces, grid.ring, mask, deterministic)
    dq = _gather_heads(comm, grid, dq, q_heads, q.shape[0], q.shape[1], 8, torch.float32)
    dkv = _gather_heads(comm, grid, torch.stack([dk, dv], dim=2), kv_heads, k.shape[0], k.shape[1], 9,
                        torch.float32)
    return dq.to(q.dtype), dkv[:, :, 0].to(k.dtype), dkv[:, :, 1].to(v.dtype)


# ---------------------------------------------------------------- one entry point

def cp_forward(group, layout, variant, q, k, v, mask, ulysses):
    comm = Comm(group, layout)
    if variant == "allgather":
        return allgather_forward(comm, layout, q, k, v, mask)
    return ulysses_forward(comm, layout, q, k, v, mask, ulysses if variant != "ring" else 1)


def cp_backward(group, layout, variant, dout, q, k, v, out, lse, mask, ulysses, deterministic, head_groups):
    comm = Comm(group, layout)
    if variant == "allgather":
        return allgather_backward(comm, layout, dout, q, k, v, out, lse, mask, deterministic, head_groups)
    return ulysses_backward(comm, layout, dout, q, k, v, out, lse, mask, deterministic,
                            ulysses if variant != "ring" else 1)
