"""Context parallelism: a packed row of documents (or one long sample) whose attention is split over
the ranks of a process group.

    layout = cp_layout(cu_seqlens, cp)                        # varpack.cp_layout: who holds what
    q = layout.shard(q_row, rank)                             # this rank's tokens (also k, v)
    out = cp_varlen_attention(q, k, v, layout, group=cp_group, causal=True, variant="ring")
    batch = cp_row_batch(input_ids, cu_seqlens, layout, rank) # model inputs for register_hf

A document long enough is cut into 2 * CP chunks (zigzag): rank r holds chunks r and 2CP-1-r, so
causal work is even; shorter documents stay whole on one rank. cp_varlen_attention equals
flash_attn_varlen_func on the whole row (causal or not, sliding window, softcap, GQA / MQA) for
this rank's rows, with gradients, through one of three variants (varpack.cp_variants: allgather,
ring, Ulysses and its ring hybrid; varpack.cp_cost.choose_variant picks one). It is a torch custom
operator, so torch.compile(fullgraph=True) traces it without a break; FSDP2 and activation
checkpointing see an ordinary operator. Before its first collective every call all-gathers a
small descriptor of each rank's arguments (check_preconditions), so ranks that disagree get one
ValueError each instead of a hang or a gloo abort.

The one-sample API of before stays: split_long_samples marks the samples longer than a rank holds
and pads them to a multiple of 2 * CP; cp_sample_batch gives a rank's share (true positions,
labels shifted before the split, pad labels -100); cp_attention runs cp_varlen_attention with a
one-document layout. register_hf() registers the attention as transformers' "varpack_cp".
"""
from __future__ import annotations

import operator
import zlib
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from . import _C  # noqa: F401  registers torch.ops.varpack
from .cp_layout import SPLIT, CPLayout, cp_layout
from .cp_variants import Mask, cp_backward, cp_forward

__all__ = ["CPLayout", "CPSplit", "check_preconditions", "cp_attention", "cp_layout", "cp_padded_length",
           "cp_row_batch", "cp_sample_batch", "cp_varlen_attention", "register_hf", "split_long_samples",
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

VARIANTS = ("allgather", "ring", "ulysses", "hybrid")
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _process_group(group):
    """A ProcessGroup, None (the default group) or a DeviceMesh: a 1-D one, or one with a "cp"
    dimension (cp_schedule.cp_meshes), whose group along that dimension is taken."""
    from torch.distributed.device_mesh import DeviceMesh

    if not isinstance(group, DeviceMesh):
        return group
    names = group.mesh_dim_names or ()
    if group.ndim == 1:
        return group.get_group()
    if "cp" in names:
        return group.get_group("cp")
    raise ValueError(f"context parallelism: a {group.ndim}-D DeviceMesh with dimensions {names}; pass "
                     "its context-parallel dimension (mesh['cp']) or name one of them 'cp'")


def _group_shape(group) -> tuple[int, int]:
    if not (dist.is_available() and dist.is_initialized()):
        return 1, 0
    group = _process_group(group)
    return dist.get_world_size(group), dist.get_rank(group)


def _group_name(group) -> str:
    if not (dist.is_available() and dist.is_initialized()):
        return ""
    return (_process_group(group) or dist.group.WORLD).group_name


def _resolve(name: str):
    return dist.distributed_c10d._resolve_process_group(name) if name else None


@torch.library.custom_op("varpack::cp_attn", mutates_args=())
def _cp_attn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: torch.Tensor, group_name: str, variant: str,
             ulysses: int, window_left: int, window_right: int, softmax_scale: float, softcap: float,
             head_groups: int, check: bool, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor]:
    plan = CPLayout.decode(layout)
    group = _resolve(group_name)
    if check:
        check_preconditions(group, plan, q, k, v, variant, ulysses, (window_left, window_right), softmax_scale,
                            softcap, head_groups)
    mask = Mask(window_left, window_right, softmax_scale, softcap)
    return _unaliased(cp_forward(group, plan, variant, q, k, v, mask, ulysses))


@_cp_attn.register_fake
def _cp_attn_fake(q, k, v, layout, group_name, variant, ulysses, window_left, window_right, softmax_scale, softcap,
                  head_groups, check, deterministic):
    return q.new_empty(q.shape), q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)


