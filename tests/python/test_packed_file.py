"""The numpy reader of the packed binary format, against the JSONL output of the same pack.

Runs the `varpack` command (build/varpack, or $VARPACK_CLI) to pack one random JSONL input both
ways, then checks that python/varpack/packed_file.py returns the JSONL rows exactly, and that it
rejects truncated and corrupt files. The reader is loaded from the source tree by path: it is
numpy-only and must not need the compiled extension.
"""

import importlib.util
import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = pathlib.Path(os.environ.get("VARPACK_CLI", ROOT / "build" / "varpack"))

_spec = importlib.util.spec_from_file_location("packed_file", ROOT / "python/varpack/packed_file.py")
packed_file = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(packed_file)

needs_cli = pytest.mark.skipif(not CLI.exists(), reason=f"{CLI} not built (run scripts/setup.sh)")


def write_input(path, seed, n=400, max_length=300):
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        for _ in range(n):
            ids = rng.integers(0, 50000, rng.integers(0, max_length + 1)).tolist()
            record = {"input_ids": ids}
            if rng.random() < 0.5:
                record["labels"] = [-100 if rng.random() < 0.3 else i for i in ids]
            f.write(json.dumps(record) + "\n")


def pack(tmp_path, *options):
    src = tmp_path / "in.jsonl"
    if not src.exists():
        write_input(src, seed=3)
    outputs = []
    for name in ("out.jsonl", "out.bin"):
        out = tmp_path / name
        subprocess.run([str(CLI), "pack", str(src), "--out", str(out), *options],
                       check=True, capture_output=True)
        outputs.append(out)
    return outputs


@needs_cli
@pytest.mark.parametrize("options", [
    ("--capacity", "512"),
    ("--capacity", "128", "--overlong", "split", "--algorithm", "ffd", "--shuffle", "--seed", "5"),
    ("--capacity", "300", "--algorithm", "dynamic", "--batch-size", "4"),
])
def test_reader_matches_jsonl(tmp_path, options):
    jsonl, binary = pack(tmp_path, *options)
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    f = packed_file.PackedFile(binary)
    assert len(f) == len(rows) > 0
    assert f.capacity == int(options[1])
    assert f.num_samples == 400
    assert f.num_tokens == sum(len(r["input_ids"]) for r in rows)
    for r, want in enumerate(rows):
        got = f.row(r)
        for field in ("input_ids", "labels", "position_ids", "cu_seqlens"):
            np.testing.assert_array_equal(getattr(got, field), want[field], err_msg=f"row {r} {field}")
        np.testing.assert_array_equal(got.samples, np.array(want["samples"]).reshape(-1, 3))
        assert got.cu_seqlens.dtype == np.int32
    # The flat arrays are the rows laid end to end.
    np.testing.assert_array_equal(f.input_ids, np.concatenate([r["input_ids"] for r in rows]))
    assert f.max_seqlen == max(s[2] for r in rows for s in r["samples"])


@needs_cli
def test_reader_rejects_corrupt_files(tmp_path):
    _, binary = pack(tmp_path, "--capacity", "512")
    data = binary.read_bytes()
    bad = tmp_path / "bad.bin"
    cases = {
        "shorter than the header": data[:100],
        "truncated": data[:-8],
        "bad magic": b"X" + data[1:],
        "version 7": data[:8] + (7).to_bytes(4, "little") + data[12:],
    }
    pieces_at = int.from_bytes(data[72 + 8 * 6:72 + 8 * 7], "little")
    flipped = bytearray(data)
    flipped[pieces_at + 16] ^= 1  # the first piece's length
    cases["disagree with cu_seqlens"] = bytes(flipped)
    cases["it says it is 64 bytes long"] = data[:12] + (64).to_bytes(4, "little") + data[16:]
    max_seqlen = int.from_bytes(data[56:64], "little")
    cases["max_seqlen is"] = data[:56] + (max_seqlen + 1).to_bytes(8, "little") + data[64:]
    # A token count the file cannot hold, in a file of 197 bytes that says so: the input_ids
    # section (always at 192) would be 5 bytes, no whole number of int32.
    odd = bytearray(data[:197])
    odd[48:56] = (1 << 60).to_bytes(8, "little")  # num_tokens
    odd[64:72] = (197).to_bytes(8, "little")  # file_bytes
    cases["section labels is not where"] = bytes(odd)
    for phrase, content in cases.items():
        bad.write_bytes(content)
        with pytest.raises(packed_file.PackedFileError, match=phrase):
            packed_file.PackedFile(bad)
    with pytest.raises(IndexError):
        packed_file.PackedFile(binary).row(10**6)


