"""Attention of one buffer's query pieces against another buffer's key pieces with varpack's varlen
kernels, for context parallelism: partial results merged by their log-sum-exp, and the backward of
each part from the merged output.

A query piece (document positions [a, b)) and a key piece of the same document ([s, e)) become one
sequence of a kernel call. The mask "key j visible to query i iff i - left <= j <= i + right"
(causal: right = 0; -1: unbounded) is exact in the kernel's bottom-right-aligned convention after
clipping: keys past b + right and before a - left are dropped (no query sees them), queries that
can see none of the remaining keys are dropped, and the window passed to the kernel is shifted by
e - b, so right' = right + b - e >= 0 and left' = left + e - b >= 0; a side that bounds no query
with a key to spare (a key piece wholly before a causal query piece) gets -1, so such a block
runs unmasked. Pieces with the same shifted
window whose rows increase in both buffers share one call (gaps become sequences with no keys or
no queries), so a row of many whole documents costs one call, not one per document; unmasked
blocks that share their queries (or keys) and follow on in the other buffer become one sequence,
so a ring step's K/V block is one call, not one per pair of zigzag chunks.

The kernel returns lse = +inf for a query that sees no key; the merge reads that as weight 0.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch

from . import _C  # noqa: F401  registers torch.ops.varpack

__all__ = ["Call", "Merged", "attend", "attend_backward", "plan_calls"]


@dataclass
class Call:
    """One kernel call: query rows [q0, q1), key rows [k0, k1) of the buffers, the sequences'
    cumulative lengths inside them, and the (shifted) window."""
    left: int
    right: int
    q0: int
    q1: int
    k0: int
    k1: int
    cu_q: list
    cu_k: list
    # Per device: (cu_q, cu_k) as int32 tensors and the longest sequences, made once per plan.
    on_device: dict = field(default_factory=dict, repr=False, compare=False)

    def kernel_args(self, device) -> tuple:
        """(cu_q, cu_k, max_seqlen_q, max_seqlen_k) for a kernel call on `device`. Cached: a
        host-to-device copy of a pageable tensor waits for the GPU's queue to drain, and the
        ring would pay that wait before every call."""
        args = self.on_device.get(device)
        if args is None:
            args = (torch.tensor(self.cu_q, dtype=torch.int32, device=device),
                    torch.tensor(self.cu_k, dtype=torch.int32, device=device),
                    _lengths(self.cu_q), _lengths(self.cu_k))
            self.on_device[device] = args
        return args

    def add(self, q0, q1, k0, k1) -> None:
        if q0 > self.q1:  # query rows between pieces: a sequence without keys
            self.cu_q.append(self.cu_q[-1] + q0 - self.q1)
            self.cu_k.append(self.cu_k[-1])
        if k0 > self.k1:  # key rows between pieces: a sequence without queries
            self.cu_q.append(self.cu_q[-1])
            self.cu_k.append(self.cu_k[-1] + k0 - self.k1)
        self.cu_q.append(self.cu_q[-1] + q1 - q0)
        self.cu_k.append(self.cu_k[-1] + k1 - k0)
        self.q1, self.k1 = q1, k1

    def extend(self, q0, q1, k0, k1) -> bool:
        """In an unmasked call, grows the last sequence by a block that shares its queries and
        follows its keys, or shares its keys and follows its queries; False if it cannot."""
        if (self.left, self.right) != (-1, -1):
            return False
        last_q, last_k = self.q0 + self.cu_q[-2], self.k0 + self.cu_k[-2]
        if (q0, q1) == (last_q, self.q1) and k0 == self.k1:
            self.cu_k[-1] += k1 - k0
            self.k1 = k1
        elif (k0, k1) == (last_k, self.k1) and q0 == self.q1:
            self.cu_q[-1] += q1 - q0
            self.q1 = q1
        else:
            return False
        return True


def _clip(qp, kp, left: int, right: int):
    """(q rows, k rows, left', right') of query piece qp against key piece kp, or None if no query
    of qp sees a key of kp."""
    a, b, s, e = qp.start, qp.end, kp.start, kp.end
    if right >= 0:
        e = min(e, b + right)
        a = max(a, s - right)
    if left >= 0:
        s = max(s, a - left)
        b = min(b, e + left)
    if s >= e or a >= b:
        return None
    rows_q = (qp.row + a - qp.start, qp.row + b - qp.start)
    rows_k = (kp.row + s - kp.start, kp.row + e - kp.start)
    # A side that bounds no query, with a key to spare, is no bound: such blocks run unmasked
    # (the spare key keeps a one-token document's block with the other causal ones, one call).
    left2 = -1 if left < 0 or s >= b - left else left + e - b
    right2 = -1 if right < 0 or e <= a + right else right + b - e
    return rows_q, rows_k, left2, right2


@functools.lru_cache(maxsize=512)
def plan_calls(q_pieces: tuple, k_pieces: tuple, left: int, right: int) -> tuple:
    """The kernel calls that compute q_pieces' attention over k_pieces (Piece tuples)."""
    by_doc = {}
    for kp in k_pieces:
        by_doc.setdefault(kp.doc, []).append(kp)
    calls = []
    for qp in q_pieces:
        for kp in by_doc.get(qp.doc, ()):
            clipped = _clip(qp, kp, left, right)
            if clipped is None:
                continue
            (q0, q1), (k0, k1), l2, r2 = clipped
            if any(c.extend(q0, q1, k0, k1) for c in calls if (c.left, c.right) == (l2, r2)):
                continue
            call = next((c for c in calls if (c.left, c.right) == (l2, r2) and q0 >= c.q1 and k0 >= c.k1), None)
            if call is None:
                calls.append(Call(l2, r2, q0, q1, k0, k1, [0, q1 - q0], [0, k1 - k0]))
            else:
                call.add(q0, q1, k0, k1)
    return tuple(calls)


