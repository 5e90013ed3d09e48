"""Tests for varpack.collator: the map-style collator emits exactly what transformers'
DataCollatorWithFlattening emits for the same samples in the packed order, respects the capacity
and over-length policy, is deterministic per (seed, epoch), and weighs the loss as asked; the
stream packer emits every sample once, from a bounded buffer, deterministically, in whole batches,
also across DataLoader workers."""
import itertools

import numpy as np
import pytest
import torch
from transformers import DataCollatorWithFlattening

import varpack

from varpack.auto import PADDED, VARLEN, CostModel, PathChooser
from varpack.collator import PackedStream, PackingCollator, epoch_seed, pad_rows

LENGTHS = [37, 1, 54, 97, 2, 13, 64, 63, 65, 5]


def make_features(lengths, seed=0, with_labels=False):
    rng = np.random.default_rng(seed)
    features = []
    for n in lengths:
        ids = rng.integers(0, 1000, size=n).tolist()
        feature = {"input_ids": ids}
        if with_labels:  # a prompt of ~a third of the sample is masked, as in instruction tuning
            feature["labels"] = [-100] * (n // 3) + ids[n // 3:]
        features.append(feature)
    return features


@pytest.mark.parametrize("with_labels", [False, True])
def test_matches_hf_flattening_in_packed_order(with_labels):
    features = make_features(LENGTHS, with_labels=with_labels)
    ours = PackingCollator(capacity=None, return_segments=True)(features)
    order = ours["segment_sample"].tolist()
    assert sorted(order) == list(range(len(features)))
    theirs = DataCollatorWithFlattening(return_flash_attn_kwargs=True, return_tensors="pt")(
        [features[i] for i in order])
    for key in ("input_ids", "labels", "position_ids"):
        assert ours[key].dtype == torch.int64 and ours[key].shape == (1, sum(LENGTHS))
        assert torch.equal(ours[key], torch.as_tensor(theirs[key])), key
    for key in ("cu_seq_lens_q", "cu_seq_lens_k"):
        assert ours[key].dtype == torch.int32
        assert ours[key].tolist() == torch.as_tensor(theirs[key]).tolist()
    assert ours["max_length_q"] == ours["max_length_k"] == theirs["max_length_q"] == max(LENGTHS)
    assert isinstance(ours["max_length_q"], int)


def test_rows_respect_capacity_and_hold_every_sample_once():
    rng = np.random.default_rng(1)
    lengths = rng.integers(1, 129, size=200).tolist()
    batch = PackingCollator(capacity=128, return_segments=True)(make_features(lengths))
    widths = batch["row_offsets"].diff()
    assert (widths <= 128).all() and int(widths.sum()) == sum(lengths)
    assert sorted(batch["segment_sample"].tolist()) == list(range(len(lengths)))
    seg_lengths = batch["cu_seq_lens_q"].diff().tolist()
    assert seg_lengths == [lengths[s] for s in batch["segment_sample"].tolist()]
    # The rows are the planner's (best-fit-decreasing by default), not a Python re-packing.
    assert len(widths) == varpack.plan(lengths, 128).stats["rows"]


def test_pad_to_multiple_adds_a_padding_segment_without_labels():
    batch = PackingCollator(capacity=None, pad_to_multiple=16, pad_token_id=7, return_segments=True,
                            return_loss_weights=True)(make_features([5, 6]))
    total = batch["input_ids"].shape[1]
    assert total == 16
    assert batch["segment_sample"].tolist()[-1] == -1
    assert (batch["input_ids"][0, 11:] == 7).all() and (batch["labels"][0, 11:] == -100).all()
    assert (batch["loss_weight"][0, 11:] == 0).all()


def test_overlong_policies():
    features = make_features([10, 300, 20])
    with pytest.raises(ValueError, match="sample 1"):
        PackingCollator(capacity=128)(features)
    split = PackingCollator(capacity=128, overlong="split", return_segments=True)(features)
    pieces = split["cu_seq_lens_q"].diff().tolist()
    assert sum(pieces) == 330 and max(pieces) <= 128
    assert split["segment_sample"].tolist().count(1) == 3
    truncated = PackingCollator(capacity=128, overlong="truncate")(features)
    assert truncated["input_ids"].shape[1] == 10 + 128 + 20


def test_deterministic_per_seed_and_epoch():
    features = make_features(np.random.default_rng(2).integers(1, 60, size=300).tolist())
    collator = PackingCollator(capacity=64, shuffle=True, seed=5, return_segments=True)
    first = collator(features)
    again = collator(features)
    assert all(torch.equal(first[k], again[k]) for k in ("input_ids", "segment_sample"))
    collator.set_epoch(1)
    other = collator(features)
    assert not torch.equal(first["segment_sample"], other["segment_sample"])
    assert sorted(first["segment_sample"].tolist()) == sorted(other["segment_sample"].tolist())
    assert epoch_seed(5, 0) != epoch_seed(5, 1) != epoch_seed(6, 0)


def test_loss_weights_per_token_and_per_sample():
    features = make_features([4, 9, 30])
    token = PackingCollator(return_loss_weights=True, return_segments=True)(features)
    sample = PackingCollator(return_loss_weights=True, return_segments=True,
                             loss_normalization="sample")(features)
    labelled = token["labels"][0] != -100
    w = token["loss_weight"][0]
    assert w.sum().item() == pytest.approx(1.0)
    assert torch.allclose(w[labelled], torch.full_like(w[labelled], 1.0 / labelled.sum().item()))
    assert (w[~labelled] == 0).all()
    ws = sample["loss_weight"][0]
    cu = sample["cu_seq_lens_q"].tolist()
    for a, b in zip(cu[:-1], cu[1:]):  # each sample's weights sum to 1/3, whatever its length
        assert ws[a:b].sum().item() == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="loss_normalization"):
        PackingCollator(loss_normalization="row")


