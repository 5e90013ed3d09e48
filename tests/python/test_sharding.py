"""The sampler contract (varpack.sharding) for every varpack dataset, in one process: ranks given
as arguments get disjoint rows and together every row once per epoch, the same number of steps,
never an empty batch (a padding row without targets instead); set_epoch reaches persistent
DataLoader workers; state_dict / load_state_dict resume mid-epoch exactly with a plain DataLoader
(any num_workers on either side) and with torchdata's StatefulDataLoader. And the packed-file
dataset's batches are the batch builder's layout of the file's rows."""
import json
import os
import pathlib
import subprocess

import numpy as np
import pytest
import torch

import varpack
from varpack.collator import epoch_seed

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = pathlib.Path(os.environ.get("VARPACK_CLI", ROOT / "build" / "varpack"))
needs_cli = pytest.mark.skipif(not CLI.exists(), reason=f"{CLI} not built (run scripts/setup.sh)")
CAPACITY = 64


def make_samples(seed=0, n=150):
    rng = np.random.default_rng(seed)
    samples = []
    for i in range(n):
        ids = rng.integers(0, 1000, size=int(rng.integers(1, CAPACITY + 1))).tolist()
        labels = [-100 if rng.random() < 0.2 else t for t in ids]
        samples.append({"input_ids": ids, "labels": labels})
    return samples


def pack_file(tmp_path, samples, *options):
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(s) + "\n" for s in samples))
    out = tmp_path / "packed.bin"
    subprocess.run([str(CLI), "pack", str(src), "--capacity", str(CAPACITY), "--out", str(out), *options],
                   check=True, capture_output=True)
    return out


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    if not CLI.exists():
        pytest.skip(f"{CLI} not built (run scripts/setup.sh)")
    return pack_file(tmp_path_factory.mktemp("packed"), make_samples())


def balanced(rank, world, **options):
    return varpack.BalancedPackedDataset(make_samples(), CAPACITY, rank=rank, world_size=world, rows_per_rank=2,
                                         drop_last=False, seed=3, return_segments=True, **options)


def file_dataset(path):
    def make(rank, world, **options):
        return varpack.PackedFileDataset(path, rank=rank, world_size=world, rows_per_rank=2, drop_last=False,
                                         seed=3, return_segments=True, **options)
    return make


def stream(rank, world, **options):
    return varpack.PackedStream(make_samples(), CAPACITY, rows_per_batch=2, buffer_size=40, seed=3, rank=rank,
                                world_size=world, return_segments=True, **options)


@pytest.fixture(params=["balanced", "file", "stream"])
def make(request, packed):
    return {"balanced": balanced, "file": file_dataset(packed), "stream": stream}[request.param]


def loader(ds, num_workers=0, **options):
    return torch.utils.data.DataLoader(ds, batch_size=None, num_workers=num_workers, **options)


def pieces(batch):
    """The tokens of each segment, padding (segment_sample -1) left out: a stream numbers samples
    within its buffer, so a sample is known by its tokens (random, so distinct)."""
    cu, ids = batch["cu_seq_lens_q"].tolist(), batch["input_ids"][0].tolist()
    return [tuple(ids[a:b]) for a, b, s in zip(cu, cu[1:], batch["segment_sample"].tolist()) if s >= 0]


def same(a, b):
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]) if torch.is_tensor(a[key]) else a[key] == b[key], key


@pytest.mark.parametrize("world", [1, 2, 3])
def test_ranks_see_every_row_once_with_equal_steps_and_no_empty_batch(make, world):
    per_rank = [list(loader(make(rank, world))) for rank in range(world)]
    assert len({len(batches) for batches in per_rank}) == 1
    seen = []
    for batches in per_rank:
        for batch in batches:
            assert batch["input_ids"].shape[1] > 0
            seen += pieces(batch)
    assert sorted(seen) == sorted(tuple(s["input_ids"]) for s in make_samples())


def test_a_rank_short_of_rows_gets_a_padding_row_without_targets(make):
    # Some of these world sizes leave ranks without rows in the last step.
    padding = []
    for world in range(5, 12):
        batches = [list(loader(make(rank, world, return_loss_weights=True, pad_token_id=5))) for rank in range(world)]
        assert len({len(b) for b in batches}) == 1
        padding += [b for rank in batches for b in rank if not pieces(b)]
    assert padding, "some rank should have had no rows in a last step"
    for b in padding:
        assert b["input_ids"].tolist() == [[5]] and b["labels"].tolist() == [[-100]]
        assert b["loss_weight"].sum() == 0 and b["segment_sample"].tolist() == [-1]
        assert b["cu_seq_lens_q"].tolist() == [0, 1] and b["max_length_q"] == 1


