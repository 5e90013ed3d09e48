"""Causal-LM losses on packed batches, with the normalisation stated instead of implied.

Labels follow Hugging Face's convention: aligned with input_ids, the model shifts them (logits at
position t-1 predict labels[t]), and -100 marks positions without a target, among them the first
token of every packed sample, so no target crosses a sample boundary.

Two normalisations (varpack.build_batch returns a weight vector for each, summing to 1):
  per token  ("token"):  sum of token losses / number of labelled tokens. Every token counts the
             same, so long samples dominate. This is what transformers' model(...).loss computes.
  per sample ("sample"): mean over samples of each sample's mean token loss. Every sample counts
             the same, whatever its length; this is what padded training with a per-row mean and
             equal rows gives, and what packing silently changes if nobody chooses.
They agree only when every sample has the same number of labelled tokens.
"""
from __future__ import annotations

import torch

IGNORE_INDEX = -100


def token_losses(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy per label position, shape of `labels`: entry t is the loss of predicting
    labels[..., t] from logits[..., t-1, :]; 0 where labels is IGNORE_INDEX and at t = 0."""
    if logits.shape[:-1] != labels.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and labels {tuple(labels.shape)} disagree: "
                         "logits must be labels' shape plus a vocabulary dimension")
    # Half-precision logits are upcast (as transformers' loss does); float64 stays float64.
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    shifted = torch.nn.functional.cross_entropy(
        logits[..., :-1, :].reshape(-1, logits.shape[-1]),
        labels[..., 1:].reshape(-1), ignore_index=IGNORE_INDEX, reduction="none")
    out = torch.zeros(labels.shape, dtype=shifted.dtype, device=logits.device)
    out[..., 1:] = shifted.view(*labels.shape[:-1], labels.shape[-1] - 1)
    return out


def weighted_loss(logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """sum_t weights[t] * token_losses[t]: pass loss_weight_per_token or loss_weight_per_sample
    from varpack.build_batch (or the collator's "loss_weight") to pick the normalisation."""
    if weights.shape != labels.shape:
        raise ValueError(f"weights {tuple(weights.shape)} must have the labels' shape "
                         f"{tuple(labels.shape)}: one weight per label position")
    losses = token_losses(logits, labels)
    return (losses * weights.to(losses.dtype)).sum()


def per_sample_losses(logits: torch.Tensor, labels: torch.Tensor,
                      cu_seqlens: torch.Tensor) -> torch.Tensor:
    """Mean token loss of each segment of a flattened batch (segments given by cu_seqlens); NaN for
    a segment without labelled tokens (a padding segment, or a sample of one token)."""
    losses = token_losses(logits, labels).reshape(-1)
    counted = (labels.reshape(-1) != IGNORE_INDEX).to(losses.dtype)
    if losses.numel() < int(cu_seqlens[-1]):
        raise ValueError(f"cu_seqlens ends at {int(cu_seqlens[-1])} but the batch has "
                         f"{losses.numel()} tokens")
    segment = torch.repeat_interleave(
        torch.arange(cu_seqlens.numel() - 1, device=losses.device),
        cu_seqlens.diff().to(device=losses.device, dtype=torch.long))
    used = segment.numel()
    sums = torch.zeros(cu_seqlens.numel() - 1, dtype=losses.dtype, device=losses.device)
    counts = torch.zeros_like(sums)
    sums.index_add_(0, segment, losses[:used])
    counts.index_add_(0, segment, counted[:used])
    return sums / counts