def test_rejects_bad_input():
    with pytest.raises(ValueError, match="empty batch"):
        PackingCollator()([])
    with pytest.raises(ValueError, match="capacity"):
        PackingCollator(capacity=0)
    with pytest.raises(ValueError, match="sample 1"):
        PackingCollator()([[1, 2], 5])


def chooser(prefer):
    # Cost models that make `prefer` the faster path for any batch.
    cheap, dear = CostModel(alpha=1e-9, beta=0.0), CostModel(alpha=1.0, beta=1.0, overhead=1.0)
    return PathChooser(cheap, dear) if prefer == PADDED else PathChooser(dear, cheap)


def test_chooser_picks_the_layout():
    features = make_features([7, 30, 12], with_labels=True)
    padded_collator = PackingCollator(chooser=chooser(PADDED), return_loss_weights=True)
    padded = padded_collator(features)
    assert padded_collator.last_decision.path == PADDED
    assert padded["input_ids"].shape == padded["labels"].shape == (3, 32)  # 30 rounded up to 8
    assert "cu_seq_lens_q" not in padded and "attention_mask" not in padded
    for row, f in enumerate(features):  # input order, right-padded, prompt labels kept -100
        n = len(f["input_ids"])
        assert padded["input_ids"][row, :n].tolist() == f["input_ids"]
        assert padded["labels"][row, 1:n].tolist() == f["labels"][1:]
        assert (padded["labels"][row, n:] == -100).all() and (padded["input_ids"][row, n:] == 0).all()
    assert padded["loss_weight"].sum().item() == pytest.approx(1.0)
    packed_collator = PackingCollator(chooser=chooser(VARLEN))
    packed = packed_collator(features)
    assert packed_collator.last_decision.path == VARLEN
    assert packed["input_ids"].shape == (1, 49) and "cu_seq_lens_q" in packed


def test_pad_rows():
    flat = torch.tensor([1, 2, 3, 4, 5, 6])
    out = pad_rows(flat, torch.tensor([0, 2, 2, 6]), 4, -1)
    assert out.tolist() == [[1, 2, -1, -1], [-1, -1, -1, -1], [3, 4, 5, 6]]
    with pytest.raises(ValueError, match="does not fit"):
        pad_rows(flat, torch.tensor([0, 6]), 4, -1)
    with pytest.raises(ValueError, match="padded_multiple"):
        PackingCollator(padded_multiple=0)