@torch.library.custom_op("varpack::cp_attn_bwd", mutates_args=())
def _cp_attn_bwd(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                 lse: torch.Tensor, layout: torch.Tensor, group_name: str, variant: str, ulysses: int,
                 window_left: int, window_right: int, softmax_scale: float, softcap: float, head_groups: int,
                 deterministic: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    mask = Mask(window_left, window_right, softmax_scale, softcap)
    return _unaliased(cp_backward(_resolve(group_name), CPLayout.decode(layout), variant, dout.contiguous(), q, k, v,
                                  out, lse, mask, ulysses, deterministic, head_groups))


def _unaliased(tensors):
    # A custom operator's outputs may not be views (dK and dV are often two halves of one buffer).
    return tuple(t.clone() if t._base is not None else t for t in tensors)


@_cp_attn_bwd.register_fake
def _cp_attn_bwd_fake(dout, q, k, v, out, lse, layout, group_name, variant, ulysses, window_left, window_right,
                      softmax_scale, softcap, head_groups, deterministic):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    q, k, v, *rest = inputs
    ctx.save_for_backward(q, k, v, *output)
    # rest: layout, group_name, variant, ulysses, window_left, window_right, softmax_scale, softcap,
    # head_groups, check, deterministic; the backward takes all but check.
    ctx.layout, ctx.args, ctx.deterministic = rest[0], rest[1:9], rest[10]


def _backward(ctx, dout, dlse):
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = _cp_attn_bwd(dout, q, k, v, out, lse, ctx.layout, *ctx.args, ctx.deterministic)
    return dq, dk, dv, *([None] * 11)


_cp_attn.register_autograd(_backward, setup_context=_setup_context)


def check_preconditions(group, layout: CPLayout, q, k, v, variant, ulysses, window, softmax_scale, softcap,
                        head_groups) -> None:
    """One all-gather of a small descriptor, before any other collective of the call: every rank
    raises the same ValueError naming the rank and value at fault, instead of a collective that
    hangs or aborts on mismatched sizes."""
    cp, rank = _group_shape(group)
    expected = layout.tokens[rank] if rank < layout.cp else -1
    fields = {"cp of the layout": layout.cp, "group size": cp, "query tokens": q.shape[0], "key tokens": k.shape[0],
              "value tokens": v.shape[0], "tokens the layout gives this rank": expected, "heads": q.shape[1],
              "kv heads": k.shape[1], "value heads": v.shape[1], "head dim": q.shape[2], "key head dim": k.shape[2],
              "dtype": _DTYPES.index(q.dtype) if q.dtype in _DTYPES else -1,
              "k/v dtype": int(k.dtype == q.dtype and v.dtype == q.dtype), "variant": VARIANTS.index(variant),
              "ulysses degree": ulysses, "window left": window[0], "window right": window[1],
              "softmax scale": int(np.float64(softmax_scale).view(np.int64)),
              "softcap": int(np.float64(softcap).view(np.int64)), "head groups": head_groups,
              "layout": zlib.crc32(layout.encode().numpy().tobytes())}
    local = torch.tensor(list(fields.values()), dtype=torch.int64)
    if cp > 1:
        device = q.device if dist.get_backend(group) == "nccl" else torch.device("cpu")
        parts = [torch.empty_like(local, device=device) for _ in range(cp)]
        dist.all_gather(parts, local.to(device), group=group)
        table = torch.stack([p.cpu() for p in parts]).tolist()
    else:
        table = [local.tolist()]
    names = list(fields)
    errors = []
    same = [n for n in names if n not in ("query tokens", "key tokens", "value tokens",
                                          "tokens the layout gives this rank")]
    for n in same:
        values = [row[names.index(n)] for row in table]
        if len(set(values)) > 1:
            shown = [_shown(n, x) for x in values]
            errors.append(f"ranks disagree on {n}: " + ", ".join(f"rank {r}: {x}" for r, x in enumerate(shown)))
    for r, row in enumerate(table):
        get = dict(zip(names, row))
        errors += _rank_errors(r, get, variant, ulysses)
    if errors:
        raise ValueError("cp_varlen_attention: " + "; ".join(errors[:6]))


def _shown(name, value):
    if name == "dtype":
        return str(_DTYPES[value]) if value >= 0 else "unsupported"
    if name == "variant":
        return VARIANTS[value]
    if name in ("softmax scale", "softcap"):
        return float(np.int64(value).view(np.float64))
    return value


def _rank_errors(r, get, variant, ulysses) -> list:
    errors = []
    if get["cp of the layout"] != get["group size"]:
        errors.append(f"rank {r}: the layout is for cp={get['cp of the layout']}, the group has {get['group size']} ranks")
    want = get["tokens the layout gives this rank"]
    for n in ("query tokens", "key tokens", "value tokens"):
        if get[n] != want:
            errors.append(f"rank {r}: {get[n]} {n} where the layout gives it {want} (layout.shard(x, rank))")
    if get["dtype"] < 0 or not get["k/v dtype"]:
        errors.append(f"rank {r}: q, k, v must share one dtype of {', '.join(map(str, _DTYPES))}")
    heads, kv_heads = get["heads"], get["kv heads"]
    if kv_heads < 1 or heads % kv_heads or get["value heads"] != kv_heads or get["key head dim"] != get["head dim"]:
        errors.append(f"rank {r}: {heads} heads over {kv_heads} kv heads ({get['value heads']} value heads, head dims "
                      f"{get['head dim']}/{get['key head dim']}); need heads % kv heads == 0 and k, v of one shape")
    elif variant in ("ulysses", "hybrid"):
        cp = get["group size"]
        if cp % ulysses or heads % ulysses or (kv_heads % ulysses and ulysses % kv_heads):
            errors.append(f"rank {r}: {variant} with ulysses degree {ulysses} needs it to divide cp={cp} and "
                          f"heads={heads}, and kv heads={kv_heads} to divide it or be divided by it")
    if get["head groups"] < 1 or kv_heads % get["head groups"]:
        errors.append(f"rank {r}: head_groups={get['head groups']} must divide kv heads={kv_heads}")
    return errors


def cp_varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: CPLayout | torch.Tensor,
                        group=None, causal: bool = True, window_size=(-1, -1), softcap: float = 0.0,
                        softmax_scale=None, variant: str = "allgather", ulysses: int | None = None,
                        head_groups: int = 1, deterministic: bool = False, check: bool = True) -> torch.Tensor:
    """Attention of a packed row of documents, its tokens spread over the ranks of `group` by
    `layout` (cp_layout; or its encode()); equal to flash_attn_varlen_func on the whole row with
    the row's cu_seqlens and the same causal / window_size / softcap, for this rank's rows.

    q: (tokens, heads, d), k, v: (tokens, kv heads, d): layout.shard(row, rank) of each.
    group: a ProcessGroup, None (the default group) or a DeviceMesh, 1-D or with a "cp" dimension.
    variant: "allgather", "ring", "ulysses" (all-to-all over `ulysses` ranks, default all of them)
    or "hybrid" (all-to-all over `ulysses` consecutive ranks, ring across); choose_variant
    (varpack.cp_cost) predicts which is fastest. head_groups: the allgather backward gathers K/V
    for that many groups of KV heads in turn. check: gather a descriptor first so a mismatch
    between ranks is one ValueError on every rank (one small collective per call).
    """
    code = layout if isinstance(layout, torch.Tensor) else layout.encode()
    cp = int(code[0]) if isinstance(layout, torch.Tensor) else layout.cp
    if variant not in VARIANTS:
        raise ValueError(f"cp_varlen_attention: variant {variant!r}; give one of {', '.join(VARIANTS)}")
    if q.dim() != 3 or k.dim() != 3 or v.dim() != 3:
        raise ValueError(f"cp_varlen_attention: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}; give "
                         "(tokens, heads, d) and (tokens, kv heads, d)")
    ulysses = {"allgather": 1, "ring": 1, "ulysses": cp}.get(variant, ulysses) if ulysses is None else ulysses
    if variant == "hybrid" and ulysses is None:
        raise ValueError("cp_varlen_attention: variant 'hybrid' needs ulysses (the all-to-all degree)")
    left, right = (int(w) for w in window_size)
    right = 0 if causal else right
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else float(softmax_scale)
    q, k, v = (x if x.stride(-1) == 1 else x.contiguous() for x in (q, k, v))
    out, _ = _cp_attn(q, k, v, code, _group_name(group), variant, int(ulysses), left, right, scale, float(softcap),
                      int(head_groups), bool(check), bool(deterministic))
    return out