def _lengths(cu: list) -> int:
    return max((b - a for a, b in zip(cu, cu[1:])), default=0)


class Merged:
    """The running merge of one query buffer's partial results: out (rows, heads, d; fp32) and lse
    (heads, rows; fp32, -inf where nothing was seen yet), each part merged in one pass by
    torch.ops.varpack.merge_partial (rows no earlier call touched are written as they come: exact)."""

    def __init__(self, q: torch.Tensor):
        self.out = torch.zeros(q.shape, dtype=torch.float32, device=q.device)  # 0 where no key is seen
        self.lse = torch.full((q.shape[1], q.shape[0]), float("-inf"), dtype=torch.float32, device=q.device)

    def add(self, q0: int, q1: int, o: torch.Tensor, l: torch.Tensor) -> None:
        torch.ops.varpack.merge_partial(self.out[q0:q1], self.lse[:, q0:q1], o, l)

    def result(self, dtype):
        """out in `dtype` and lse in the kernel's convention (+inf where no key was seen)."""
        return self.out.to(dtype), torch.where(self.lse == float("-inf"), float("inf"), self.lse)


def attend(q, k, v, calls, scale: float, softcap: float, merged: Merged) -> None:
    """Runs the calls and merges their partial attention into `merged`."""
    for c in calls:
        cu_q, cu_k, max_q, max_k = c.kernel_args(q.device)
        o, l = torch.ops.varpack.varlen_fwd(q[c.q0:c.q1], k[c.k0:c.k1], v[c.k0:c.k1], cu_q, cu_k, max_q, max_k,
                                            scale, False, c.left, c.right, softcap)
        merged.add(c.q0, c.q1, o, l)


def attend_backward(dout, q, k, v, out, lse, calls, scale: float, softcap: float, deterministic: bool,
                    dq, dk, dv) -> None:
    """Adds the calls' gradients (from the merged out and lse) into dq, dk, dv (fp32), in place."""
    for c in calls:
        cu_q, cu_k, max_q, max_k = c.kernel_args(q.device)
        rq, rk = slice(c.q0, c.q1), slice(c.k0, c.k1)
        gq, gk, gv = torch.ops.varpack.varlen_bwd(dout[rq], q[rq], k[rk], v[rk], out[rq], lse[:, rq].contiguous(),
                                                  cu_q, cu_k, max_q, max_k, scale, False, c.left, c.right,
                                                  softcap, deterministic)
        dq[rq] += gq
        dk[rk] += gk
        dv[rk] += gv
