"""Token ids from Arrow data: a Parquet file, an Arrow IPC / Feather file, a Hugging Face `datasets`
save_to_disk folder (or a folder of Parquet / Arrow files), a pyarrow Table / RecordBatch, or a
datasets.Dataset. One column holds a list of integer token ids per row (list or large_list of
any integer type); an optional second column holds the labels (same lengths, ids or -100).

Values are read from Arrow's own value and offset buffers: int32 ids are used in place (a numpy
view of the Arrow buffer, no copy: in-memory tables, memory-mapped IPC files), other integer
widths are range-checked and converted to int32 once, batch by batch. Parquet is decoded in
batches of about 64k tokens, each copied into one int32 buffer and freed, so a read holds the
tokens once (1.15x the token bytes at peak for 30M tokens; bench/results/io.md). Every check names the input, the column and the row: a missing column, a
column of strings, floats or nested lists, a null row or null token, an id outside [0, 2^31), a
labels row whose length differs, a truncated or corrupt file.

This module needs only numpy and pyarrow (not torch or varpack's extension), so it also runs as a
script: the `varpack` command converts Arrow inputs through it (see `main`), writing DATA.npy +
DATA.offsets.npy, the token file the command reads:

    python -I arrow_tokens.py to-npy data.parquet OUTDIR [--column input_ids]
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.ipc
import pyarrow.parquet as pq

PARQUET_SUFFIXES = (".parquet", ".pq")
IPC_SUFFIXES = (".arrow", ".feather", ".ipc")
IGNORE_LABEL = -100
MAX_ID = 2**31 - 1
# Tokens per batch read from a Parquet file (rows from the file's mean length): the decoder's
# buffers grow with the batch (1024 rows of ~550 tokens held 26 MB more, 128 rows 12 MB).
PARQUET_BATCH_TOKENS = 1 << 16
READS = ("Parquet (.parquet), Arrow IPC / Feather (.arrow, .feather), a `datasets` save_to_disk "
         "folder, a folder of .parquet or .arrow files")
# Leading bytes of formats varpack does not read, and what to do about each.
FOREIGN_MAGIC = (
    (b"\x1f\x8b", "gzip-compressed", "decompress it first (gunzip -k FILE)"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed", "decompress it first (zstd -d FILE)"),
    (b"BZh", "bzip2-compressed", "decompress it first (bunzip2 -k FILE)"),
    (b"\xfd7zXZ\x00", "xz-compressed", "decompress it first (unxz -k FILE)"),
    (b"PK\x03\x04", "a zip archive", "extract it first (unzip FILE)"),
)


class ArrowInputError(ValueError):
    """Arrow input that varpack cannot read; the message names the input, column and row."""


@dataclass
class TokenChunk:
    """One batch of rows: `ids` (and `labels`, or None) int32, the rows back to back; `lengths`
    int64, one per row; `zero_copy`: `ids` is a view of the Arrow buffer."""
    ids: np.ndarray
    labels: np.ndarray | None
    lengths: np.ndarray
    zero_copy: bool


def sniff(path: str) -> str | None:
    """"parquet", "ipc" or "dataset-dir" when `path` is an Arrow input varpack reads, else None.
    Raises ArrowInputError for a compressed file or archive (named, with what to do)."""
    if os.path.isdir(path):
        return "dataset-dir"
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError:
        return None
    for magic, what, todo in FOREIGN_MAGIC:
        if head.startswith(magic):
            raise ArrowInputError(f"{path}: {what}; varpack reads uncompressed input: {todo}")
    lower = path.lower()
    if head.startswith(b"PAR1") or lower.endswith(PARQUET_SUFFIXES):
        return "parquet"
    # A file starts "ARROW1"; a stream (datasets' .arrow cache files) with 0xFFFFFFFF.
    if head.startswith(b"ARROW1") or head.startswith(b"\xff\xff\xff\xff") or lower.endswith(IPC_SUFFIXES):
        return "ipc"
    return None


def _ipc_batches(path: str) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """The schema and record batches of an Arrow IPC file or stream, memory-mapped: no copy."""
    try:
        source = pa.memory_map(path)
        try:
            reader = pa.ipc.open_file(source)
            return reader.schema, (reader.get_batch(i) for i in range(reader.num_record_batches))
        except pa.ArrowInvalid:
            stream = pa.ipc.open_stream(source)
            return stream.schema, iter(stream)
    except (pa.ArrowInvalid, OSError) as e:
        raise ArrowInputError(f"{path}: not a readable Arrow IPC / Feather file ({e}); it may be "
                              "truncated or corrupt") from None


def _dataset_dir_files(path: str) -> list[tuple[str, str]]:
    """(file, kind) of a folder: a `datasets` save_to_disk folder's data files, or its .parquet /
    .arrow files in name order."""
    entries = sorted(os.listdir(path))
    if "dataset_dict.json" in entries:
        splits = [e for e in entries if os.path.isdir(os.path.join(path, e))]
        raise ArrowInputError(f"{path}: a DatasetDict folder (splits {', '.join(splits)}); give one "
                              f"split's folder, e.g. {os.path.join(path, splits[0] if splits else 'train')}")
    if "state.json" in entries:
        with open(os.path.join(path, "state.json")) as f:
            files = [d["filename"] for d in json.load(f).get("_data_files", [])]
        return [(os.path.join(path, name), "ipc") for name in files]
    files = [(os.path.join(path, e), kind) for e in entries
             for kind in [("parquet" if e.lower().endswith(PARQUET_SUFFIXES) else
                           "ipc" if e.lower().endswith(IPC_SUFFIXES) else None)] if kind]
    if not files:
        shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "") if entries else "nothing"
        raise ArrowInputError(f"{path}: a folder varpack does not read (it holds {shown}); varpack "
                              f"reads {READS}")
    return files


class _Reader:
    """Checks and converts the batches of one input; rows are numbered across all its batches."""

    def __init__(self, name: str, column: str, labels: str | None):
        self.name = name
        self.column = column
        self.labels = labels
        self.row = 0  # the input's first row in the batch being read

    def fail(self, message: str, column: str | None = None, row: int | None = None) -> None:
        where = f"column {column or self.column!r}" + ("" if row is None else f", row {row}")
        raise ArrowInputError(f"{self.name}: {where}: {message}")

    def check_schema(self, schema: pa.Schema) -> None:
        for column in [self.column] + ([self.labels] if self.labels else []):
            index = schema.get_field_index(column)
            if index < 0:
                self.fail(f"no such column; the columns are {', '.join(schema.names) or 'none'} "
                          "(choose one with column=... / --column)", column)
            self.check_type(schema.field(index).type, column)

    def check_type(self, t: pa.DataType, column: str) -> None:
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            v = t.value_type
            if pa.types.is_integer(v):
                return
            if pa.types.is_list(v) or pa.types.is_large_list(v) or pa.types.is_fixed_size_list(v):
                self.fail(f"nested lists ({t}); varpack reads one list of token ids per row: "
                          "flatten them first", column)
            if pa.types.is_floating(v):
                self.fail(f"floats ({t}); token ids are integers: cast the column to list<int32>", column)
            self.fail(f"a list of {v}; expected a list of integer token ids per row", column)
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            self.fail(f"a column of strings ({t}); varpack reads token ids: tokenise it first "
                      "(e.g. datasets' map with your tokenizer)", column)
        self.fail(f"type {t}; expected a list of integer token ids per row (list<int32>)", column)

    def values(self, array: pa.Array, column: str) -> tuple[np.ndarray, np.ndarray]:
        """(values, offsets from 0) of a list column's chunk, checked for null rows and tokens;
        values is a view of the Arrow buffer."""
        if array.null_count:
            row = int(np.flatnonzero(~array.is_valid().to_numpy(zero_copy_only=False))[0])
            self.fail("the row is null; every row needs a list of token ids", column, self.row + row)
        offsets = array.offsets.to_numpy()
        flat = array.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
        offsets = offsets.astype(np.int64) - offsets[0]
        if flat.null_count:
            first = int(np.flatnonzero(~flat.is_valid().to_numpy(zero_copy_only=False))[0])
            row = int(np.searchsorted(offsets, first, side="right")) - 1
            self.fail(f"token {first - offsets[row]} is null", column, self.row + row)
        return flat.to_numpy(), offsets

    def int32(self, values: np.ndarray, offsets: np.ndarray, column: str, low: int) -> np.ndarray:
        """`values` as int32 after checking each is in [0, 2^31) or equals `low`; int32 values are
        returned as they are."""
        info = np.iinfo(values.dtype)
        if values.size and (info.min < 0 or info.max > MAX_ID) and (values.min() < 0 or values.max() > MAX_ID):
            bad = (values < 0) & (values != low) | (values > MAX_ID)
            if bad.any():
                first = int(np.flatnonzero(bad)[0])
                row = int(np.searchsorted(offsets, first, side="right")) - 1
                allowed = "[0, 2^31)" + ("" if low >= 0 else f" or {low}")
                self.fail(f"token {first - offsets[row]} is {values[first]}, not a token id in {allowed}",
                          column, self.row + row)
        return values if values.dtype == np.int32 else values.astype(np.int32)

    def chunk(self, batch: pa.RecordBatch) -> TokenChunk:
        raw, offsets = self.values(batch.column(self.column), self.column)
        ids = self.int32(raw, offsets, self.column, 0)
        lengths = np.diff(offsets)
        labels = None
        if self.labels:
            raw_labels, label_offsets = self.values(batch.column(self.labels), self.labels)
            differ = np.flatnonzero(np.diff(label_offsets) != lengths)
            if differ.size:
                row = int(differ[0])
                self.fail(f"{label_offsets[row + 1] - label_offsets[row]} labels for {lengths[row]} "
                          f"input ids in {self.column!r}; labels must align one to one with them",
                          self.labels, self.row + row)
            labels = self.int32(raw_labels, label_offsets, self.labels, IGNORE_LABEL)
        self.row += batch.num_rows
        return TokenChunk(ids, labels, lengths, zero_copy=ids is raw)


def _columns(column: str, labels: str | None) -> list[str]:
    return [column] + ([labels] if labels else [])


def _open_parquet(path: str) -> pq.ParquetFile:
    try:
        # Buffered reads, batch by batch: the file's compressed bytes are not held all at once.
        return pq.ParquetFile(path, buffer_size=1 << 20, pre_buffer=False)
    except (pa.ArrowInvalid, OSError) as e:
        raise ArrowInputError(f"{path}: not a readable Parquet file ({e}); it may be truncated or "
                              "corrupt") from None


def _parquet_values(parquet: pq.ParquetFile, column: str) -> int:
    """An upper bound of the values in a list column: its leaf's levels (values, empty lists, nulls)."""
    metadata = parquet.metadata
    leaf = [i for i in range(metadata.num_columns)
            if metadata.schema.column(i).path.split(".")[0] == column]
    return sum(metadata.row_group(g).column(leaf[0]).num_values for g in range(metadata.num_row_groups))


