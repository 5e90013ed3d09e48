"""Reader of varpack's packed binary format (docs/FORMAT.md), on numpy memory maps.

numpy only (no torch, no compiled extension), so a data loader worker can use it alone:

    f = PackedFile("packed.bin")
    row = f.row(0)              # input_ids, labels, position_ids, cu_seqlens (int32), samples
    f.input_ids[f.row_offsets[5]:f.row_offsets[6]]   # the same arrays, flat, memory-mapped

The arrays are read-only views of the file; nothing is copied until you index them.
"""

from dataclasses import dataclass

import numpy as np

MAGIC = b"VARPACKB"
VERSION = 1
HEADER_BYTES = 192
ALIGNMENT = 64

# Header fields after the magic: (name, byte offset, dtype), as in docs/FORMAT.md.
_HEADER_FIELDS = (
    ("version", 8, "<u4"), ("header_bytes", 12, "<u4"), ("capacity", 16, "<i8"),
    ("num_samples", 24, "<i8"), ("num_rows", 32, "<i8"), ("num_pieces", 40, "<i8"),
    ("num_tokens", 48, "<i8"), ("max_seqlen", 56, "<i8"), ("file_bytes", 64, "<u8"),
)
_OFFSETS_AT = 72
# Sections in file order: (name, dtype, element count as a function of T, P, R).
_SECTIONS = (
    ("input_ids", "<i4", lambda t, p, r: t),
    ("labels", "<i4", lambda t, p, r: t),
    ("position_ids", "<i4", lambda t, p, r: t),
    ("cu_seqlens", "<i8", lambda t, p, r: p + 1),
    ("row_offsets", "<i8", lambda t, p, r: r + 1),
    ("row_pieces", "<i8", lambda t, p, r: r + 1),
    ("pieces", "<i8", lambda t, p, r: 3 * p),
    ("row_width", "<i8", lambda t, p, r: r),
)


class PackedFileError(ValueError):
    """The file is not a valid packed binary file; the message names it and the problem."""


@dataclass(frozen=True)
class PackedRow:
    input_ids: np.ndarray     # int32 [n]
    labels: np.ndarray        # int32 [n], -100 at the first position of every sample
    position_ids: np.ndarray  # int32 [n], restarting at 0 per sample
    cu_seqlens: np.ndarray    # int32 [pieces + 1], row-local, from 0
    samples: np.ndarray       # int64 [pieces, 3]: sample index, offset, length


def _align_up(x):
    return (x + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


class PackedFile:
    """A packed binary file, memory-mapped and checked on open like the C++ reader does."""

    def __init__(self, path):
        self.path = str(path)
        with open(self.path, "rb") as f:
            head = f.read(HEADER_BYTES)
        if len(head) < HEADER_BYTES:
            self._fail(f"not a varpack packed binary file ({len(head)} bytes, shorter than the header)")
        if head[:8] != MAGIC:
            self._fail("not a varpack packed binary file (bad magic)")
        h = {name: int(np.frombuffer(head, dtype, 1, at)[0]) for name, at, dtype in _HEADER_FIELDS}
        if h["version"] != VERSION:
            self._fail(f"format version {h['version']}; this reader reads version {VERSION}")
        if h["header_bytes"] != HEADER_BYTES:
            self._fail(f"corrupt header: it says it is {h['header_bytes']} bytes long; version {VERSION} "
                       f"headers are {HEADER_BYTES}")
        self._map = np.memmap(self.path, dtype=np.uint8, mode="r")
        if h["file_bytes"] != self._map.size:
            self._fail(f"truncated or corrupt: the header says {h['file_bytes']} bytes, "
                       f"the file has {self._map.size}")
        t, p, r = h["num_tokens"], h["num_pieces"], h["num_rows"]
        if min(t, p, r, h["num_samples"], h["max_seqlen"]) < 0:
            self._fail("corrupt header (a negative count)")
        # The whole layout is checked before any section is viewed: a section the file's end cuts
        # short can have a size that is no multiple of its dtype's, which numpy refuses itself.
        offsets = np.frombuffer(head, "<u8", len(_SECTIONS), _OFFSETS_AT)
        sections, at = [], HEADER_BYTES
        for i, (name, dtype, count) in enumerate(_SECTIONS):
            at = _align_up(at)
            if int(offsets[i]) != at:
                self._fail(f"corrupt header (section {name} is not where the counts put it)")
            nbytes = count(t, p, r) * np.dtype(dtype).itemsize
            sections.append((name, dtype, at, nbytes))
            at += nbytes
        if at != h["file_bytes"]:
            self._fail("corrupt header (the sections do not end where the file ends)")
        for name, dtype, at, nbytes in sections:
            setattr(self, name, self._map[at:at + nbytes].view(dtype))
        self.pieces = self.pieces.reshape(p, 3)
        self.capacity = h["capacity"]
        self.num_samples = h["num_samples"]
        self.max_seqlen = h["max_seqlen"]
        self._check_tables(t, p, r)

    def _fail(self, what):
        raise PackedFileError(f"{self.path}: {what}")

    def _check_tables(self, t, p, r):
        cu, pieces = self.cu_seqlens, self.pieces
        # The tables are compared before they are subtracted: np.diff wraps around int64, so a
        # crafted cu_seqlens could step by the piece lengths modulo 2^64 while leaving [0, T] (and
        # a crafted row_pieces index outside the pieces); rising from 0 to T, no difference wraps.
        if (cu[0] != 0 or cu[-1] != t or np.any(cu[1:] < cu[:-1])
                or not np.array_equal(np.diff(cu), pieces[:, 2])):
            self._fail("corrupt: the pieces disagree with cu_seqlens")
        if p and (pieces.min(initial=0) < 0 or pieces[:, 0].max() >= self.num_samples):
            self._fail("corrupt: a piece is out of range")
        longest = int(pieces[:, 2].max(initial=0))
        if longest != self.max_seqlen:
            self._fail(f"corrupt header: max_seqlen is {self.max_seqlen}, the longest piece has "
                       f"{longest} tokens")
        rp, ro = self.row_pieces, self.row_offsets
        if rp[0] != 0 or rp[-1] != p or np.any(rp[1:] < rp[:-1]) or not np.array_equal(ro, cu[rp]):
            self._fail("corrupt: the row tables disagree with the pieces")

    @property
    def num_rows(self):
        return len(self.row_width)

    @property
    def num_pieces(self):
        return len(self.pieces)

    @property
    def num_tokens(self):
        return len(self.input_ids)

    def __len__(self):
        return self.num_rows

    def row(self, r):
        """Row r as a PackedRow of views (cu_seqlens is computed, int32, row-local)."""
        if not -self.num_rows <= r < self.num_rows:
            raise IndexError(f"{self.path}: row {r} out of range [0, {self.num_rows})")
        r %= self.num_rows
        begin, end = int(self.row_offsets[r]), int(self.row_offsets[r + 1])
        p0, p1 = int(self.row_pieces[r]), int(self.row_pieces[r + 1])
        return PackedRow(
            input_ids=self.input_ids[begin:end],
            labels=self.labels[begin:end],
            position_ids=self.position_ids[begin:end],
            cu_seqlens=(self.cu_seqlens[p0:p1 + 1] - begin).astype(np.int32),
            samples=self.pieces[p0:p1],
        )

    def __getitem__(self, r):
        return self.row(r)

    def __iter__(self):
        return (self.row(r) for r in range(self.num_rows))