def cp_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group=None, softmax_scale=None,
                 deterministic: bool = False, variant: str = "allgather") -> torch.Tensor:
    """Causal attention of one sample zigzag-split over the ranks of `group` (None: the default
    group; without torch.distributed initialised, one rank).

    q: (2C, heads, d), k, v: (2C, kv heads, d): this rank's tokens, chunks r and 2*CP-1-r of the
    sample (zigzag_shard), the sample padded to 2 * CP * C tokens. Returns this rank's output rows
    (2C, heads, d), equal to the same rows of flash_attn_varlen_func(causal=True) on the whole
    sample, with gradients for q, k and v. cp_varlen_attention with a one-document layout.
    """
    if q.dim() != 3 or q.shape[0] % 2:
        raise ValueError(f"cp_attention: q {tuple(q.shape)}; a rank holds two chunks of equal length, "
                         "(2C, heads, d) (pad the sample to a multiple of 2 * cp: cp_padded_length)")
    cp, _ = _group_shape(group)
    layout = cp_layout([0, cp * q.shape[0]], cp, owner=[SPLIT])
    return cp_varlen_attention(q, k, v, layout, group, softmax_scale=softmax_scale, deterministic=deterministic,
                               variant=variant)


def register_hf(name: str = "varpack_cp", group=None, variant: str = "allgather", **options):
    """Registers context-parallel attention over `group` with transformers as attention
    implementation `name`. The model then takes cp_sample_batch's or cp_row_batch's inputs: the
    layout travels as the keyword `cp_layout` (cp_row_batch) or, without it, the local tokens are
    one zigzag-split sample (cp_sample_batch). options go to cp_varlen_attention."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

    def forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, sliding_window=None,
                softcap=None, is_causal=None, cp_layout=None, **_):
        if dropout:
            raise NotImplementedError(f"{name}: context-parallel attention has no dropout")
        q, k, v = (x[0].transpose(0, 1) for x in (query, key, value))  # (tokens, heads, d); batch of one row
        code = cp_layout
        if code is None:
            cp, _ = _group_shape(group)
            code = CPLayout(cp, (0, cp * q.shape[0]), (SPLIT,)).encode()
        window = (-1, -1) if sliding_window is None else (sliding_window - 1, sliding_window - 1)
        causal = bool(module.is_causal if is_causal is None else is_causal)
        out = cp_varlen_attention(q, k, v, code, group, causal=causal, window_size=window, softcap=softcap or 0.0,
                                  softmax_scale=scaling, variant=variant, **options)
        return out[None], None

    AttentionInterface.register(name, forward)
    AttentionMaskInterface.register(name, flash_attention_mask)
    return forward


def cp_row_batch(input_ids, cu_seqlens, layout: CPLayout, rank: int, labels=None) -> dict:
    """Rank `rank`'s share of one packed row (documents at cu_seqlens) as model inputs [1, tokens]:
    input_ids, position_ids (within each document), shift_labels (each token's next-token target
    inside its document, -100 at a document's last token) and cp_layout (register_hf's attention
    reads it). Labels default to the input ids."""
    ids = torch.as_tensor(np.asarray(input_ids), dtype=torch.long).reshape(-1)
    target = ids if labels is None else torch.as_tensor(np.asarray(labels), dtype=torch.long).reshape(-1)
    cu = [int(c) for c in np.asarray(cu_seqlens).reshape(-1)]
    if tuple(cu) != layout.cu_seqlens or ids.numel() != cu[-1] or target.shape != ids.shape:
        raise ValueError(f"cp_row_batch: {ids.numel()} tokens, {target.numel()} labels, cu_seqlens ending at {cu[-1]}"
                         " and a layout of other documents; build the layout from these cu_seqlens")
    shifted = torch.full_like(target, -100)
    shifted[:-1] = target[1:]
    ends = torch.tensor(cu[1:], dtype=torch.long) - 1
    shifted[ends[ends >= 0]] = -100  # no target across a document boundary
    index = torch.from_numpy(layout.global_index(rank))
    return {"input_ids": ids[index][None], "position_ids": torch.from_numpy(layout.positions(rank))[None],
            "shift_labels": shifted[index][None], "cp_layout": layout.encode()}
