"""Packed rows out as Parquet / a datasets.Dataset with TRL's packed columns: every row equals the
batch builder's row of the plan, in the order drawn from (seed, epoch) or the planner's; position_ids
are what TRL rebuilds from seq_lengths; a packed .bin exports the same rows as its plan; a failed
export leaves no file; `python -m varpack export` prints the order it used.
"""

import os
import pathlib
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import varpack
from varpack import export
from varpack.__main__ import main as varpack_main

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = pathlib.Path(os.environ.get("VARPACK_CLI", ROOT / "build" / "varpack"))


def random_samples(rng, n=300, max_length=90):
    return [rng.integers(0, 1000, size=int(rng.choice([0, 1, rng.integers(0, max_length + 1)])))
            for _ in range(n)]


def expected_rows(plan, samples):
    """Row r of the plan, from build_batch one row at a time: the reference."""
    rows = []
    for r in range(plan.num_rows):
        b = varpack.build_batch(plan, samples, rows=(r, r + 1))
        rows.append({"input_ids": b["input_ids"].tolist(), "labels": b["labels"].tolist(),
                     "position_ids": b["position_ids"].tolist(),
                     "seq_lengths": np.diff(b["cu_seqlens"].numpy()).tolist()})
    return rows


def check_trl_consistency(row):
    positions = np.concatenate([np.arange(n) for n in row["seq_lengths"]])
    assert positions.tolist() == row["position_ids"]  # what TRL's collator rebuilds
    assert all(label == -100 for label, p in zip(row["labels"], positions) if p == 0)
    assert sum(row["seq_lengths"]) == len(row["input_ids"])


@pytest.mark.parametrize("order", ["shuffle", "planner"])
def test_parquet_rows_match_builder(tmp_path, rng, order, monkeypatch):
    monkeypatch.setattr(export, "TOKENS_PER_CHUNK", 500)  # many chunks
    samples = random_samples(rng)
    plan = varpack.plan([len(s) for s in samples], capacity=128, overlong="split")
    path = tmp_path / "rows.parquet"
    assert export.write_parquet(plan, samples, path, order=order, seed=5, epoch=2) == plan.num_rows
    table = pq.read_table(path)
    assert table.schema == export.SCHEMA
    permutation = export.row_order(plan.num_rows, order, seed=5, epoch=2)
    reference = expected_rows(plan, samples)
    assert table.to_pylist() == [reference[r] for r in permutation]
    for row in table.to_pylist():
        check_trl_consistency(row)
    if order == "planner":
        assert permutation.tolist() == list(range(plan.num_rows))
    else:
        assert sorted(permutation.tolist()) == list(range(plan.num_rows))
        assert permutation.tolist() != list(range(plan.num_rows))
        assert export.row_order(plan.num_rows, seed=5, epoch=3).tolist() != permutation.tolist()
        assert export.row_order(plan.num_rows, seed=6, epoch=2).tolist() != permutation.tolist()


def test_labels_kept_and_dataset(tmp_path, rng):
    datasets = pytest.importorskip("datasets")
    samples = random_samples(rng, n=50)
    with_labels = [{"input_ids": s, "labels": np.where(s % 3 == 0, -100, s)} for s in samples]
    plan = varpack.plan([len(s) for s in samples], capacity=100)
    ds = export.packed_dataset(plan, with_labels, order="planner")
    assert isinstance(ds, datasets.Dataset) and len(ds) == plan.num_rows
    assert ds.to_list() == expected_rows(plan, with_labels)


@pytest.mark.skipif(not CLI.exists(), reason=f"{CLI} not built (run scripts/setup.sh)")
def test_packed_bin_exports_its_rows(tmp_path, rng):
    samples = random_samples(rng)
    pq.write_table(pa.table({"input_ids": pa.array([s.tolist() for s in samples], pa.list_(pa.int32()))}),
                   tmp_path / "data.parquet")
    r = subprocess.run([str(CLI), "pack", "data.parquet", "-L", "128", "--keep-order", "-o", "p.bin"],
                       cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    export.write_parquet(varpack.PackedFile(tmp_path / "p.bin"), path=tmp_path / "rows.parquet", order="planner")
    plan = varpack.plan([len(s) for s in samples], capacity=128)
    assert pq.read_table(tmp_path / "rows.parquet").to_pylist() == expected_rows(plan, samples)
    cli = subprocess.run([sys.executable, "-m", "varpack", "export", "p.bin", "-o", "shuffled.parquet",
                          "--seed", "9"], cwd=tmp_path, capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    assert "shuffled with seed 9, epoch 0" in cli.stdout
    shuffled = pq.read_table(tmp_path / "shuffled.parquet").to_pylist()
    assert shuffled == [expected_rows(plan, samples)[r] for r in export.row_order(plan.num_rows, seed=9)]


def test_cli_export_plans_token_data(tmp_path, rng, monkeypatch, capsys):
    samples = random_samples(rng, n=60)
    pq.write_table(pa.table({"ids": pa.array([s.tolist() for s in samples], pa.list_(pa.int64()))}),
                   tmp_path / "data.parquet")
    monkeypatch.chdir(tmp_path)

    def run(*args):  # `python -m varpack export ARGS`, in this process (torch imports once)
        status = varpack_main(["export", *args])
        out, err = capsys.readouterr()
        return status, out, err

    status, out, err = run("data.parquet", "-L", "100", "--column", "ids", "--keep-order", "-o", "rows.parquet")
    assert status == 0, err
    assert "in the planner's order (--keep-order)" in out
    plan = varpack.plan([len(s) for s in samples], capacity=100)
    assert pq.read_table(tmp_path / "rows.parquet").to_pylist() == expected_rows(plan, samples)
    status, out, err = run("data.parquet", "-L", "100", "-o", "bad.parquet")  # no input_ids column
    assert status == 1 and "column 'input_ids': no such column" in err
    status, out, err = run("data.parquet", "-L", "100", "--column", "ids", "--keep-order", "--epoch", "2",
                           "-o", "x.parquet")
    assert status == 1 and "--epoch has no effect with --keep-order" in err
    assert sorted(os.listdir(tmp_path)) == ["data.parquet", "rows.parquet"]


def test_failed_export_leaves_nothing(tmp_path, rng):
    samples = random_samples(rng, n=20)
    plan = varpack.plan([len(s) for s in samples], capacity=100)
    with pytest.raises(ValueError):
        export.write_parquet(plan, samples[:3], tmp_path / "rows.parquet")  # too few samples
    assert os.listdir(tmp_path) == []


def test_trl_collator_reads_exported_rows(tmp_path, rng):
    """TRL's padding-free collator turns exported rows into the batch varpack builds from them."""
    trl_sft = pytest.importorskip("trl.trainer.sft_trainer")
    samples = random_samples(rng, n=80)
    plan = varpack.plan([len(s) for s in samples], capacity=128)
    export.write_parquet(plan, samples, tmp_path / "rows.parquet", order="planner")
    rows = pq.read_table(tmp_path / "rows.parquet").to_pylist()[2:5]
    got = trl_sft.DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True)(rows)
    want = varpack.build_batch(plan, samples, rows=(2, 5))
    for key in ("input_ids", "labels", "position_ids"):
        assert got[key][0].tolist() == want[key].tolist(), key
    assert got["cu_seq_lens_q"].tolist() == want["cu_seqlens"].tolist()
