"""Context parallelism: one long causal sample's attention split over the ranks of a process group.

A sample longer than one GPU holds is cut into 2 * CP chunks of C tokens (zigzag split): rank r
holds chunks r and 2*CP-1-r, concatenated, as its 2C local tokens. Under a causal mask chunk i
attends to i + 1 chunks of keys, so every rank's share is (r + 1) + (2*CP - r) = 2*CP + 1 chunk
pairs: even, which a contiguous split (rank r: chunks 2r, 2r+1) is not.

    split = varpack.context_parallel.split_long_samples(lengths, capacity=16384, cp=2)
    batch = varpack.context_parallel.cp_sample_batch(sample, cp, rank)  # this rank's tokens
    out = varpack.context_parallel.cp_attention(q, k, v, group=cp_group)  # (2C, heads, d)

For a Hugging Face model: register_hf() registers cp_attention as attn_implementation
"varpack_cp"; the model then takes cp_sample_batch's inputs (its loss is computed from the logits
and shift_labels, summed over the CP ranks, and the gradients summed over them).

Attention is "all-gather CP" (as in Llama 3): every rank all-gathers the sample's K and V
(one collective), then runs each local query chunk i against keys [0, (i+1)C) in one call of
varpack's varlen kernel. FlashAttention's causal mask is aligned bottom-right, which is exactly
"query t of chunk i sees keys up to i*C + t", so no block-by-block loop is needed and no partial
results have to be merged by their log-sum-exp; the backward runs varpack's backward kernel on
the forward's out and lse, adds each call's dK/dV into a buffer the length of the sample, and
reduce-scatters it back to the chunks' owners. Trade-off against ring attention (K/V passed
around the ring, block results merged through the LSE): all-gather moves the same bytes but
does not overlap them with compute, and every rank holds (and keeps for the backward) the whole
sample's K/V of each layer; with grouped-query attention K/V are small (Llama 3 chose it for
that), and it needs one collective instead of 2(CP-1) point-to-point steps. A ring version is the
step to take at large CP, where the K/V no longer fit or the un-overlapped gather starts to show.

Padding: split_long_samples pads a CP sample to a multiple of 2*CP; the pad tokens sit at the
end, so causally no real token sees them, and their labels are -100.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from . import _C  # noqa: F401  registers torch.ops.varpack

__all__ = ["CPSplit", "cp_attention", "cp_padded_length", "cp_sample_batch", "register_hf", "split_long_samples",
           "zigzag_chunks", "zigzag_indices", "zigzag_shard", "zigzag_unshard"]


def zigzag_chunks(cp: int, rank: int) -> tuple[int, int]:
    """The two chunks (of 2 * cp) rank `rank` holds: rank and 2 * cp - 1 - rank."""
    cp, rank = operator.index(cp), operator.index(rank)
    if cp < 1 or not 0 <= rank < cp:
        raise ValueError(f"zigzag split: rank {rank} of cp={cp}; need cp >= 1 and 0 <= rank < cp")
    return rank, 2 * cp - 1 - rank


def cp_padded_length(length: int, cp: int) -> int:
    """`length` rounded up to a multiple of 2 * cp (the zigzag split's chunk count)."""
    step = 2 * operator.index(cp)
    return -(-operator.index(length) // step) * step


def zigzag_indices(length: int, cp: int, rank: int) -> np.ndarray:
    """int64 positions (into a sequence of `length` tokens, a multiple of 2 * cp) that rank
    `rank` holds, in its local order: chunk rank, then chunk 2 * cp - 1 - rank."""
    if length % (2 * cp):
        raise ValueError(f"zigzag split: length {length} is not a multiple of 2 * cp = {2 * cp}; pad "
                         "the sample first (cp_padded_length)")
    chunk = length // (2 * cp)
    return np.concatenate([np.arange(i * chunk, (i + 1) * chunk) for i in zigzag_chunks(cp, rank)])


def zigzag_shard(x: torch.Tensor, cp: int, rank: int, dim: int = 0) -> torch.Tensor:
    """Rank `rank`'s tokens of `x` along `dim` (a multiple of 2 * cp long)."""
    index = torch.from_numpy(zigzag_indices(x.shape[dim], cp, rank)).to(x.device)
    return x.index_select(dim, index)


def zigzag_unshard(parts: list[torch.Tensor], dim: int = 0) -> torch.Tensor:
    """The whole sequence from every rank's local tokens (parts[r] from rank r), in order."""
    cp = len(parts)
    halves = [p.chunk(2, dim=dim) for p in parts]
    chunks = [None] * (2 * cp)
    for rank, (first, second) in enumerate(halves):
        a, b = zigzag_chunks(cp, rank)
        chunks[a], chunks[b] = first, second
    return torch.cat(chunks, dim=dim)


# ---------------------------------------------------------------- the packer's side

@dataclass(frozen=True)
class CPSplit:
    """Which samples go to context parallelism.

    short:          int64 indices of the samples that fit one rank (<= capacity): pack them as usual
                    (varpack.plan(lengths[short], capacity)).
    long:           int64 indices of the samples longer than capacity: each runs alone, zigzag-split
                    over the cp ranks of its group.
    padded_lengths: int64, per long sample, its length rounded up to a multiple of 2 * cp.
    """
    cp: int
    capacity: int
    short: np.ndarray
    long: np.ndarray
    padded_lengths: np.ndarray


def split_long_samples(lengths, capacity: int, cp: int) -> CPSplit:
    """Marks the samples longer than `capacity` (tokens one rank can hold) for context parallelism
    over `cp` ranks and pads them to a multiple of 2 * cp. Raises ValueError naming the first
    sample that does not fit even split over cp ranks (its padded length / cp > capacity)."""
    capacity, cp = operator.index(capacity), operator.index(cp)
    if capacity < 1 or cp < 1:
        raise ValueError(f"split_long_samples: capacity={capacity} and cp={cp} must be >= 1")
    n = np.asarray(lengths, dtype=np.int64).reshape(-1)
    if n.size and n.min() < 0:
        bad = int(np.argmin(n))
        raise ValueError(f"split_long_samples: sample {bad} has length {int(n[bad])}; lengths must be >= 0")
    long = np.flatnonzero(n > capacity)
    step = 2 * cp
    padded = (n[long] + step - 1) // step * step
    too_long = np.flatnonzero(padded // cp > capacity)
    if too_long.size:
        i = int(long[too_long[0]])
        raise ValueError(f"split_long_samples: sample {i} has {int(n[i])} tokens, "
                         f"{int(padded[too_long[0]] // cp)} per rank over cp={cp} ranks, more than "
                         f"capacity={capacity}; raise cp to at least {-(-int(n[i]) // capacity)} or "
                         "split the sample (overlong='split')")
    return CPSplit(cp, capacity, np.flatnonzero(n <= capacity), long, padded)


def cp_sample_batch(input_ids, cp: int, rank: int, labels=None, pad_token_id: int = 0) -> dict:
    """Rank `rank`'s share of one long sample, as model inputs of shape [1, 2C]:

    input_ids:    the sample padded with pad_token_id to a multiple of 2 * cp, zigzag-sharded.
    position_ids: the tokens' positions in the whole sample (RoPE needs the true positions).
    shift_labels: the target of each token, already shifted (token t's target is label t + 1), so
                  no loss needs a neighbour on another rank; -100 for the last token and padding.
    cu_seq_lens_q/k, max_length_q/k: the local tokens as one sequence, so that an attention
                  implementation registered by register_hf finds no boundaries to compute (the
                  attention itself is cp_attention over the whole sample).
    Labels default to the input ids (a causal LM's next-token targets).
    """
    ids = torch.as_tensor(np.asarray(input_ids), dtype=torch.long).reshape(-1)
    target = ids if labels is None else torch.as_tensor(np.asarray(labels), dtype=torch.long).reshape(-1)
    if target.shape != ids.shape:
        raise ValueError(f"cp_sample_batch: labels have {target.numel()} tokens, input_ids {ids.numel()}")
    length = cp_padded_length(ids.numel(), cp)
    padded = torch.full((length,), pad_token_id, dtype=torch.long)
    padded[:ids.numel()] = ids
    shifted = torch.full((length,), -100, dtype=torch.long)
    shifted[:max(ids.numel() - 1, 0)] = target[1:]
    index = torch.from_numpy(zigzag_indices(length, cp, rank))
    local = torch.tensor([0, index.numel()], dtype=torch.int32)
    return {"input_ids": padded[index][None], "position_ids": index[None], "shift_labels": shifted[index][None],
            "cu_seq_lens_q": local, "cu_seq_lens_k": local, "max_length_q": index.numel(),
            "max_length_k": index.numel()}


# ---------------------------------------------------------------- attention

def _group_shape(group) -> tuple[int, int]:
    if not (dist.is_available() and dist.is_initialized()):
        return 1, 0
    return dist.get_world_size(group), dist.get_rank(group)


def _gather_sequence(local: torch.Tensor, cp: int, group) -> torch.Tensor:
    """The whole sequence (along dim 1) from every rank's zigzag-local tokens."""
    if cp == 1:
        return local
    parts = [torch.empty_like(local) for _ in range(cp)]
    dist.all_gather(parts, local.contiguous(), group=group)
    return zigzag_unshard(parts, dim=1)


def _reduce_scatter_sequence(full: torch.Tensor, cp: int, rank: int, group) -> torch.Tensor:
    """Sums `full` (along dim 1, the whole sequence) over the ranks and returns this rank's
    zigzag-local tokens of the sum."""
    if cp == 1:
        return full
    shards = [zigzag_shard(full, cp, r, dim=1).contiguous() for r in range(cp)]
    if dist.get_backend(group) == "nccl":
        out = torch.empty_like(shards[rank])
        dist.reduce_scatter(out, shards, group=group)
        return out
    # Gloo has no reduce_scatter: sum everything, keep this rank's part (twice the traffic; CPU
    # runs are for tests).
    total = torch.stack(shards)
    dist.all_reduce(total, group=group)
    return total[rank]


def _key_ends(chunk: int, cp: int, rank: int) -> list[int]:
    # Query chunk i sees keys [0, (i + 1) * chunk).
    return [(i + 1) * chunk for i in zigzag_chunks(cp, rank)]


class _CPAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, group, softmax_scale, deterministic):
        cp, rank = _group_shape(group)
        chunk = q.shape[0] // 2
        kv = _gather_sequence(torch.stack([k, v]), cp, group)  # (2, 2 * cp * chunk, kv heads, d)
        outs, lses = [], []
        for half, end in enumerate(_key_ends(chunk, cp, rank)):
            cu_q = torch.tensor([0, chunk], dtype=torch.int32, device=q.device)
            cu_k = torch.tensor([0, end], dtype=torch.int32, device=q.device)
            out, lse = torch.ops.varpack.varlen_fwd(q[half * chunk:(half + 1) * chunk], kv[0, :end], kv[1, :end],
                                                    cu_q, cu_k, chunk, end, softmax_scale, True, -1, -1, 0.0)
            outs.append(out)
            lses.append(lse)
        out = torch.cat(outs)
        ctx.save_for_backward(q, kv, out, *lses)
        ctx.group, ctx.cp, ctx.rank = group, cp, rank
        ctx.softmax_scale, ctx.deterministic = softmax_scale, deterministic
        ctx.k_dtype, ctx.v_dtype = k.dtype, v.dtype
        return out

    @staticmethod
    def backward(ctx, dout):
        q, kv, out, *lses = ctx.saved_tensors
        dout = dout.contiguous()
        chunk = q.shape[0] // 2
        # dK/dV of the whole sequence from this rank's queries; fp32, so that the ranks' partial
        # sums add up without a second rounding to bf16.
        dkv = torch.zeros(kv.shape, dtype=torch.float32, device=kv.device)
        dqs = []
        for half, end in enumerate(_key_ends(chunk, ctx.cp, ctx.rank)):
            rows = slice(half * chunk, (half + 1) * chunk)
            cu_q = torch.tensor([0, chunk], dtype=torch.int32, device=q.device)
            cu_k = torch.tensor([0, end], dtype=torch.int32, device=q.device)
            dq, dk, dv = torch.ops.varpack.varlen_bwd(dout[rows], q[rows], kv[0, :end], kv[1, :end], out[rows],
                                                      lses[half], cu_q, cu_k, chunk, end, ctx.softmax_scale, True,
                                                      -1, -1, 0.0, ctx.deterministic)
            dqs.append(dq)
            dkv[0, :end] += dk
            dkv[1, :end] += dv
        dkv = _reduce_scatter_sequence(dkv, ctx.cp, ctx.rank, ctx.group)
        return torch.cat(dqs), dkv[0].to(ctx.k_dtype), dkv[1].to(ctx.v_dtype), None, None, None


def cp_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group=None, softmax_scale=None,
                 deterministic: bool = False) -> torch.Tensor:
    """Causal attention of one sample zigzag-split over the ranks of `group` (None: the default
    group; without torch.distributed initialised, one rank).

    q: (2C, heads, d), k, v: (2C, kv heads, d): this rank's tokens, chunks r and 2*CP-1-r of the
    sample (zigzag_shard), the sample padded to 2 * CP * C tokens. Returns this rank's output rows
    (2C, heads, d), equal to the same rows of flash_attn_varlen_func(causal=True) on the whole
    sample, with gradients for q, k and v (each rank gets the gradient of its own tokens). Every
    rank of the group must call it with the same C, heads and d.
    """
    if q.dim() != 3 or k.shape != v.shape or k.dim() != 3 or k.shape[0] != q.shape[0]:
        raise ValueError(f"cp_attention: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}; give "
                         "(2C, heads, d) and (2C, kv heads, d) for this rank's tokens")
    if q.shape[0] % 2:
        raise ValueError(f"cp_attention: {q.shape[0]} local tokens; a rank holds two chunks of equal "
                         "length (pad the sample to a multiple of 2 * cp: cp_padded_length)")
    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** -0.5
    return _CPAttention.apply(q, k, v, group, float(softmax_scale), bool(deterministic))


def register_hf(name: str = "varpack_cp", group=None):
    """Registers cp_attention over `group` (None: the default group) with transformers as
    attention implementation `name`: a model with attn_implementation=name runs every layer's
    attention on the zigzag-split sample of cp_sample_batch. Causal attention only."""
    from .hf import register_varlen_function

    def varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
               softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, **_):
        if not causal or dropout_p or softcap or tuple(window_size) != (-1, -1):
            raise NotImplementedError(f"{name}: context-parallel attention is causal, without dropout, "
                                      "softcap or sliding window")
        return cp_attention(q, k, v, group=group, softmax_scale=softmax_scale)

    return register_varlen_function(name, varlen)
