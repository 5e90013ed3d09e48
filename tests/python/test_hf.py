"""Tests for varpack.hf: after varpack.hf.register(), a transformers Llama model created with
attn_implementation="varpack" (tiny config, random weights, no download) trains on packed batches
with no other change: per-sample losses equal the same samples run one by one, whichever way the
sequence boundaries arrive (the collator's cu_seq_lens, position_ids alone, a padding mask, plain
rows), and no sample's logits depend on another sample in the same packed row."""
import pytest
import torch
from transformers import DataCollatorWithFlattening, LlamaConfig, LlamaForCausalLM

import varpack.hf
from varpack.collator import PackingCollator
from varpack.loss import per_sample_losses

# Odd lengths on purpose, with 1 and 2 (a sample without a target, one with a single target).
LENGTHS = [37, 1, 54, 97, 2, 13, 64, 65]


def rel_close(a, b, rtol):
    """|a - b| <= rtol * max(1, |b|) elementwise, NaNs in the same places."""
    assert torch.equal(a.isnan(), b.isnan())
    a, b = a.nan_to_num(), b.nan_to_num()
    worst = ((a - b).abs() / b.abs().clamp(min=1)).max().item()
    assert worst <= rtol, f"relative difference {worst:.3g} > {rtol:.3g}"


@pytest.fixture(scope="module")
def model():
    varpack.hf.register()
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         attn_implementation="varpack")
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def samples():
    generator = torch.Generator().manual_seed(1)
    return [torch.randint(0, 300, (n,), generator=generator) for n in LENGTHS]


def one_by_one(model, samples, attn="sdpa"):
    model.config._attn_implementation = attn
    try:
        losses = []
        for s in samples:
            logits = model(input_ids=s[None]).logits
            labels = torch.cat([torch.tensor([-100]), s[1:]])[None]
            losses.append(per_sample_losses(logits, labels, torch.tensor([0, len(s)], dtype=torch.int32)))
        return torch.cat(losses)
    finally:
        model.config._attn_implementation = "varpack"


def test_register_adds_the_implementation(model):
    from transformers import AttentionInterface
    assert "varpack" in AttentionInterface._global_mapping
    assert model.config._attn_implementation == "varpack"


@torch.no_grad()
def test_packed_batch_matches_samples_one_by_one(model, samples):
    batch = PackingCollator(capacity=128, return_segments=True)([{"input_ids": s} for s in samples])
    order = batch.pop("segment_sample")
    for key in ("segment_offset", "row_offsets"):
        batch.pop(key)
    out = model(**batch)
    packed = per_sample_losses(out.logits, batch["labels"], batch["cu_seq_lens_q"])
    by_sample = torch.empty_like(packed)
    by_sample[order] = packed
    # float32: a different summation order moves a loss of ~5.7 by a few ulps (1 ulp = 4.8e-7).
    rel_close(by_sample, one_by_one(model, samples), 1e-6)


@torch.no_grad()
def test_position_ids_alone_give_the_same_result(model, samples):
    features = [{"input_ids": s.tolist()} for s in samples]
    with_kwargs = DataCollatorWithFlattening(return_flash_attn_kwargs=True, return_tensors="pt")(features)
    only_positions = DataCollatorWithFlattening(return_tensors="pt")(features)
    assert "cu_seq_lens_q" not in only_positions
    a = model(**with_kwargs).logits
    b = model(**only_positions).logits
    assert torch.equal(a, b)


@torch.no_grad()
def test_padding_mask_path_matches_sdpa(model, samples):
    width = max(LENGTHS)
    ids = torch.zeros(len(samples), width, dtype=torch.long)
    mask = torch.zeros(len(samples), width, dtype=torch.long)
    for i, s in enumerate(samples):
        ids[i, :len(s)] = s
        mask[i, :len(s)] = 1
    ours = model(input_ids=ids, attention_mask=mask).logits
    model.config._attn_implementation = "sdpa"
    try:
        theirs = model(input_ids=ids, attention_mask=mask).logits
    finally:
        model.config._attn_implementation = "varpack"
    valid = mask.bool()
    rel_close(ours[valid], theirs[valid], 1e-5)