def epochs(ds, lo, n, **options):
    out = []
    it = loader(ds, **options)
    for epoch in range(lo, lo + n):
        ds.set_epoch(epoch)
        out.append([pieces(b) for b in it])
    return out


def test_set_epoch_reaches_persistent_workers(make):
    expected = epochs(make(1, 2), 0, 3)
    assert expected[0] != expected[1] != expected[2]
    assert epochs(make(1, 2), 0, 3, num_workers=2, persistent_workers=True) == expected
    assert epochs(make(1, 2), 4, 1, num_workers=2, persistent_workers=True, multiprocessing_context="spawn") == \
        epochs(make(1, 2), 4, 1)


@pytest.mark.parametrize("workers", [(0, 2), (2, 0), (2, 3)])
def test_plain_dataloader_resumes_mid_epoch_with_any_num_workers(make, workers):
    ds = make(0, 2)
    ds.set_epoch(2)
    full = list(loader(ds))
    k = len(full) // 2
    first = make(0, 2)
    first.set_epoch(2)
    for step, batch in enumerate(loader(first, num_workers=workers[0])):
        same(batch, full[step])
        if step + 1 == k:
            state = first.state_dict(steps_done=step + 1)
            break
    assert (state["epoch"], state["step"]) == (2, k)
    resumed = make(0, 2)
    resumed.load_state_dict(state)
    resumed.set_epoch(2)  # the loop's set_epoch of the saved epoch keeps the position
    rest = list(loader(resumed, num_workers=workers[1]))
    assert len(rest) == len(full) - k
    for a, b in zip(rest, full[k:]):
        same(a, b)
    resumed.set_epoch(3)  # the next epoch starts at its first step
    assert [pieces(b) for b in loader(resumed)] == epochs(make(0, 2), 3, 1)[0]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_torchdata_stateful_dataloader_resumes_mid_epoch(make, num_workers):
    from torchdata.stateful_dataloader import StatefulDataLoader

    ds = make(1, 2)
    ds.set_epoch(1)
    full = list(loader(ds))
    k = len(full) // 2 + 1
    first = make(1, 2)
    first.set_epoch(1)
    stateful = StatefulDataLoader(first, batch_size=None, num_workers=num_workers)
    it = iter(stateful)
    consumed = [next(it) for _ in range(k)]
    saved = stateful.state_dict()
    del it, stateful
    resumed = make(1, 2)  # torchdata restores the epoch, the pass's start and its own count ...
    if num_workers:
        resumed.set_epoch(1)  # ... in the workers: the main process's copy sizes the pass
    again = StatefulDataLoader(resumed, batch_size=None, num_workers=num_workers)
    again.load_state_dict(saved)
    rest = list(again)
    for a, b in zip(consumed + rest, full):
        same(a, b)
    assert len(consumed) + len(rest) == len(full)


def test_state_from_another_layout_is_refused(make):
    state = make(0, 2).state_dict()
    with pytest.raises(ValueError, match="world_size=2"):
        make(0, 3).load_state_dict(state)
    with pytest.raises(ValueError, match="no \\['step'\\]"):
        make(0, 2).load_state_dict({"epoch": 1})


@needs_cli
@pytest.mark.parametrize("normalization", ["token", "sample"])
def test_file_batches_are_the_batch_builders_layout_of_the_file_rows(tmp_path, normalization):
    samples = make_samples(seed=1, n=90)
    path = pack_file(tmp_path, samples, "--overlong", "split", "--shuffle", "--seed", "5")
    # The command packs with the planner: the file's rows are this plan's, row by row.
    plan = varpack.plan([len(s["input_ids"]) for s in samples], CAPACITY, overlong="split", shuffle=True, seed=5)
    f = varpack.PackedFile(path)
    assert f.num_rows == plan.num_rows
    for r in range(f.num_rows):
        assert np.array_equal(f.row(r).samples, plan.row(r))
    ds = varpack.PackedFileDataset(path, rank=1, world_size=2, rows_per_rank=3, pad_to_multiple=8, pad_token_id=7,
                                   loss_normalization=normalization, return_loss_weights=True, return_segments=True,
                                   seed=11)
    ds.set_epoch(2)
    order = np.random.default_rng(epoch_seed(11, 2)).permutation(f.num_rows)
    assert np.array_equal(ds.order, order)
    for step in range(len(ds)):
        rows = order[ds.balance.rows_of(step, 1)]
        same(ds[step], ds.format.build(varpack.select_rows(plan, rows), samples))