def _file_batches(path: str, kind: str, reader: _Reader, parquet: pq.ParquetFile | None = None
                  ) -> Iterator[pa.RecordBatch]:
    """The batches of one file, its schema checked first (`parquet`: the file, opened already)."""
    if kind == "ipc":
        schema, batches = _ipc_batches(path)
        reader.check_schema(schema)
    else:
        parquet = parquet or _open_parquet(path)
        reader.check_schema(parquet.schema_arrow)
        mean_length = _parquet_values(parquet, reader.column) / max(1, parquet.metadata.num_rows)
        batches = parquet.iter_batches(batch_size=max(16, int(PARQUET_BATCH_TOKENS / max(1.0, mean_length))),
                                       use_threads=False, columns=_columns(reader.column, reader.labels))
    while True:
        try:
            batch = next(batches, None)
        except (pa.ArrowInvalid, OSError) as e:
            reader.fail(f"cannot read the rows from {reader.row} on ({e}); the file may be truncated "
                        "or corrupt", row=reader.row)
        if batch is None:
            return
        yield batch


def _kept_parquet_chunks(path: str, reader: _Reader) -> Iterator[TokenChunk]:
    """A Parquet file's chunks, copied as they are decoded into one int32 buffer per column (sized
    from the file's metadata; pages past the end are never touched): the decoder's batches are
    freed as they go, so memory holds the tokens once, whatever the allocator keeps of them."""
    parquet = _open_parquet(path)
    reader.check_schema(parquet.schema_arrow)  # the columns must exist to be sized
    ids = np.empty(_parquet_values(parquet, reader.column), dtype=np.int32)
    labels = np.empty(_parquet_values(parquet, reader.labels), dtype=np.int32) if reader.labels else None
    at = 0
    for batch in _file_batches(path, "parquet", reader, parquet):
        chunk = reader.chunk(batch)
        end = at + chunk.ids.size
        ids[at:end] = chunk.ids
        if labels is not None:
            labels[at:end] = chunk.labels
        yield TokenChunk(ids[at:end], None if labels is None else labels[at:end], chunk.lengths, False)
        at = end


