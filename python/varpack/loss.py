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

Data parallel: each rank's weights sum to 1 over its own batch, and DDP / FSDP average gradients
over ranks, so ranks with fewer tokens would weigh their tokens more than one process holding every
rank's rows does. global_count all-reduces the step's denominator once (predicted tokens, HF's
num_items_in_batch; or samples), and data_parallel_loss divides each rank's sum by it times the
world size: the averaged gradient is then that one process's (tests/python/test_trainer_ddp.py
checks it over 2 gloo processes; HF Trainer does the same for tokens, see varpack.trainer).
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


def count_targets(batch: dict, normalization: str = "token") -> torch.Tensor:
    """What a batch contributes to the loss's denominator (int64 scalar): its predicted tokens
    (labels other than -100 after the model's shift, HF's num_items_in_batch), or with
    normalization="sample" its segments (cu_seq_lens_q; rows of a padded batch) holding one."""
    labels = batch["labels"]
    counted = labels[..., 1:] != IGNORE_INDEX
    if normalization == "token":
        return counted.sum()
    if normalization != "sample":
        raise ValueError(f"normalization={normalization!r}: choose \"token\" or \"sample\"")
    if "cu_seq_lens_q" not in batch:
        return counted.any(dim=-1).sum()
    flat = torch.nn.functional.pad(counted.reshape(-1), (1, 0))
    cu = batch["cu_seq_lens_q"].to(device=flat.device, dtype=torch.long)
    per_segment = torch.nn.functional.pad(flat.cumsum(0), (1, 0))[cu]
    return (per_segment.diff() > 0).sum()


def global_count(batches, normalization: str = "token", group=None) -> torch.Tensor:
    """count_targets summed over this step's micro-batches and over the data-parallel ranks of
    `group`: one all-reduce per step. Every rank gets the same number, the loss's denominator."""
    batches = [batches] if isinstance(batches, dict) else list(batches)
    total = sum(count_targets(b, normalization).to(torch.int64) for b in batches)
    total = torch.as_tensor(total, dtype=torch.int64, device=batches[0]["labels"].device)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.all_reduce(total, group=group)
    return total


def data_parallel_loss(logits: torch.Tensor, labels: torch.Tensor, count, *, normalization: str = "token",
                       cu_seqlens: torch.Tensor | None = None, group=None) -> torch.Tensor:
    """This rank's share of the step's loss, for DDP and FSDP (which average gradients over the
    ranks): sum of this rank's token losses (or, with normalization="sample", of its samples'
    mean token losses; cu_seqlens gives the segments) / count x world size, where count is
    global_count(...) of the step. The averaged gradient is then one process's on every rank's
    rows, and the mean of this value over ranks is that process's loss; a rank with only padding
    rows contributes 0. Per micro-batch of an accumulated step, pass the step's count to each."""
    world = torch.distributed.get_world_size(group) if (torch.distributed.is_available()
                                                        and torch.distributed.is_initialized()) else 1
    if normalization == "token":
        local = token_losses(logits, labels).sum()
    elif normalization == "sample":
        if cu_seqlens is None:
            raise ValueError("normalization=\"sample\" needs cu_seqlens (the batch's cu_seq_lens_q)")
        local = per_sample_losses(logits, labels, cu_seqlens).nansum()
    else:
        raise ValueError(f"normalization={normalization!r}: choose \"token\" or \"sample\"")
    return local * world / torch.as_tensor(count, device=local.device).clamp(min=1)