@torch.no_grad()
def test_automatic_layouts_give_the_same_losses(model, samples):
    # The collator's automatic choice changes only the layout: padded rows (fixed-length kernel)
    # and the packed row (varlen kernel) give the same per-sample losses, same model, no change.
    from varpack.auto import CostModel, PathChooser
    cheap, dear = CostModel(alpha=1e-9, beta=0.0), CostModel(alpha=1.0, beta=1.0)
    features = [{"input_ids": s} for s in samples]
    padded = PackingCollator(chooser=PathChooser(cheap, dear))(features)
    packed = PackingCollator(chooser=PathChooser(dear, cheap), return_segments=True)(features)
    assert padded["input_ids"].shape == (len(samples), 104)  # 97 rounded up to a multiple of 8
    order = packed.pop("segment_sample")
    for key in ("segment_offset", "row_offsets"):
        packed.pop(key)
    logits = model(**packed).logits
    packed_losses = torch.empty(len(samples))
    packed_losses[order] = per_sample_losses(logits, packed["labels"], packed["cu_seq_lens_q"])
    padded_logits = model(**padded).logits
    padded_losses = torch.stack([
        per_sample_losses(padded_logits[i:i + 1, :n], padded["labels"][i:i + 1, :n],
                          torch.tensor([0, n], dtype=torch.int32))[0]
        for i, n in enumerate(LENGTHS)])
    rel_close(packed_losses, padded_losses, 1e-6)


def test_cached_decoding_aligns_causal_bottom_right(model):
    # Fewer queries than keys (a KV cache): query i sees keys up to i + (keys - queries), as
    # FlashAttention aligns it; checked against a plain softmax on a mask.
    attention = varpack.hf.make_attention_forward(varpack.flash_attn_varlen_func)
    generator = torch.Generator().manual_seed(3)
    q = torch.randn(2, 4, 3, 16, generator=generator)
    k, v = (torch.randn(2, 2, 7, 16, generator=generator) for _ in range(2))
    out, _ = attention(model.model.layers[0].self_attn, q, k, v, None, scaling=0.25, is_causal=True)
    kk, vv = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    scores = (q @ kk.transpose(-1, -2)) * 0.25
    allowed = torch.ones(3, 7, dtype=torch.bool).tril(diagonal=4)
    expected = (scores.masked_fill(~allowed, float("-inf")).softmax(-1) @ vv).transpose(1, 2)
    rel_close(out, expected, 1e-5)


@torch.no_grad()
def test_plain_rows_are_causal_sequences(model):
    ids = torch.randint(0, 300, (3, 40), generator=torch.Generator().manual_seed(2))
    ours = model(input_ids=ids).logits
    model.config._attn_implementation = "sdpa"
    try:
        theirs = model(input_ids=ids).logits
    finally:
        model.config._attn_implementation = "varpack"
    rel_close(ours, theirs, 1e-5)


@torch.no_grad()
def test_no_sample_sees_another(model, samples):
    collator = PackingCollator(capacity=None)
    base = collator([{"input_ids": s} for s in samples])
    changed = [s.clone() for s in samples]
    changed[3] = (changed[3] + 1) % 300  # the longest sample, packed first by best-fit-decreasing
    other = collator([{"input_ids": s} for s in changed])
    a, b = model(**base).logits[0], model(**other).logits[0]
    cu = base["cu_seq_lens_q"].tolist()
    differs = [not torch.equal(a[x:y], b[x:y]) for x, y in zip(cu[:-1], cu[1:])]
    assert differs == [n == LENGTHS[3] for n in torch.tensor(cu).diff().tolist()]


def test_rejects_a_4d_mask(model):
    attention = varpack.hf.make_attention_forward(lambda *a, **k: None)
    q = torch.zeros(1, 4, 5, 16)
    with pytest.raises(ValueError, match="2D padding mask"):
        attention(model.model.layers[0].self_attn, q, q, q, torch.ones(1, 1, 5, 5, dtype=torch.bool))