def write_per_format_doc(rows, capacity, num_samples):
    """The binary file for packed JSONL rows, written from docs/FORMAT.md alone (rows of a packer
    all have width `capacity`)."""
    input_ids = np.array([t for r in rows for t in r["input_ids"]], "<i4")
    labels = np.array([t for r in rows for t in r["labels"]], "<i4")
    positions = np.array([t for r in rows for t in r["position_ids"]], "<i4")
    pieces = np.array([s for r in rows for s in r["samples"]], "<i8").reshape(-1, 3)
    cu_seqlens = np.concatenate([[0], np.cumsum(pieces[:, 2])]).astype("<i8")
    row_offsets = np.concatenate([[0], np.cumsum([len(r["input_ids"]) for r in rows])]).astype("<i8")
    row_pieces = np.concatenate([[0], np.cumsum([len(r["samples"]) for r in rows])]).astype("<i8")
    row_width = np.full(len(rows), capacity, "<i8")
    sections = [input_ids, labels, positions, cu_seqlens, row_offsets, row_pieces, pieces, row_width]
    body, offsets, at = b"", [], 192
    for s in sections:
        pad = -at % 64
        body += b"\0" * pad
        offsets.append(at + pad)
        body += s.tobytes()
        at += pad + s.nbytes
    header = b"VARPACKB" + np.array([1, 192], "<u4").tobytes()
    header += np.array([capacity, num_samples, len(rows), len(pieces), len(input_ids),
                        int(pieces[:, 2].max())], "<i8").tobytes()
    header += np.array([at] + offsets, "<u8").tobytes()
    return header + b"\0" * (192 - len(header)) + body


@needs_cli
def test_format_doc_describes_the_file_exactly(tmp_path):
    jsonl, binary = pack(tmp_path, "--capacity", "700", "--overlong", "split")
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert write_per_format_doc(rows, 700, 400) == binary.read_bytes()


def test_reader_rejects_tables_that_wrap_around(tmp_path):
    """Tables that agree only modulo 2^64, which numpy's int64 differences cannot tell apart."""
    path = tmp_path / "wrapped.bin"

    def row(samples, tokens=0):
        return {"input_ids": [5] * tokens, "labels": [-100] * tokens, "position_ids": list(range(tokens)),
                "samples": samples}

    # Three pieces whose lengths add up to 2^64 in a row of no tokens: cu_seqlens goes 0, a,
    # 2a - 2^64 (negative), 0, and the rows' single span still reads 0 tokens.
    a = 0x5555555555555555
    path.write_bytes(write_per_format_doc([row([[0, 0, a], [1, 0, a], [2, 0, (1 << 64) - 2 * a]])], 8, 3))
    with pytest.raises(packed_file.PackedFileError, match="disagree with cu_seqlens"):
        packed_file.PackedFile(path)

    # row_pieces 0, 2^63 - 1, 4 - 2^63, 3: every difference wraps to >= 0, yet the second entry
    # indexes far outside cu_seqlens.
    data = bytearray(write_per_format_doc([row([[i, 0, 1]], 1) for i in range(3)], 8, 3))
    row_pieces_at = int.from_bytes(data[72 + 8 * 5:72 + 8 * 6], "little")
    data[row_pieces_at + 8:row_pieces_at + 24] = np.array([(1 << 63) - 1, 4 - (1 << 63)], "<i8").tobytes()
    path.write_bytes(data)
    with pytest.raises(packed_file.PackedFileError, match="row tables disagree"):
        packed_file.PackedFile(path)
