"""Arrow data in: varpack.read_tokens over Parquet, Arrow IPC file and stream, a `datasets`
save_to_disk folder, a folder of Parquet shards, pyarrow Tables (chunked, sliced, large lists) and
datasets.Dataset, against the samples as Python lists; every bad input raises one error naming the
input, the column and the row; the `varpack` command packs a Parquet file as it packs the same
tokens from .npy, and writes nothing when the input is bad.
"""

import gzip
import os
import pathlib
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.feather
import pyarrow.parquet as pq
import pytest

import varpack
from test_token_files import check_samples
from varpack.arrow_tokens import ArrowInputError

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = pathlib.Path(os.environ.get("VARPACK_CLI", ROOT / "build" / "varpack"))
needs_cli = pytest.mark.skipif(not CLI.exists(), reason=f"{CLI} not built (run scripts/setup.sh)")


def random_samples(rng, n=200, max_length=50, vocab=50000):
    # Zero-length and length-1 samples included.
    return [rng.integers(0, vocab, size=int(rng.choice([0, 1, rng.integers(0, max_length + 1)])))
            for _ in range(n)]


def table_of(samples, value_type=pa.int32(), large=False, labels=None):
    list_type = (pa.large_list if large else pa.list_)(value_type)
    columns = {"input_ids": pa.array([list(map(int, s)) for s in samples], type=list_type),
               "text": pa.array([f"sample {i}" for i in range(len(samples))])}
    if labels is not None:
        columns["labels"] = pa.array([list(map(int, s)) for s in labels], type=pa.list_(pa.int64()))
    return pa.table(columns)


def test_parquet_types(tmp_path, rng):
    samples = random_samples(rng)
    for value_type in (pa.int32(), pa.int64(), pa.uint16(), pa.uint32(), pa.int8()):
        for large in (False, True):
            kept = [np.minimum(s, 100) for s in samples] if value_type == pa.int8() else samples
            path = tmp_path / f"data_{value_type}_{large}.parquet"
            pq.write_table(table_of(kept, value_type, large), path, row_group_size=37)
            tokens = varpack.read_tokens(path)
            check_samples(tokens, kept)
            assert tokens.name == str(path)


def test_ipc_file_stream_and_zero_copy(tmp_path, rng):
    samples = random_samples(rng)
    table = pa.concat_tables([table_of(samples[:70]), table_of(samples[70:])])  # two chunks
    pyarrow.feather.write_feather(table, tmp_path / "data.feather", compression="uncompressed")
    with pa.OSFile(str(tmp_path / "data.arrow"), "wb") as sink:  # a stream, as datasets writes
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=33)
    for name in ("data.feather", "data.arrow"):
        tokens = varpack.read_tokens(tmp_path / name)
        check_samples(tokens, samples)
        assert tokens.zero_copy  # int32 values served from the memory-mapped file
    int64 = varpack.read_tokens(table_of(samples, pa.int64()))
    check_samples(int64, samples)
    assert not int64.zero_copy


def test_in_memory_tables(rng):
    samples = random_samples(rng)
    table = pa.concat_tables([table_of(samples[:50]), table_of(samples[50:])])
    check_samples(varpack.read_tokens(table), samples)
    check_samples(varpack.read_tokens(table.slice(13, 101)), samples[13:114])
    check_samples(varpack.read_tokens(table.column("input_ids")), samples)
    check_samples(varpack.read_tokens(table.to_batches()[1].slice(5)), samples[55:])
    renamed = table.rename_columns(["tokens", "text"])
    check_samples(varpack.read_tokens(renamed, column="tokens"), samples)


