"""Token files on disk as varpack samples: a flat .npy of token ids with its .npy of offsets, or a
Megatron-LM indexed dataset (PREFIX.bin + PREFIX.idx), memory-mapped by the C++ reader.

    tokens = varpack.read_tokens("data.npy")                 # offsets from data.offsets.npy
    tokens = varpack.read_tokens("data.npy", offsets="o.npy")
    tokens = varpack.read_tokens("megatron:/data/corpus_text_document")  # or ".../corpus_text_document.bin"
    p = varpack.plan(tokens.lengths, capacity=4096)
    batch = varpack.build_batch(p, tokens, rows=slice(0, 8))
    lengths = varpack.token_lengths("megatron:/data/corpus_text_document")  # index alone
"""

import os

from . import _C

TokenFile = _C.TokenFile


def read_tokens(path, offsets=None) -> TokenFile:
    """Opens a token file; returns a TokenFile.

    path:    DATA.npy (1-D little-endian int32, int64, uint16 or uint32 token ids, C order, all
             samples back to back), or a Megatron dataset as "megatron:PREFIX" or "PREFIX.bin".
    offsets: for .npy, the int64 .npy of n + 1 sample offsets (from 0, non-decreasing, ending at
             the token count); default DATA.offsets.npy beside DATA.npy.

    A TokenFile is a sequence of samples: len(f), f[i] (a read-only int32 numpy view, no copy when
    the file holds int32), f.lengths (int64 numpy array, what varpack.plan takes), f.num_tokens.
    varpack.build_batch reads it directly. Samples have no labels of their own (labels are the
    input_ids, -100 at each segment's first token). Raises ValueError naming the file and what is
    wrong (dtype, byte order, shape, truncated data, offsets, a token id outside [0, 2^31)).
    """
    return _C.read_tokens(os.fspath(path), None if offsets is None else os.fspath(offsets))


def token_lengths(path):
    """The samples' lengths of a token file (int64 numpy array), read from its offsets or index
    alone: no token is read, range-checked or converted, so this costs the index even for a
    dataset far larger than memory (read_tokens holds an int32 copy of non-int32 tokens).
    path: DATA.npy with DATA.offsets.npy beside it, "megatron:PREFIX" or "PREFIX.bin". The layout
    is checked as read_tokens checks it; raises ValueError naming the file and what is wrong.
    """
    return _C.token_file_lengths(os.fspath(path))
