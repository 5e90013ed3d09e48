"""Loss parity, the mission's correctness claim, on the CPU: with the same weights, a packed batch
(attn_implementation="varpack") and the same samples padded (SDPA with a padding mask) give the
same per-sample losses and the same gradients. And the two loss normalisations: per token (what
transformers' model(...).loss computes) and per sample differ exactly as documented in varpack.loss.

Tolerances. float64: losses agree to 1e-12; gradients to 1e-7 relative to the largest gradient of
each tensor, because the kernel keeps the softmax log-sum-exp in float32 (FlashAttention's
convention) and the backward recomputes the probabilities from it. float32: losses agree to 1e-6
relative (a loss near 5.7 has an ulp of 4.8e-7, and packed and padded matmuls sum in different
orders, so an absolute 1e-6 would ask for 2 ulps); gradients to 2e-6 relative to each tensor's
largest gradient.
"""
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import varpack
import varpack.hf
from varpack.collator import PackingCollator
from varpack.loss import per_sample_losses, token_losses, weighted_loss

LENGTHS = [37, 1, 54, 97, 2, 13, 64, 65, 128]


def make_model(dtype):
    varpack.hf.register()
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         attn_implementation="varpack")
    return LlamaForCausalLM(config).to(dtype)


def make_samples(lengths, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 300, (n,), generator=generator) for n in lengths]


def packed_losses_and_grads(model, samples):
    """Per-sample mean losses in sample order, and the gradient of their sum."""
    model.config._attn_implementation = "varpack"
    batch = PackingCollator(capacity=128, return_segments=True)([{"input_ids": s} for s in samples])
    order = batch.pop("segment_sample")
    for key in ("segment_offset", "row_offsets"):
        batch.pop(key)
    logits = model(**batch).logits
    losses = torch.empty(len(samples), dtype=logits.dtype)
    losses[order] = per_sample_losses(logits, batch["labels"], batch["cu_seq_lens_q"])
    return losses.detach(), gradient(model, losses)


def padded_losses_and_grads(model, samples):
    model.config._attn_implementation = "sdpa"
    width = max(len(s) for s in samples)
    ids = torch.zeros(len(samples), width, dtype=torch.long)
    labels = torch.full((len(samples), width), -100)
    mask = torch.zeros(len(samples), width, dtype=torch.long)
    for i, s in enumerate(samples):
        ids[i, :len(s)], labels[i, 1:len(s)], mask[i, :len(s)] = s, s[1:], 1
    tokens = token_losses(model(input_ids=ids, attention_mask=mask).logits, labels)
    losses = tokens.sum(1) / (labels != -100).sum(1)
    return losses.detach(), gradient(model, losses)


def gradient(model, losses):
    model.zero_grad()
    torch.nansum(losses).backward()  # a sample of one token has no target: its loss is NaN
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    return grads


@pytest.mark.parametrize("dtype, loss_rtol, grad_rtol", [(torch.float32, 1e-6, 2e-6),
                                                          (torch.float64, 1e-12, 1e-7)])
def test_packed_and_padded_agree(dtype, loss_rtol, grad_rtol):
    model = make_model(dtype)
    samples = make_samples(LENGTHS)
    packed, packed_grads = packed_losses_and_grads(model, samples)
    padded, padded_grads = padded_losses_and_grads(model, samples)
    assert torch.equal(packed.isnan(), padded.isnan()) and packed.isnan().sum() == 1
    worst = ((packed - padded).abs() / padded.abs().clamp(min=1)).nan_to_num().max().item()
    assert worst <= loss_rtol, f"per-sample losses differ by {worst:.3g} (relative)"
    for name, g in padded_grads.items():
        scale = g.abs().max().clamp(min=1e-30)
        worst = ((packed_grads[name] - g).abs().max() / scale).item()
        assert worst <= grad_rtol, f"{name}: gradients differ by {worst:.3g} of the largest"


@torch.no_grad()
def test_parity_is_not_vacuous():
    # The same per-sample losses expose a model that lets samples see each other: plain causal
    # attention over the whole packed row, positions not restarted (packing without varlen).
    model = make_model(torch.float64)
    batch = PackingCollator()([{"input_ids": s} for s in make_samples(LENGTHS)])
    correct = per_sample_losses(model(**batch).logits, batch["labels"], batch["cu_seq_lens_q"])
    model.config._attn_implementation = "sdpa"
    leaky_logits = model(input_ids=batch["input_ids"]).logits
    leaky = per_sample_losses(leaky_logits, batch["labels"], batch["cu_seq_lens_q"])
    assert (leaky - correct).abs().nan_to_num().max() > 1e-3