def tagged_samples(lengths):
    """Sample i holds the token i + 1 repeated, so every emitted segment names its sample."""
    return [[i + 1] * n for i, n in enumerate(lengths)]


def emitted_samples(batches):
    seen = []
    for batch in batches:
        cu = batch["cu_seq_lens_q"].tolist()
        ids = batch["input_ids"][0]
        for a, b in zip(cu[:-1], cu[1:]):
            segment = ids[a:b]
            assert (segment == segment[0]).all(), "a segment mixes two samples"
            seen.append((int(segment[0]) - 1, b - a))
    return seen


class CountingIterable:
    """An iterable that records how far it has been read."""

    def __init__(self, samples):
        self.samples = samples
        self.read = 0

    def __iter__(self):
        for sample in self.samples:
            self.read += 1
            yield sample


@pytest.mark.parametrize("rows_per_batch", [1, 3])
def test_stream_emits_every_sample_once_in_whole_batches(rows_per_batch):
    lengths = np.random.default_rng(3).integers(1, 200, size=500).tolist()
    stream = PackedStream(tagged_samples(lengths), capacity=256, rows_per_batch=rows_per_batch,
                          buffer_size=64, return_segments=True)
    batches = list(stream)
    assert sorted(emitted_samples(batches)) == list(enumerate(lengths))
    rows = [len(b["row_offsets"]) - 1 for b in batches]
    widths = torch.cat([b["row_offsets"].diff() for b in batches])
    assert (widths <= 256).all()
    assert all(r <= rows_per_batch for r in rows)
    assert sum(r < rows_per_batch for r in rows) <= 1  # only the final flush may be short
    # Holding under-filled rows back keeps the row count near the lower bound ceil(tokens / 256).
    assert len(widths) <= -(-sum(lengths) // 256) * 1.05 + rows_per_batch


def test_stream_buffer_is_bounded():
    source = CountingIterable(tagged_samples([50] * 1000))
    stream = iter(PackedStream(source, capacity=256, buffer_size=32))
    next(stream)
    assert source.read <= 32


def test_stream_is_deterministic_per_epoch():
    lengths = np.random.default_rng(4).integers(1, 100, size=300).tolist()
    stream = PackedStream(tagged_samples(lengths), capacity=128, buffer_size=50, seed=9)
    first = [b["input_ids"] for b in stream]
    again = [b["input_ids"] for b in stream]
    assert len(first) == len(again) and all(torch.equal(a, b) for a, b in zip(first, again))
    stream.set_epoch(1)
    other = [b["input_ids"] for b in stream]
    assert any(not torch.equal(a, b) for a, b in itertools.zip_longest(
        first, other, fillvalue=torch.empty(0, dtype=torch.int64)))


def test_stream_with_dataloader_workers_gives_every_sample_once():
    lengths = np.random.default_rng(5).integers(1, 100, size=120).tolist()
    stream = PackedStream(tagged_samples(lengths), capacity=128, buffer_size=16)
    loader = torch.utils.data.DataLoader(stream, batch_size=None, num_workers=2)
    assert sorted(emitted_samples(loader)) == list(enumerate(lengths))


def test_stream_rejects_bad_options():
    with pytest.raises(ValueError, match="buffer_size"):
        PackedStream([], capacity=8, buffer_size=0)
    with pytest.raises(ValueError, match="min_fill"):
        PackedStream([], capacity=8, min_fill=1.5)


def test_zero_length_samples_are_skipped():
    batch = PackingCollator(return_segments=True)(make_features([5, 0, 7]))
    assert sorted(batch["segment_sample"].tolist()) == [0, 2]
    assert batch["input_ids"].shape == (1, 12)


def test_stream_splits_overlong_samples_and_keeps_every_token():
    lengths = [300, 20, 513, 40, 90]
    stream = PackedStream(tagged_samples(lengths), capacity=128, overlong="split", buffer_size=3,
                          shuffle=False)
    tokens = {}
    for sample, n in emitted_samples(stream):
        tokens[sample] = tokens.get(sample, 0) + n
    assert tokens == dict(enumerate(lengths))
