"""Random-mutation fuzzing of the numpy packed-file reader (python/varpack/packed_file.py), the
Python twin of varpack_fuzz's packed_binary target (tests/fuzz, docs/RELIABILITY.md).

It mutates the same seeds, packed files the library wrote (tests/fuzz/corpus/packed_binary/),
with the same kinds of mutations (bit flips, random bytes, interesting integers over the header
fields, chunk deletion / duplication / insertion, truncation, splicing), and requires of every
input that the reader either refuses it with PackedFileError naming the file, or opens it and
returns rows that hold the invariants the C++ target checks (plus three of docs/FORMAT.md that
the C++ reader checks on open: cu_seqlens steps by the piece lengths, every piece names a sample,
max_seqlen is the longest piece). Anything else (another exception, a failed invariant) is a
finding: the input is saved and the message names it.

VARPACK_PY_FUZZ_RUNS sets the number of executions (CI: 10,000, about 2 s), VARPACK_PY_FUZZ_SEED
the seed; the long run is in docs/RELIABILITY.md.
"""

import importlib.util
import os
import pathlib
import tempfile

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SEEDS = ROOT / "tests/fuzz/corpus/packed_binary"
RUNS = int(os.environ.get("VARPACK_PY_FUZZ_RUNS", "10000"))
SEED = int(os.environ.get("VARPACK_PY_FUZZ_SEED", "1"))
MAX_INPUT = 1 << 16

# Loaded from the source tree by path, as in test_packed_file.py: the reader is numpy-only.
_spec = importlib.util.spec_from_file_location("packed_file", ROOT / "python/varpack/packed_file.py")
packed_file = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(packed_file)

# Values at the edges of the reader's checks, as in fuzz_driver.cpp: sizes, signs, 32/64-bit limits.
INTERESTING = [0, 1, 2, 3, 4, 7, 8, 63, 64, 65, 127, 128, 192, 255, 256, 0x7fff, 0x8000, 0xffff,
               0x10000, 0x7fffffff, 0x80000000, 0xffffffff, 0x100000000, 0x7fffffffffffffff,
               0x8000000000000000, 0xffffffffffffffff, -100, -2]


def mutate_once(rng, data, seeds):
    n = len(data)
    kind = rng.integers(8)
    if kind == 0 and n:  # flip a bit
        data[rng.integers(n)] ^= 1 << int(rng.integers(8))
    elif kind == 1 and n:  # a random byte
        data[rng.integers(n)] = int(rng.integers(256))
    elif kind in (2, 3):  # an interesting integer over 1, 2, 4 or 8 bytes, often aligned
        width = 1 << int(rng.integers(4))
        if n >= width:
            at = int(rng.integers(n - width + 1))
            if rng.integers(2) == 0:
                at -= at % width
            value = INTERESTING[rng.integers(len(INTERESTING))]
            if rng.integers(4) == 0:
                value += int(rng.integers(3)) - 1
            data[at:at + width] = (value % (1 << 64)).to_bytes(8, "little")[:width]
    elif kind == 4 and n:  # delete a chunk
        at = int(rng.integers(n))
        del data[at:at + 1 + int(rng.integers(min(64, n - at)))]
    elif kind == 5:  # duplicate a chunk, or insert random bytes
        at = int(rng.integers(n + 1))
        if n and rng.integers(2) == 0:
            start = int(rng.integers(n))
            data[at:at] = data[start:start + 1 + int(rng.integers(64))]
        else:
            data[at:at] = rng.integers(256, size=1 + int(rng.integers(16)), dtype=np.uint8).tobytes()
    elif kind == 6:  # truncate
        del data[rng.integers(n + 1):]
    elif kind == 7:  # splice: our head, another seed's tail
        other = seeds[rng.integers(len(seeds))]
        data[rng.integers(n + 1):] = other[rng.integers(len(other) + 1):]
    del data[MAX_INPUT:]


def check_read(path):
    """Opens `path` with the reader; a refusal must be PackedFileError naming the file, an accepted
    file must hold the invariants of varpack_fuzz's packed_binary target."""
    try:
        f = packed_file.PackedFile(path)
    except packed_file.PackedFileError as error:
        assert str(error).startswith(f"{path}: ") and len(str(error)) > len(f"{path}: "), \
            f"the refusal does not name the file and the problem: {error!r}"
        return
    tokens = longest = 0
    for r in range(f.num_rows):
        row = f.row(r)
        n = len(row.input_ids)
        assert len(row.labels) == n and len(row.position_ids) == n, \
            f"row {r}: sections of different lengths"
        assert row.cu_seqlens[0] == 0 and row.cu_seqlens[-1] == n, \
            f"row {r}: cu_seqlens does not span the row"
        assert row.samples.shape == (len(row.cu_seqlens) - 1, 3) and \
            np.array_equal(np.diff(row.cu_seqlens.astype(np.int64)), row.samples[:, 2]), \
            f"row {r}: cu_seqlens does not step by the piece lengths"
        assert np.all((row.samples[:, 0] >= 0) & (row.samples[:, 0] < f.num_samples)), \
            f"row {r}: a piece names no sample of the input"
        longest = max(longest, int(row.samples[:, 2].max(initial=0)))
        # Read every element, as the C++ target does (a view past the end of the file would fault).
        for array in (row.input_ids, row.labels, row.position_ids, row.samples):
            int(array.sum(dtype=np.uint64))
        tokens += n
    assert tokens == f.num_tokens, "rows do not add up to the token count"
    assert longest == f.max_seqlen, f"max_seqlen is {f.max_seqlen}, the longest piece has {longest} tokens"


def test_mutated_packed_files_are_refused_or_read_consistently(tmp_path):
    seeds = [p.read_bytes() for p in sorted(SEEDS.iterdir())]
    assert seeds, f"no seeds in {SEEDS}"
    rng = np.random.default_rng(SEED)
    # Inputs are rewritten on every run; in memory when possible, as the C++ driver does (on ext4 a
    # file rewritten by truncation is flushed when it is closed).
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None) as work:
        path = pathlib.Path(work) / "input.bin"
        for run in range(RUNS):
            # Every seed as it is first: they must read (else the mutants test little).
            data = bytearray(seeds[run % len(seeds)])
            if run >= len(seeds):
                for _ in range(1 + rng.integers(4)):
                    mutate_once(rng, data, seeds)
            path.write_bytes(data)
            try:
                if run < len(seeds):
                    packed_file.PackedFile(path)
                check_read(path)
            except Exception as error:  # anything but the reader's refusal is a finding
                saved = tmp_path / f"failure-{run}.bin"
                saved.write_bytes(data)
                pytest.fail(f"run {run} (VARPACK_PY_FUZZ_SEED={SEED}): {type(error).__name__}: {error}; "
                            f"input saved as {saved}")
