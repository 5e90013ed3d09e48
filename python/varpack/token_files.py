"""Token files on disk as varpack samples: a flat .npy of token ids with its .npy of offsets, or a
Megatron-LM indexed dataset (PREFIX.bin + PREFIX.idx), memory-mapped by the C++ reader; and Arrow
data (a Parquet or Arrow IPC / Feather file, a `datasets` save_to_disk folder, a pyarrow Table or a
datasets.Dataset) read from its own buffers by varpack.arrow_tokens.

    tokens = varpack.read_tokens("data.npy")                 # offsets from data.offsets.npy
    tokens = varpack.read_tokens("data.npy", offsets="o.npy")
    tokens = varpack.read_tokens("megatron:/data/corpus_text_document")  # or ".../corpus_text_document.bin"
    tokens = varpack.read_tokens("data.parquet", column="input_ids", labels="labels")
    tokens = varpack.read_tokens(hf_dataset)                 # a datasets.Dataset or pyarrow.Table
    p = varpack.plan(tokens.lengths, capacity=4096)
    batch = varpack.build_batch(p, tokens, rows=slice(0, 8))
    lengths = varpack.token_lengths("megatron:/data/corpus_text_document")  # index alone
"""

import os
import sys

from . import _C

TokenFile = _C.TokenFile
ArrowTokens = _C.ArrowTokens
# What read_tokens returns: each a TokenSource the batch builder reads without a Python call.
TOKEN_SOURCES = (TokenFile, ArrowTokens)


def _native_token_file(path: str) -> bool:
    """The inputs the C++ token-file reader takes by name (token_files.h: is_token_file)."""
    return path.startswith("megatron:") or path.endswith((".npy", ".bin"))


def is_arrow_data(data) -> bool:
    """True for Arrow data read_tokens takes: a pyarrow object, a datasets.Dataset, or the path of
    anything but a .npy / Megatron token file (read_tokens says what it cannot read)."""
    if isinstance(data, (str, os.PathLike)):
        return not _native_token_file(os.fspath(data))
    datasets = sys.modules.get("datasets")  # only if the caller imported it: never a dependency
    return (type(data).__module__.split(".")[0] == "pyarrow" or
            (datasets is not None and isinstance(data, datasets.Dataset)))


def read_arrow(data, column: str = "input_ids", labels: str | None = None):
    """ArrowTokens of Arrow data (see read_tokens), chunk by chunk from Arrow's buffers."""
    try:
        from . import arrow_tokens
    except ImportError as e:
        raise ImportError(f"reading Arrow data needs pyarrow ({e}): pip install pyarrow") from None
    name = os.fspath(data) if isinstance(data, (str, os.PathLike)) else None
    ids, label_chunks, rows, lengths = [], [], [], []
    zero_copy = True
    for chunk in arrow_tokens.token_chunks(data, column, labels, name=name):
        ids.append(chunk.ids)
        label_chunks.append(chunk.labels)
        rows.append(len(chunk.lengths))
        lengths.append(chunk.lengths)
        zero_copy &= chunk.zero_copy
    import numpy as np

    flat = np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)
    return _C.ArrowTokens(name or type(data).__name__, ids, label_chunks if labels else None, rows,
                          flat, zero_copy)


def read_tokens(path, offsets=None, *, column: str = "input_ids", labels: str | None = None):
    """Opens token data; returns a TokenFile, or ArrowTokens for Arrow data (same interface).

    path:    DATA.npy (1-D little-endian int32, int64, uint16 or uint32 token ids, C order, all
             samples back to back), or a Megatron dataset as "megatron:PREFIX" or "PREFIX.bin";
             or Arrow data: a Parquet file, an Arrow IPC / Feather file, a `datasets` save_to_disk
             folder (or a folder of .parquet / .arrow files), a pyarrow Table / RecordBatch /
             (Chunked)Array, a datasets.Dataset.
    offsets: for .npy, the int64 .npy of n + 1 sample offsets (from 0, non-decreasing, ending at
             the token count); default DATA.offsets.npy beside DATA.npy.
    column, labels: for Arrow data, the list-of-integers column of token ids and optionally the
             column of labels (same lengths; ids or -100). int32 ids of in-memory tables and
             Arrow IPC files are served from Arrow's buffers without a copy (zero_copy), other
             integer types converted to int32 once; Parquet is decoded into one int32 buffer.
             ArrowTokens[i] is then {"input_ids", "labels"}, views of the sample's two lists.

    A TokenFile is a sequence of samples: len(f), f[i] (a read-only int32 numpy view, no copy when
    the file holds int32), f.lengths (int64 numpy array, what varpack.plan takes), f.num_tokens.
    varpack.build_batch reads it directly. Samples have no labels of their own (labels are the
    input_ids, -100 at each segment's first token). Raises ValueError naming the file and what is
    wrong (dtype, byte order, shape, truncated data, offsets, a token id outside [0, 2^31); for
    Arrow data the column and row too: a missing column, strings, floats, nested lists, nulls).
    """
    if is_arrow_data(path):
        if offsets is not None:
            raise ValueError(f"offsets= is for .npy token files; {path!r} is read as Arrow data")
        return read_arrow(path, column, labels)
    return _C.read_tokens(os.fspath(path), None if offsets is None else os.fspath(offsets))


def as_samples(data):
    """What varpack's datasets and collators call on their samples: a path is read with
    read_tokens, and so is in-memory Arrow data (its "labels" column too, where it has one);
    anything else (a list, a TokenFile) is returned as it is."""
    if isinstance(data, (str, os.PathLike)):
        return read_tokens(data)
    if is_arrow_data(data):
        from .arrow_tokens import arrow_table

        table = arrow_table(data)
        return read_tokens(table, labels="labels" if "labels" in table.column_names else None)
    return data


def token_lengths(path):
    """The samples' lengths of a token file (int64 numpy array), read from its offsets or index
    alone: no token is read, range-checked or converted, so this costs the index even for a
    dataset far larger than memory (read_tokens holds an int32 copy of non-int32 tokens).
    path: DATA.npy with DATA.offsets.npy beside it, "megatron:PREFIX" or "PREFIX.bin". The layout
    is checked as read_tokens checks it; raises ValueError naming the file and what is wrong.
    Arrow data has no separate index: its lengths come from read_tokens(path).lengths.
    """
    if is_arrow_data(path):
        return read_arrow(path).lengths
    return _C.token_file_lengths(os.fspath(path))