def test_datasets_dataset_and_folders(tmp_path, rng):
    datasets = pytest.importorskip("datasets")
    samples = random_samples(rng)
    ds = datasets.Dataset(table_of(samples))
    check_samples(varpack.read_tokens(ds), samples)
    shuffled = ds.shuffle(seed=3)  # an indices mapping over the same table
    order = shuffled["text"]
    check_samples(varpack.read_tokens(shuffled), [samples[int(t.split()[1])] for t in order])
    ds.save_to_disk(str(tmp_path / "saved"), max_shard_size="2KB")
    assert len(list((tmp_path / "saved").glob("*.arrow"))) > 1  # rows numbered across shards
    check_samples(varpack.read_tokens(tmp_path / "saved"), samples)
    shards = tmp_path / "shards"
    shards.mkdir()
    pq.write_table(table_of(samples[:80]), shards / "part-0.parquet")
    pq.write_table(table_of(samples[80:]), shards / "part-1.parquet")
    check_samples(varpack.read_tokens(shards), samples)


def test_labels_column(tmp_path, rng):
    samples = random_samples(rng, n=40)
    labels = [np.where(rng.random(len(s)) < 0.3, -100, s) for s in samples]
    path = tmp_path / "data.parquet"
    pq.write_table(table_of(samples, labels=labels), path)
    tokens = varpack.read_tokens(path, labels="labels")
    assert tokens.has_labels
    for i in range(len(samples)):
        np.testing.assert_array_equal(tokens[i]["input_ids"], samples[i])
        np.testing.assert_array_equal(tokens[i]["labels"], labels[i])
    plan = varpack.plan(tokens.lengths, capacity=64)
    as_dicts = [{"input_ids": s, "labels": lab} for s, lab in zip(samples, labels)]
    for key, value in varpack.build_batch(plan, tokens).items():
        expected = varpack.build_batch(plan, as_dicts)[key]
        assert value == expected if isinstance(value, int) else value.equal(expected), key


def test_build_batch_and_datasets_take_arrow(tmp_path, rng):
    samples = random_samples(rng)
    path = tmp_path / "data.parquet"
    pq.write_table(table_of(samples), path, row_group_size=64)
    tokens = varpack.read_tokens(path)
    plan = varpack.plan(tokens.lengths, capacity=128, overlong="split")
    built, reference = varpack.build_batch(plan, tokens), varpack.build_batch(plan, samples)
    for key in ("input_ids", "labels", "position_ids", "cu_seqlens"):
        assert built[key].equal(reference[key]), key
    ds = varpack.BalancedPackedDataset(path, capacity=128, overlong="split", rank=0, world_size=1)
    ref = varpack.BalancedPackedDataset(samples, capacity=128, overlong="split", rank=0, world_size=1)
    assert len(ds) == len(ref) and ds[0]["input_ids"].equal(ref[0]["input_ids"])
    collator = varpack.PackingCollator(capacity=128, overlong="split")
    assert collator(table_of(samples[:9]))["input_ids"].equal(collator(samples[:9])["input_ids"])
    stream = list(varpack.PackedStream(path, capacity=128, overlong="split", buffer_size=64))
    assert sum(int(b["input_ids"].numel()) for b in stream) == tokens.num_tokens


def write_bad(tmp_path, name, table):
    path = tmp_path / name
    pq.write_table(table, path)
    return path


