"""Tests for varpack.BalancedPackedDataset: over all ranks and steps every piece of the assigned
rows comes out exactly once (and, without dropping, every token of every sample), each batch holds
the sample's own tokens with positions restarting per segment and labels that do not cross a
segment, every rank has the same number of steps, the order is deterministic per (seed, epoch) and
changes with the epoch, and a TokenFile works as the samples."""
import pickle

import numpy as np
import pytest
import torch

import varpack
from varpack.collator import _BatchFormat

CAPACITY = 96


def make_samples(rng, n, with_labels=False, longest=CAPACITY):
    samples = []
    for _ in range(n):
        ids = rng.integers(0, 5000, size=int(rng.integers(1, longest + 1))).tolist()
        if with_labels:  # a masked prompt of about a third of the sample, as in instruction tuning
            samples.append({"input_ids": ids, "labels": [-100] * (len(ids) // 3) + ids[len(ids) // 3:]})
        else:
            samples.append(ids)
    return samples


def tokens_and_labels(sample):
    if isinstance(sample, dict):
        return list(sample["input_ids"]), list(sample.get("labels", sample["input_ids"]))
    return list(sample), list(sample)


def segments(batch):
    """(sample, offset, length) of every segment of a batch made with return_segments=True, and
    (-1, 0, length) for a padding segment."""
    lengths = batch["cu_seq_lens_q"].diff().tolist()
    return list(zip(batch["segment_sample"].tolist(), batch["segment_offset"].tolist(), lengths))


def check_batch(batch, samples):
    """Each segment holds its sample's tokens, positions 0..n-1, and labels of its own tokens with
    -100 at its first, so no label points across a segment boundary."""
    cu = batch["cu_seq_lens_q"].tolist()
    assert batch["cu_seq_lens_k"].tolist() == cu
    assert batch["input_ids"].shape == batch["labels"].shape == batch["position_ids"].shape == (1, cu[-1])
    for i, (sample, offset, length) in enumerate(segments(batch)):
        span = slice(cu[i], cu[i + 1])
        if sample < 0:  # a padding row (a rank without rows in a partial step): nothing to predict
            assert batch["labels"][0, span].tolist() == [-100] * length
            continue
        tokens, labels = tokens_and_labels(samples[sample])
        assert batch["input_ids"][0, span].tolist() == tokens[offset:offset + length]
        assert batch["position_ids"][0, span].tolist() == list(range(length))
        assert batch["labels"][0, span].tolist() == [-100] + labels[offset + 1:offset + length]
    assert batch["max_length_q"] == batch["max_length_k"] == max(np.diff(cu), default=0)


def all_batches(samples, world_size, epoch=0, **options):
    """Per rank, its list of batches for `epoch`, and rank 0's dataset."""
    per_rank, first = [], None
    for rank in range(world_size):
        ds = varpack.BalancedPackedDataset(samples, CAPACITY, rank=rank, world_size=world_size,
                                           return_segments=True, **options)
        ds.set_epoch(epoch)
        first = first or ds
        per_rank.append([batch for batch in torch.utils.data.DataLoader(ds, batch_size=None, shuffle=False)])
    return per_rank, first


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("rows_per_rank", [1, 3])
@pytest.mark.parametrize("drop_last", [True, False])
def test_ranks_together_emit_every_assigned_piece_once(rng, world_size, rows_per_rank, drop_last):
    # Some samples are longer than a row, so split pieces (offset > 0) go to ranks too.
    samples = make_samples(rng, 157, with_labels=bool(world_size % 2), longest=2 * CAPACITY)
    per_rank, ds = all_batches(samples, world_size, rows_per_rank=rows_per_rank, drop_last=drop_last,
                               overlong="split")
    assert {len(batches) for batches in per_rank} == {ds.balance.num_steps}
    emitted = []
    for rank, batches in enumerate(per_rank):
        for step, batch in enumerate(batches):
            check_batch(batch, samples)
            # The batch is exactly the rows the balance gave this rank, in the plan's layout.
            rows = ds.balance.rows_of(step, rank)
            widths = batch["row_offsets"].diff().tolist()
            if not len(rows):  # no rows for this rank in a partial last step: one padding row
                assert widths == [1] and segments(batch) == [(-1, 0, 1)]
                continue
            assert widths == [int(ds.plan.row(r)[:, 2].sum()) for r in rows]
            assert all(w <= CAPACITY for w in widths)
            emitted += [s for s in segments(batch) if s[0] >= 0]
    assigned = [tuple(p) for r in ds.balance.rows for p in ds.plan.row(r).tolist()]
    assert any(offset > 0 for _, offset, _ in emitted)
    assert len(emitted) == len(set(emitted))
    assert sorted(emitted) == sorted(assigned)
    if not drop_last:  # every token of every sample, once
        covered = [0] * len(samples)
        for sample, offset, length in sorted(emitted):
            assert offset == covered[sample]
            covered[sample] += length
        assert covered == [len(tokens_and_labels(s)[0]) for s in samples]


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_batch_is_the_collator_layout_of_the_selected_rows(rng, world_size):
    samples = make_samples(rng, 90, with_labels=True)
    options = dict(pad_to_multiple=8, pad_token_id=3, loss_normalization="sample", return_loss_weights=True,
                   return_segments=True)
    fmt = _BatchFormat(8, 3, "sample", True, True, True)
    for rank in range(world_size):
        ds = varpack.BalancedPackedDataset(samples, CAPACITY, rank=rank, world_size=world_size, rows_per_rank=2,
                                           seed=5, **options)
        ds.set_epoch(2)
        # The plan is the planner's for the epoch's seed, not one of the dataset's own.
        assert ds.plan == varpack.plan(ds.lengths, CAPACITY, seed=varpack.collator.epoch_seed(5, 2), shuffle=True)
        for step in range(len(ds)):
            expected = fmt.build(varpack.select_rows(ds.plan, ds.balance.rows_of(step, rank)), samples)
            got = ds[step]
            assert got.keys() == expected.keys()
            for key, value in expected.items():
                assert torch.equal(got[key], value) if torch.is_tensor(value) else got[key] == value, key


def step_samples(per_rank):
    return [[batch["segment_sample"].tolist() for batch in batches] for batches in per_rank]


def test_deterministic_per_seed_and_epoch_and_new_order_per_epoch(rng):
    samples = make_samples(rng, 200)
    epoch1 = step_samples(all_batches(samples, 2, epoch=1, seed=7, rows_per_rank=2)[0])
    assert step_samples(all_batches(samples, 2, epoch=1, seed=7, rows_per_rank=2)[0]) == epoch1
    assert step_samples(all_batches(samples, 2, epoch=2, seed=7, rows_per_rank=2)[0]) != epoch1
    assert step_samples(all_batches(samples, 2, epoch=1, seed=8, rows_per_rank=2)[0]) != epoch1
    # set_epoch back to an earlier epoch reproduces it on the same object.
    ds = varpack.BalancedPackedDataset(samples, CAPACITY, rank=1, world_size=2, rows_per_rank=2, seed=7,
                                       return_segments=True)
    ds.set_epoch(1)
    first = [ds[s]["segment_sample"].tolist() for s in range(len(ds))]
    ds.set_epoch(3)
    ds.set_epoch(1)
    assert [ds[s]["segment_sample"].tolist() for s in range(len(ds))] == first == epoch1[1]


def test_balance_is_by_cost(rng):
    """The dataset balances with the balancer's options: lpt is never slower than dealing in order."""
    samples = make_samples(rng, 300)
    lpt = varpack.BalancedPackedDataset(samples, CAPACITY, rank=0, world_size=4, rows_per_rank=2)
    dealt = varpack.BalancedPackedDataset(samples, CAPACITY, rank=0, world_size=4, rows_per_rank=2,
                                          method="round_robin")
    assert lpt.balance.stats["step_time"] <= dealt.balance.stats["step_time"]
    assert lpt.balance.ranks == 4 and lpt.balance.rows_per_rank == 2


def test_token_file_samples(rng, tmp_path):
    lengths = rng.integers(1, CAPACITY + 1, size=60)
    tokens = rng.integers(0, 30000, size=int(lengths.sum())).astype(np.int32)
    np.save(tmp_path / "data.npy", tokens)
    np.save(tmp_path / "data.offsets.npy", np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
    data = varpack.read_tokens(tmp_path / "data.npy")
    as_lists = [data[i].tolist() for i in range(len(data))]
    emitted = []
    for rank in range(2):
        ds = varpack.BalancedPackedDataset(data, CAPACITY, rank=rank, world_size=2, drop_last=False,
                                           return_segments=True)
        assert ds.lengths.tolist() == lengths.tolist()
        for step in range(len(ds)):
            batch = ds[step]
            check_batch(batch, as_lists)
            emitted += batch["segment_sample"].tolist()
    assert sorted(emitted) == list(range(len(lengths)))


def test_given_lengths_are_used(rng):
    samples = make_samples(rng, 40)
    ds = varpack.BalancedPackedDataset(samples, CAPACITY, lengths=[len(s) for s in samples])
    assert ds.plan == varpack.BalancedPackedDataset(samples, CAPACITY).plan
    with pytest.raises(ValueError, match="lengths has shape"):
        varpack.BalancedPackedDataset(samples, CAPACITY, lengths=[1, 2])


def test_defaults_without_torch_distributed(rng):
    assert not torch.distributed.is_initialized()
    ds = varpack.BalancedPackedDataset(make_samples(rng, 30), CAPACITY)
    assert (ds.rank, ds.world_size) == (0, 1)
    assert ds.balance.ranks == 1


def test_defaults_from_an_initialised_process_group(rng, monkeypatch):
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_rank", lambda: 3)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda: 4)
    ds = varpack.BalancedPackedDataset(make_samples(rng, 100), CAPACITY)
    assert (ds.rank, ds.world_size, ds.balance.ranks) == (3, 4, 4)
    assert varpack.BalancedPackedDataset(make_samples(rng, 100), CAPACITY, rank=1).rank == 1


def test_pickles_for_spawned_workers(rng):
    samples = make_samples(rng, 50)
    ds = varpack.BalancedPackedDataset(samples, CAPACITY, rank=1, world_size=2, seed=4, return_segments=True)
    ds.set_epoch(6)
    copy = pickle.loads(pickle.dumps(ds))
    assert copy.epoch == 6 and len(copy) == len(ds)
    for step in range(len(ds)):
        assert torch.equal(copy[step]["input_ids"], ds[step]["input_ids"])


def test_a_rank_without_rows_in_the_partial_last_step_gets_a_padding_row():
    # 3 rows of one sample each over 2 ranks, drop_last=False: step 1 has one row, for one rank.
    samples = [[1] * 90, [2] * 80, [3] * 70]
    batches = [varpack.BalancedPackedDataset(samples, CAPACITY, rank=r, world_size=2, drop_last=False,
                                             pad_token_id=9, return_loss_weights=True)[1] for r in range(2)]
    padding, real = sorted(batches, key=lambda b: b["input_ids"].shape[1])
    assert padding["input_ids"].tolist() == [[9]] and padding["labels"].tolist() == [[-100]]
    assert padding["loss_weight"].tolist() == [[0.0]]
    assert real["input_ids"].shape[1] in (90, 80, 70)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(rank=2, world_size=2), ValueError, "rank=2 is outside"),
    (dict(rank=-1, world_size=2), ValueError, "rank=-1 is outside"),
    (dict(rank=0, world_size=0), ValueError, "world_size=0"),
    (dict(capacity=0), ValueError, "capacity=0"),
    (dict(rows_per_rank=0), ValueError, "rows_per_rank must be >= 1"),
    (dict(rank=0, world_size=64, rows_per_rank=4), ValueError, "fill no step of world_size=64"),
    (dict(overlong="error", capacity=8), ValueError, "longer than the capacity 8"),
    (dict(loss_normalization="mean"), ValueError, "loss_normalization='mean'"),
])
def test_errors_name_the_argument(rng, kwargs, error, message):
    options = dict(capacity=CAPACITY)
    options.update(kwargs)
    with pytest.raises(error, match=message):
        varpack.BalancedPackedDataset(make_samples(rng, 30), **options)


def test_empty_dataset_and_step_out_of_range(rng):
    with pytest.raises(ValueError, match="samples is empty"):
        varpack.BalancedPackedDataset([], CAPACITY)
    ds = varpack.BalancedPackedDataset(make_samples(rng, 30), CAPACITY)
    with pytest.raises(IndexError, match=f"step {len(ds)} is out of range; epoch 0 has {len(ds)} steps"):
        ds[len(ds)]
    with pytest.raises(IndexError, match="step -1"):
        ds[-1]
