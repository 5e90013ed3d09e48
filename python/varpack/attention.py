"""Variable-length attention as torch operators, and FlashAttention-2's flash_attn_varlen_func on them.

The operators varpack::varlen_fwd and varpack::varlen_bwd are declared in C++
(python/csrc/attention_op.cpp, which also registers the CPU kernels; the CUDA kernels register into
the same operators). This module adds what torch needs around them: fake implementations, so
torch.compile traces them without running them or breaking the graph, and varlen_bwd's refusal of a
double backward. The autograd of varlen_fwd, and of varpack::varlen_attn (varlen_fwd with the
backward's `deterministic`, which flash_attn_varlen_func calls), is in C++
(python/csrc/attention_autograd.cpp), so a call spends no host time in Python past this module's
argument handling.

Rows past cu_seqlens_q[-1] (and cu_seqlens_k[-1]) belong to no sequence: out is 0 there, lse +inf
(a query that sees no key), and the gradients of those rows of q, k and v are 0.

cu_seqlens contents (starting at 0, monotone, last entry <= rows, lengths <= max_seqlen) are
checked when they are on the CPU; on CUDA they are not read, because that would need a device sync.
"""

from __future__ import annotations

import torch

from . import _C  # noqa: F401  loads the library that declares torch.ops.varpack

__all__ = ["flash_attn_varlen_func"]

_OP_FWD = "varpack::varlen_fwd"
_OP_BWD = "varpack::varlen_bwd"
_OP_ATTN = "varpack::varlen_attn"


@torch.library.register_fake(_OP_FWD)
def _varlen_fwd_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                     causal, window_left, window_right, softcap):
    return q.new_empty(q.shape), q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)


@torch.library.register_fake(_OP_ATTN)
def _varlen_attn_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                      window_left, window_right, softcap, deterministic):
    return _varlen_fwd_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                            causal, window_left, window_right, softcap)


@torch.library.register_fake(_OP_BWD)
def _varlen_bwd_fake(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                     softmax_scale, causal, window_left, window_right, softcap, deterministic):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _no_double_backward(ctx, *grads):
    raise NotImplementedError("varpack attention has no double backward (the gradient of its gradient); "
                              "compute the gradients without create_graph=True")


torch.library.register_autograd(_OP_BWD, _no_double_backward)


def _require_host_int(value, name):
    if isinstance(value, torch.Tensor):
        raise TypeError(f"varpack.flash_attn_varlen_func: {name} must be a Python int, got a tensor; "
                        f"compute it on the host (e.g. from the lengths before moving them to the GPU) "
                        f"so no device sync is needed")
    return value


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """Variable-length attention with FlashAttention-2's signature and semantics.

    q: (total_q, nheads, headdim); k, v: (total_k, nheads_k, headdim) with nheads % nheads_k == 0
    (grouped-query attention: consecutive q heads share a kv head). cu_seqlens_q/k: int32 (batch + 1,),
    the cumulative sequence lengths starting at 0. max_seqlen_q/k: Python ints, the longest sequence.
    softmax_scale: default 1 / sqrt(headdim). causal: aligned to the bottom right of each sequence
    when its q and k lengths differ. window_size: (left, right), -1 = unbounded. softcap: > 0 applies
    softcap * tanh(score / softcap). deterministic: only affects CUDA backward (CPU is always
    deterministic).

    Returns out (total_q, nheads, headdim), or (out, softmax_lse, None) when return_attn_probs is
    true, softmax_lse float32 (nheads, total_q) (the attention probabilities themselves are never
    materialised). Rows past cu_seqlens_q[-1] get out = 0, lse = +inf and zero gradients.

    Not supported (raise NotImplementedError): dropout_p > 0, alibi_slopes.
    """
    if dropout_p != 0.0:
        raise NotImplementedError(f"varpack.flash_attn_varlen_func: dropout_p = {dropout_p} is not supported "
                                  f"(attention dropout is not implemented); pass dropout_p=0.0")
    if alibi_slopes is not None:
        raise NotImplementedError("varpack.flash_attn_varlen_func: alibi_slopes is not supported; pass None "
                                  "(or add ALiBi biases through another attention implementation)")
    if not (isinstance(window_size, (tuple, list)) and len(window_size) == 2):
        raise ValueError(f"varpack.flash_attn_varlen_func: window_size must be a pair (left, right), "
                         f"got {window_size!r}")
    max_seqlen_q = _require_host_int(max_seqlen_q, "max_seqlen_q")
    max_seqlen_k = _require_host_int(max_seqlen_k, "max_seqlen_k")
    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** -0.5
    # As FlashAttention does: the kernels need a unit stride only along the head dimension.
    q, k, v = (x if x.stride(-1) == 1 else x.contiguous() for x in (q, k, v))
    out, lse = torch.ops.varpack.varlen_attn(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                             float(softmax_scale), bool(causal), window_size[0], window_size[1],
                                             float(softcap), bool(deterministic))
    return (out, lse, None) if return_attn_probs else out