@pytest.mark.parametrize("case, needle", [
    ("missing", "column 'input_ids': no such column; the columns are tokens"),
    ("strings", "column 'input_ids': a column of strings"),
    ("floats", "column 'input_ids': floats"),
    ("nested", "column 'input_ids': nested lists"),
    ("null_row", "column 'input_ids', row 2: the row is null"),
    ("null_token", "column 'input_ids', row 1: token 1 is null"),
    ("negative", "column 'input_ids', row 3: token 0 is -7"),
    ("too_large", "column 'input_ids', row 1: token 2 is 2147483648"),
    ("labels_length", "column 'labels', row 0: 1 labels for 2 input ids"),
    ("labels_value", "column 'labels', row 1: token 0 is -5, not a token id in [0, 2^31) or -100"),
])
def test_bad_parquet(tmp_path, case, needle):
    ids = pa.list_(pa.int64())
    tables = {
        "missing": pa.table({"tokens": pa.array([[1]], ids)}),
        "strings": pa.table({"input_ids": ["a b", "c"]}),
        "floats": pa.table({"input_ids": pa.array([[1.0], [2.5]])}),
        "nested": pa.table({"input_ids": pa.array([[[1, 2]], [[3]]])}),
        "null_row": pa.table({"input_ids": pa.array([[1], [2], None], ids)}),
        "null_token": pa.table({"input_ids": pa.array([[1], [2, None]], ids)}),
        "negative": pa.table({"input_ids": pa.array([[1], [2], [], [-7, 1]], ids)}),
        "too_large": pa.table({"input_ids": pa.array([[1], [2, 3, 2**31]], ids)}),
        "labels_length": pa.table({"input_ids": pa.array([[1, 2]], ids), "labels": pa.array([[1]], ids)}),
        "labels_value": pa.table({"input_ids": pa.array([[1], [2]], ids), "labels": pa.array([[-100], [-5]], ids)}),
    }
    path = write_bad(tmp_path, f"{case}.parquet", tables[case])
    labels = "labels" if case.startswith("labels") else None
    with pytest.raises(ArrowInputError) as error:
        varpack.read_tokens(path, labels=labels)
    assert str(error.value).startswith(f"{path}: ") and needle in str(error.value), str(error.value)


def test_unreadable_inputs(tmp_path, rng):
    path = tmp_path / "data.parquet"
    pq.write_table(table_of(random_samples(rng)), path)
    truncated = tmp_path / "truncated.parquet"
    truncated.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    compressed = tmp_path / "data.parquet.gz"
    compressed.write_bytes(gzip.compress(path.read_bytes()))
    zstd = tmp_path / "data.jsonl.zst"
    zstd.write_bytes(b"\x28\xb5\x2f\xfd" + bytes(16))
    other = tmp_path / "folder"
    other.mkdir()
    (other / "notes.txt").write_text("hello")
    rng_ds = tmp_path / "dict"
    (rng_ds / "train").mkdir(parents=True)
    (rng_ds / "dataset_dict.json").write_text('{"splits": ["train"]}')
    for bad, needle in ((truncated, "not a readable Parquet file"), (compressed, "gzip-compressed"),
                        (tmp_path / "missing.parquet", "no such file or folder"),
                        (zstd, "zstd-compressed; varpack reads uncompressed input: decompress it first"),
                        (other, "a folder varpack does not read (it holds notes.txt)"),
                        (rng_ds, "a DatasetDict folder (splits train); give one split's folder")):
        with pytest.raises(ArrowInputError, match=None) as error:
            varpack.read_tokens(bad)
        assert str(error.value).startswith(f"{bad}: ") and needle in str(error.value), str(error.value)


def run_cli(*args, cwd, env=None):
    return subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          env=None if env is None else {**os.environ, **env})


@needs_cli
def test_cli_parquet_equals_npy(tmp_path, rng):
    samples = random_samples(rng)
    pq.write_table(table_of(samples, pa.int64()), tmp_path / "data.parquet", row_group_size=50)
    flat = np.concatenate(samples).astype(np.int32)
    np.save(tmp_path / "data.npy", flat)
    np.save(tmp_path / "data.offsets.npy", np.concatenate([[0], np.cumsum([len(s) for s in samples])]))
    temp = tmp_path / "tmp"
    temp.mkdir()
    for name in ("data.parquet", "data.npy"):
        r = run_cli("pack", name, "-L", 96, "--overlong", "split", "--seed", 4, "-o", f"{name}.bin",
                    cwd=tmp_path, env={"TMPDIR": str(temp)})
        assert r.returncode == 0, r.stderr
        assert "rows shuffled with seed 4" in r.stdout
    assert (tmp_path / "data.parquet.bin").read_bytes() == (tmp_path / "data.npy.bin").read_bytes()
    stats = [run_cli("stats", name, "-L", 96, "--overlong", "split", cwd=tmp_path) for name in ("data.parquet", "data.npy")]
    assert stats[0].returncode == 0, stats[0].stderr
    assert stats[0].stdout.replace("data.parquet", "data.npy") == stats[1].stdout
    assert not os.listdir(temp)  # the converted copy is gone


