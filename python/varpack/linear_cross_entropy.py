"""Cross-entropy of a linear head's logits without ever holding the whole logits.

A causal LM's loss is cross_entropy(hidden @ weight.T, targets). Done plainly, a step of 16k
tokens and a vocabulary of 32000 holds [16k, 32000] logits in bf16, their float32 upcast and the
float32 gradient: about 5 GiB, and four memory passes over each. Here the tokens go through in
chunks: each chunk's logits are made, turned into the chunk's loss and its gradient with respect to
the logits, and multiplied straight into the gradients of hidden and weight, then dropped. The
backward only scales what the forward already computed (the approach of Liger Kernel's fused linear
cross-entropy, written here in plain torch so that it runs, and is tested, on the CPU too).

Targets are already aligned with the rows of hidden (row t predicts targets[t]); -100 marks rows
without a target (the last token of every packed sample, and padding).
"""
from __future__ import annotations

import torch

IGNORE_INDEX = -100
DEFAULT_CHUNK_TOKENS = 4096  # a [4096, 32000] float32 chunk is 0.5 GiB


def _compute_dtype(hidden: torch.Tensor) -> torch.dtype:
    if torch.is_autocast_enabled(hidden.device.type):
        return torch.get_autocast_dtype(hidden.device.type)
    return hidden.dtype


def _chunk_loss_and_grad(logits: torch.Tensor, targets: torch.Tensor, with_grad: bool):
    """The summed token losses of one chunk's logits [C, V] and, with_grad, their gradient with
    respect to the logits (softmax - one_hot(target), zero on uncounted rows) in the logits' dtype;
    without, None."""
    # The softmax in float32 at least (float64 stays float64), as transformers' loss upcasts.
    x = logits.to(torch.promote_types(logits.dtype, torch.float32))
    lse = torch.logsumexp(x, dim=-1)
    counted = targets != IGNORE_INDEX
    safe_targets = torch.where(counted, targets, 0)
    target_logit = x.gather(1, safe_targets[:, None]).squeeze(1)
    loss = ((lse - target_logit) * counted).sum()
    if not with_grad:
        return loss, None
    one_hot = torch.arange(x.shape[1], device=x.device) == safe_targets[:, None]
    grad = (torch.exp(x - lse[:, None]) - one_hot.to(x.dtype)) * counted[:, None]
    return loss, grad.to(logits.dtype)


_compiled_chunk_loss_and_grad = None


def _chunk_function(device: torch.device):
    """On CUDA the chunk's elementwise work compiled into a few fused passes (eager: about eight
    passes over [4096, 32000] floats); elsewhere the eager function."""
    global _compiled_chunk_loss_and_grad
    if device.type != "cuda":
        return _chunk_loss_and_grad
    if _compiled_chunk_loss_and_grad is None:
        _compiled_chunk_loss_and_grad = torch.compile(_chunk_loss_and_grad, dynamic=True)
    return _compiled_chunk_loss_and_grad


class _LinearCrossEntropy(torch.autograd.Function):
    """Sum over rows of the token losses, with both gradients computed chunk by chunk in forward."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, chunk_tokens, compute_dtype, with_grad):
        w = weight.to(compute_dtype)
        # needs_input_grad ignores torch.no_grad(): evaluation passes with_grad=False instead.
        needs_hidden_grad = with_grad and ctx.needs_input_grad[0]
        needs_weight_grad = with_grad and ctx.needs_input_grad[1]
        accumulate_dtype = torch.promote_types(compute_dtype, torch.float32)
        grad_hidden = torch.empty_like(hidden) if needs_hidden_grad else None
        grad_weight = (torch.zeros_like(weight, dtype=accumulate_dtype) if needs_weight_grad
                       else None)
        total = hidden.new_zeros((), dtype=accumulate_dtype)
        loss_and_grad = _chunk_function(hidden.device)
        for begin in range(0, hidden.shape[0], chunk_tokens):
            h = hidden[begin:begin + chunk_tokens].to(compute_dtype)
            loss, grad_logits = loss_and_grad(h @ w.T, targets[begin:begin + chunk_tokens],
                                              needs_hidden_grad or needs_weight_grad)
            total += loss
            if grad_hidden is not None:
                grad_hidden[begin:begin + chunk_tokens] = grad_logits @ w
            if grad_weight is not None:
                grad_weight += grad_logits.T @ h
        ctx.save_for_backward(grad_hidden, grad_weight)
        return total

    @staticmethod
    def backward(ctx, grad_total):
        grad_hidden, grad_weight = ctx.saved_tensors
        if grad_hidden is not None:
            grad_hidden = grad_hidden * grad_total.to(grad_hidden.dtype)
        if grad_weight is not None:
            grad_weight = grad_weight * grad_total
        return grad_hidden, grad_weight, None, None, None, None


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                         num_items_in_batch: int | torch.Tensor | None = None,
                         chunk_tokens: int = DEFAULT_CHUNK_TOKENS) -> torch.Tensor:
    """cross_entropy(hidden @ weight.T, targets) with Hugging Face's reduction: the mean over
    counted targets, or their sum divided by num_items_in_batch when given (the global count over
    gradient-accumulation steps and ranks, see Trainer). hidden [..., H], weight [V, H], targets
    hidden's shape without H. Under autocast the products run in the autocast dtype and the
    softmax in float32, as the model's own lm_head + loss would."""
    if hidden.shape[:-1] != targets.shape:
        raise ValueError(f"linear_cross_entropy: hidden {tuple(hidden.shape)} and targets "
                         f"{tuple(targets.shape)} disagree: hidden must be targets' shape plus H")
    if weight.dim() != 2 or weight.shape[1] != hidden.shape[-1]:
        raise ValueError(f"linear_cross_entropy: weight {tuple(weight.shape)} must be "
                         f"[vocab, {hidden.shape[-1]}]")
    if chunk_tokens < 1:
        raise ValueError(f"linear_cross_entropy: chunk_tokens={chunk_tokens} must be >= 1")
    flat_hidden = hidden.reshape(-1, hidden.shape[-1])
    flat_targets = targets.reshape(-1).to(hidden.device)
    with_grad = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    total = _LinearCrossEntropy.apply(flat_hidden, weight, flat_targets, chunk_tokens,
                                      _compute_dtype(hidden), with_grad)
    if num_items_in_batch is None:
        # A device-side count: no host sync (a batch without targets gives NaN, as torch's mean).
        return total / (flat_targets != IGNORE_INDEX).sum()
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(total.device)
    return total / num_items_in_batch


def shift_labels(labels: torch.Tensor) -> torch.Tensor:
    """Hugging Face's causal shift: position t is scored on labels[t + 1], the last on nothing."""
    return torch.nn.functional.pad(labels[..., 1:], (0, 1), value=IGNORE_INDEX)
