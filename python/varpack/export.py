"""Packed rows out as a Parquet file or a Hugging Face dataset with the columns TRL's SFTTrainer
takes for packed data, so a TRL user trains on varpack's packing:

    input_ids     list<int32>  the row's tokens, samples back to back, no padding
    labels        list<int32>  aligned with input_ids, -100 at each sample's first token (a sample's
                               own -100 labels kept): what DataCollatorWithFlattening gives
    position_ids  list<int32>  restarting at 0 per sample
    seq_lengths   list<int32>  the lengths of the row's samples (pieces), what TRL's padding-free
                               collator rebuilds position_ids from

    plan = varpack.plan(tokens.lengths, capacity=4096)
    varpack.export.write_parquet(plan, tokens, "rows.parquet", seed=0, epoch=0)
    ds = varpack.export.packed_dataset(plan, tokens)        # a datasets.Dataset, same columns
    python -m varpack export data.parquet -L 4096 -o rows.parquet      # the same from the shell
    python -m varpack export packed.bin -o rows.parquet                # rows of `varpack pack`

Rows come out shuffled per (seed, epoch) by default (order="planner" keeps the planner's order,
whose longest-first packers put their fullest rows first). Rows are built about a million tokens
at a time by the batch builder, so memory holds one such chunk besides the input.
"""
from __future__ import annotations

import os
import tempfile
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .balance import select_rows
from .collator import epoch_seed
from .packed_file import PackedFile
from .packing import Plan, build_batch

ORDERS = ("shuffle", "planner")
TOKENS_PER_CHUNK = 1 << 20
SCHEMA = pa.schema([(name, pa.list_(pa.int32()))
                    for name in ("input_ids", "labels", "position_ids", "seq_lengths")])


def row_order(num_rows: int, order: str = "shuffle", seed: int = 0, epoch: int = 0) -> np.ndarray:
    """The rows' export order: a permutation drawn from (seed, epoch), or 0..num_rows-1."""
    if order not in ORDERS:
        raise ValueError(f"order={order!r}: choose \"shuffle\" (per seed and epoch) or \"planner\"")
    if order == "planner":
        return np.arange(num_rows, dtype=np.int64)
    return np.random.default_rng(epoch_seed(seed, epoch)).permutation(num_rows).astype(np.int64)


def _lists(values: np.ndarray, offsets: np.ndarray) -> pa.ListArray:
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values.astype(np.int32)))


def rows_table(input_ids, labels, position_ids, row_offsets, seq_lengths, row_segments) -> pa.Table:
    """A table of rows from flat arrays: row r holds tokens [row_offsets[r], row_offsets[r + 1])
    and segments [row_segments[r], row_segments[r + 1]) of seq_lengths."""
    row_offsets = np.asarray(row_offsets) - row_offsets[0]
    row_segments = np.asarray(row_segments) - row_segments[0]
    return pa.Table.from_arrays([_lists(np.asarray(input_ids), row_offsets),
                                 _lists(np.asarray(labels), row_offsets),
                                 _lists(np.asarray(position_ids), row_offsets),
                                 _lists(np.asarray(seq_lengths), row_segments)], schema=SCHEMA)


def _chunks(widths: np.ndarray, order: np.ndarray) -> Iterator[np.ndarray]:
    """`order` cut into runs of rows of about TOKENS_PER_CHUNK tokens."""
    ends = np.cumsum(widths[order])
    first = 0
    while first < len(order):
        last = max(first + 1, int(np.searchsorted(ends, ends[first] - widths[order[first]] + TOKENS_PER_CHUNK,
                                                  side="right")))
        yield order[first:last]
        first = last


def plan_tables(plan: Plan, samples, order: np.ndarray) -> Iterator[pa.Table]:
    """The rows of `plan` over `samples` (what build_batch reads), in `order`, a table per chunk."""
    piece_ends = np.concatenate([[0], np.cumsum(plan.pieces[:, 2])])
    tokens = np.diff(piece_ends[plan.row_begin])  # each row's tokens
    for rows in _chunks(tokens, order):
        built = build_batch(select_rows(plan, rows), samples)
        cu = built["cu_seqlens"].numpy()
        row_offsets = built["row_offsets"].numpy()
        yield rows_table(built["input_ids"].numpy(), built["labels"].numpy(), built["position_ids"].numpy(),
                         row_offsets, np.diff(cu), np.searchsorted(cu, row_offsets))


def file_tables(packed: PackedFile, order: np.ndarray) -> Iterator[pa.Table]:
    """The rows of a packed binary file, in `order`, a table per chunk."""
    offsets, pieces = packed.row_offsets, packed.row_pieces
    segment_lengths = np.diff(packed.cu_seqlens)
    for rows in _chunks(np.diff(offsets), order):
        widths = offsets[rows + 1] - offsets[rows]
        token_index = np.repeat(offsets[rows] - np.cumsum(widths) + widths, widths) + np.arange(widths.sum())
        counts = pieces[rows + 1] - pieces[rows]
        segment_index = np.repeat(pieces[rows] - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
        yield rows_table(packed.input_ids[token_index], packed.labels[token_index],
                         packed.position_ids[token_index], np.concatenate([[0], np.cumsum(widths)]),
                         segment_lengths[segment_index], np.concatenate([[0], np.cumsum(counts)]))


def _tables(source, samples, order: str, seed: int, epoch: int) -> Iterator[pa.Table]:
    if isinstance(source, PackedFile):
        return file_tables(source, row_order(source.num_rows, order, seed, epoch))
    if not isinstance(source, Plan):
        raise TypeError(f"expected a varpack.Plan (with its samples) or a varpack.PackedFile, got "
                        f"{type(source).__name__}")
    if samples is None:
        raise ValueError("a Plan needs the samples it was planned from (samples=...)")
    return plan_tables(source, samples, row_order(source.num_rows, order, seed, epoch))


def write_parquet(source, samples=None, path: str | os.PathLike = "rows.parquet", *, order: str = "shuffle",
                  seed: int = 0, epoch: int = 0) -> int:
    """Writes the packed rows of `source` (a varpack.Plan over `samples`, or a varpack.PackedFile)
    to a Parquet file; returns the number of rows. The file appears only when complete: it is
    written beside `path` under a temporary name and renamed into place."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    handle, temp = tempfile.mkstemp(dir=folder, prefix=".varpack-", suffix=".parquet.tmp")
    os.close(handle)
    rows = 0
    try:
        with pq.ParquetWriter(temp, SCHEMA) as writer:
            for table in _tables(source, samples, order, seed, epoch):
                writer.write_table(table)
                rows += table.num_rows
        os.replace(temp, path)
    except BaseException:
        os.unlink(temp)
        raise
    return rows


def packed_dataset(source, samples=None, *, order: str = "shuffle", seed: int = 0, epoch: int = 0):
    """The packed rows as an in-memory datasets.Dataset with the same columns (needs `datasets`:
    pip install varpack[datasets]); call its save_to_disk to keep it."""
    import datasets

    tables = list(_tables(source, samples, order, seed, epoch))
    return datasets.Dataset(pa.concat_tables(tables) if tables else SCHEMA.empty_table())