@needs_cli
def test_cli_bad_arrow_input_writes_nothing(tmp_path):
    pq.write_table(pa.table({"input_ids": pa.array([[1], [2, -3]])}), tmp_path / "bad.parquet")
    r = run_cli("pack", "bad.parquet", "-L", 8, "-o", "out.bin", cwd=tmp_path)
    assert r.returncode == 1
    assert r.stderr == ("varpack: error: bad.parquet: column 'input_ids', row 1: token 1 is -3, not a "
                        "token id in [0, 2^31)\n")
    r = run_cli("pack", "bad.parquet", "-L", 8, "-o", "out.bin", "--column", "ids", cwd=tmp_path)
    assert "no such column; the columns are input_ids" in r.stderr
    (tmp_path / "x.jsonl.gz").write_bytes(gzip.compress(b'{"input_ids": [1]}\n'))
    r = run_cli("stats", "x.jsonl.gz", "-L", 8, cwd=tmp_path)
    assert r.returncode == 1 and "x.jsonl.gz: gzip-compressed" in r.stderr and "gunzip" in r.stderr
    assert sorted(os.listdir(tmp_path)) == ["bad.parquet", "x.jsonl.gz"]


@needs_cli
def test_cli_order_flags(tmp_path, rng):
    pq.write_table(table_of(random_samples(rng)), tmp_path / "data.parquet")
    kept = run_cli("pack", "data.parquet", "-L", 64, "--keep-order", "-o", "a.bin", cwd=tmp_path)
    assert kept.returncode == 0 and "rows in the planner's order (--keep-order)" in kept.stdout
    both = run_cli("pack", "data.parquet", "-L", 64, "--keep-order", "--seed", 3, "-o", "b.bin", cwd=tmp_path)
    assert both.returncode == 2 and "--seed excludes --keep-order" in both.stderr
    shuffled = run_cli("pack", "data.parquet", "-L", 64, "--shuffle", "-o", "c.bin", cwd=tmp_path)
    assert shuffled.returncode == 0 and "rows shuffled with seed 0" in shuffled.stdout
    assert (tmp_path / "a.bin").read_bytes() != (tmp_path / "c.bin").read_bytes()


def test_cli_helper_needs_no_torch(tmp_path, rng):
    """The command's converter runs in a bare interpreter: numpy and pyarrow only."""
    samples = random_samples(rng, n=20)
    pq.write_table(table_of(samples), tmp_path / "data.parquet")
    script = ROOT / "python" / "varpack" / "arrow_tokens.py"
    code = ("import sys, runpy; sys.modules['torch'] = None; sys.argv = sys.argv[1:]; "
            "runpy.run_path(sys.argv[0], run_name='__main__')")
    r = subprocess.run([sys.executable, "-I", "-c", code, str(script), "to-npy", str(tmp_path / "data.parquet"),
                        str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    check_samples(varpack.read_tokens(tmp_path / "tokens.npy"), samples)


@needs_cli
def test_cli_points_parquet_output_to_export(tmp_path, rng):
    pq.write_table(table_of(random_samples(rng, n=5)), tmp_path / "data.parquet")
    r = run_cli("pack", "data.parquet", "-L", 64, "-o", "rows.parquet", cwd=tmp_path)
    assert r.returncode == 1 and "python -m varpack export data.parquet -L 64 -o rows.parquet" in r.stderr
    assert os.listdir(tmp_path) == ["data.parquet"]