@torch.no_grad()
def test_per_token_and_per_sample_normalisation():
    model = make_model(torch.float64)
    samples = make_samples([5, 40, 120, 17])
    built = varpack.build_batch(varpack.plan([len(s) for s in samples], 256), samples)
    kwargs = {"input_ids": built["input_ids"][None], "position_ids": built["position_ids"][None],
              "cu_seq_lens_q": built["cu_seqlens"], "cu_seq_lens_k": built["cu_seqlens"],
              "max_length_q": built["max_seqlen"], "max_length_k": built["max_seqlen"]}
    labels = built["labels"][None]
    out = model(**kwargs, labels=labels)
    per_token = weighted_loss(out.logits, labels, built["loss_weight_per_token"][None])
    per_sample = weighted_loss(out.logits, labels, built["loss_weight_per_sample"][None])
    samples_mean = per_sample_losses(out.logits, labels, built["cu_seqlens"])
    tokens = token_losses(out.logits, labels)
    # Per token is transformers' own loss: the mean over every labelled token of the batch.
    # (The weights are float32, so agreement is to float32 precision.)
    assert per_token.item() == pytest.approx(out.loss.item(), rel=1e-6)
    assert per_token.item() == pytest.approx((tokens.sum() / (labels != -100).sum()).item(), rel=1e-6)
    # Per sample is the mean of the samples' mean losses: the 5-token sample weighs as much as
    # the 120-token one.
    assert per_sample.item() == pytest.approx(samples_mean.mean().item(), rel=1e-6)
    # They differ when lengths differ, by the length-weighting of the per-sample means.
    labelled = torch.tensor([n - 1 for n in built["cu_seqlens"].diff().tolist()], dtype=torch.float64)
    assert per_token.item() == pytest.approx(
        ((samples_mean * labelled).sum() / labelled.sum()).item(), rel=1e-6)
    assert abs(per_token.item() - per_sample.item()) > 1e-4


@torch.no_grad()
def test_normalisations_agree_for_equal_lengths():
    model = make_model(torch.float64)
    samples = make_samples([30, 30, 30])
    built = varpack.build_batch(varpack.plan([30] * 3, 128), samples)
    kwargs = {"input_ids": built["input_ids"][None], "position_ids": built["position_ids"][None],
              "cu_seq_lens_q": built["cu_seqlens"], "cu_seq_lens_k": built["cu_seqlens"],
              "max_length_q": built["max_seqlen"], "max_length_k": built["max_seqlen"]}
    logits = model(**kwargs).logits
    labels = built["labels"][None]
    a = weighted_loss(logits, labels, built["loss_weight_per_token"][None])
    b = weighted_loss(logits, labels, built["loss_weight_per_sample"][None])
    assert a.item() == pytest.approx(b.item(), rel=1e-6)


@pytest.mark.parametrize("normalization", ["token", "sample"])
def test_data_parallel_loss_on_one_process_is_the_builders_weighting(rng, normalization):
    """Without a process group, data_parallel_loss / global_count is the weighted loss with the
    batch builder's weights, and count_targets counts what those weights spread over."""
    from varpack.loss import count_targets, data_parallel_loss, global_count, weighted_loss

    lengths = [1, 5, 9, 2, 17]
    samples = [{"input_ids": rng.integers(0, 50, n).tolist(), "labels": [-100] * (n // 2) + rng.integers(0, 50, n - n // 2).tolist()}
               for n in lengths]
    batch = varpack.PackingCollator(return_loss_weights=True, loss_normalization=normalization)(samples)
    logits = torch.randn(*batch["input_ids"].shape, 50, dtype=torch.float64)
    count = global_count(batch, normalization)
    segments = batch["cu_seq_lens_q"].diff().tolist()
    labelled = [int((batch["labels"][0, a + 1:b] != -100).sum()) for a, b in
                zip(batch["cu_seq_lens_q"][:-1].tolist(), batch["cu_seq_lens_q"][1:].tolist())]
    assert len(segments) == len(lengths)
    assert int(count) == int(count_targets(batch, normalization)) == (
        sum(labelled) if normalization == "token" else sum(n > 0 for n in labelled))
    got = data_parallel_loss(logits, batch["labels"], count, normalization=normalization,
                             cu_seqlens=batch["cu_seq_lens_q"])
    torch.testing.assert_close(got, weighted_loss(logits, batch["labels"], batch["loss_weight"]))