def _path_chunks(path: str, column: str, labels: str | None, keep: bool) -> Iterator[TokenChunk]:
    if not os.path.exists(path):
        raise ArrowInputError(f"{path}: no such file or folder")
    kind = sniff(path)
    if kind is None:
        raise ArrowInputError(f"{path}: not an Arrow input; varpack reads {READS}, and .npy (with "
                              ".offsets.npy) or Megatron token files")
    files = _dataset_dir_files(path) if kind == "dataset-dir" else [(path, kind)]
    row = 0
    for file, file_kind in files:
        reader = _Reader(file, column, labels)
        reader.row = row  # rows are numbered across a folder's files, each file named
        if keep and file_kind == "parquet":
            yield from _kept_parquet_chunks(file, reader)
        else:
            for batch in _file_batches(file, file_kind, reader):
                yield reader.chunk(batch)
        row = reader.row


def arrow_table(data) -> pa.Table | None:
    """A pyarrow Table of in-memory Arrow data, or None when `data` is none of those."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, (pa.Array, pa.ChunkedArray)):
        return pa.table({"input_ids": data})
    datasets = sys.modules.get("datasets")  # only if the caller imported it: never a dependency
    if datasets is not None and isinstance(data, datasets.Dataset):
        # The arrow format hands the table over without a copy (a take if indices were selected).
        return data.with_format("arrow")[:]
    return None


def token_chunks(data, column: str = "input_ids", labels: str | None = None,
                 name: str | None = None, keep: bool = True) -> Iterator[TokenChunk]:
    """The checked int32 chunks of `data`: a path (see sniff) or in-memory Arrow data (a pyarrow
    Array or ChunkedArray is the column itself). keep=False: each chunk is used and dropped before
    the next (a Parquet file's are then not gathered into one buffer). Raises ArrowInputError
    naming input, column and row."""
    if isinstance(data, (str, os.PathLike)):
        yield from _path_chunks(os.fspath(data), column, labels, keep)
        return
    table = arrow_table(data)
    if table is None:
        raise TypeError(f"expected a path or Arrow data (pyarrow Table, RecordBatch, Array, "
                        f"datasets.Dataset), got {type(data).__name__}")
    if isinstance(data, (pa.Array, pa.ChunkedArray)):
        column, labels = "input_ids", None
    reader = _Reader(name or type(data).__name__, column, labels)
    reader.check_schema(table.schema)
    for batch in table.select(_columns(column, labels)).to_batches():
        yield reader.chunk(batch)


NPY_HEADER_BYTES = 128  # room for any 1-D shape; the header is rewritten in place at the end


def _npy_header(dtype: str, count: int) -> bytes:
    text = f"{{'descr': '{dtype}', 'fortran_order': False, 'shape': ({count},), }}"
    text = text.ljust(NPY_HEADER_BYTES - 10 - 1) + "\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text.encode("latin1")


def write_npy(data, out_dir: str, column: str = "input_ids") -> tuple[int, int]:
    """Streams `data`'s column to OUT_DIR/tokens.npy (int32) and OUT_DIR/tokens.offsets.npy
    (int64, rows + 1) batch by batch, so memory holds one batch; returns (rows, tokens)."""
    tokens_path = os.path.join(out_dir, "tokens.npy")
    lengths = []
    total = 0
    with open(tokens_path, "wb") as f:
        f.write(_npy_header("<i4", 0))
        for chunk in token_chunks(data, column, keep=False):
            chunk.ids.tofile(f)
            lengths.append(chunk.lengths)
            total += int(chunk.ids.size)
        f.seek(0)
        f.write(_npy_header("<i4", total))
    offsets = np.zeros(1 + sum(len(x) for x in lengths), dtype=np.int64)
    np.cumsum(np.concatenate(lengths) if lengths else np.zeros(0, np.int64), out=offsets[1:])
    np.save(os.path.join(out_dir, "tokens.offsets.npy"), offsets)
    return len(offsets) - 1, total


def main(argv: list[str]) -> int:
    """`to-npy INPUT OUT_DIR [--column NAME]`, what the `varpack` command runs: exit 1 with the
    error's message alone on stderr for bad input (the command prints it as its own)."""
    import argparse

    parser = argparse.ArgumentParser(prog="arrow_tokens.py")
    parser.add_argument("mode", choices=["to-npy"])
    parser.add_argument("input")
    parser.add_argument("out_dir")
    parser.add_argument("--column", default="input_ids")
    args = parser.parse_args(argv)
    try:
        write_npy(args.input, args.out_dir, args.column)
    except (ArrowInputError, OSError) as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
