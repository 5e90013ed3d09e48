"""Sequence packing from Python: plan rows from sample lengths, then build packed batches.

    plan = varpack.plan(lengths, capacity=4096)          # rows of sample pieces, numpy arrays
    batch = varpack.build_batch(plan, samples, rows=slice(0, 8))   # dict of torch tensors

Both run in the C++ core (include/varpack/pack.h and batch.h); this module only shapes arguments
and results. Errors from the core (bad lengths, an over-long sample, a sample shorter than the
plan says) are raised as ValueError with the core's message.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import _C

__all__ = ["Plan", "plan", "build_batch", "ALGORITHMS", "OVERLONG_POLICIES", "MAX_CAPACITY"]

ALGORITHMS: tuple[str, ...] = tuple(_C.algorithm_names())
OVERLONG_POLICIES: tuple[str, ...] = tuple(_C.overlong_policy_names())
MAX_CAPACITY: int = _C.MAX_CAPACITY  # cu_seqlens are int32


class Plan:
    """Rows of sample pieces, in compressed form, with the plan's statistics.

    pieces:    int64 [P, 3], one (sample, offset, length) per piece: tokens [offset, offset + length)
               of sample `sample` (an index into the planned lengths); offset > 0 only for split samples.
    row_begin: int64 [rows + 1]; the pieces of row r are pieces[row_begin[r]:row_begin[r + 1]].
    row_width: int64 [rows]; the padded width of each row (the capacity when packing, the batch's
               longest sample for algorithm="dynamic").
    stats:     dict with every PlanStats field (samples, tokens, rows, capacity, lower_bound_rows,
               padded_tokens, padding_rate_packed, padding_rate_unpacked, truncated_tokens,
               skipped_samples, split_samples) and gap_to_lower_bound (rows - lower_bound_rows).

    The arrays are read-only views of the C++ plan.
    """

    def __init__(self, native: Any):
        self._native = native
        self.pieces: np.ndarray = native.pieces
        self.row_begin: np.ndarray = native.row_begin
        self.row_width: np.ndarray = native.row_width
        self.stats: dict = native.stats

    def __getstate__(self):
        return self._native

    def __setstate__(self, native):
        self.__init__(native)

    @property
    def num_rows(self) -> int:
        return len(self.row_width)

    def __len__(self) -> int:
        return self.num_rows

    def rows(self) -> list[np.ndarray]:
        """Every row's pieces, each an int64 [n, 3] array of (sample, offset, length)."""
        return [self.row(r) for r in range(self.num_rows)]

    def row(self, r: int) -> np.ndarray:
        """The pieces of row r as an int64 [n, 3] array of (sample, offset, length)."""
        r = operator.index(r)
        if not -self.num_rows <= r < self.num_rows:
            raise IndexError(f"row {r} is out of range: the plan has {self.num_rows} rows")
        r %= self.num_rows
        return self.pieces[self.row_begin[r]:self.row_begin[r + 1]]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Plan) and self._native == other._native

    def __repr__(self) -> str:
        s = self.stats
        return (f"Plan(rows={s['rows']}, samples={s['samples']}, tokens={s['tokens']}, "
                f"capacity={s['capacity']}, padding_rate={s['padding_rate_packed']:.4f}, "
                f"gap_to_lower_bound={s['gap_to_lower_bound']})")


def plan(lengths, capacity: int, algorithm: str = "bfd", overlong: str = "error", seed: int = 0,
         shuffle: bool = False, batch_size: int = 8) -> Plan:
    """Plans rows of `capacity` tokens for samples of the given lengths.

    lengths:    a sequence or 1-D array of non-negative integers (zero-length samples get no piece).
    algorithm:  "ffd" (first-fit-decreasing), "bfd" (best-fit-decreasing), "histogram", or the
                baselines "none" (one sample per row) and "dynamic" (batches of `batch_size` samples
                in input order, padded to their longest).
    overlong:   what to do with a sample longer than `capacity`: "error", "truncate", "split" or
                "cp" (left out of the rows and counted in stats["context_parallel_samples"]: the
                samples for context parallelism, varpack.cp_schedule).
    shuffle:    permute the rows with `seed` (deterministic: same inputs and seed, same plan).
    """
    array = _lengths_array(lengths)
    return Plan(_C.plan_packing(array, _int_in("capacity", capacity, 1, MAX_CAPACITY),
                                check_choice("algorithm", algorithm, ALGORITHMS),
                                check_choice("overlong", overlong, OVERLONG_POLICIES),
                                _int_in("batch_size", batch_size, 1, 2**63 - 1), bool(shuffle),
                                _int_in("seed", seed, 0, 2**64 - 1)))


def _int_in(name: str, value, low: int, high: int) -> int:
    """`value` as an int in [low, high], or a ValueError naming the argument and the value."""
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}") from None
    if not low <= value <= high:
        raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value}")
    return value


def check_choice(name: str, value, choices: tuple[str, ...]) -> str:
    """`value` if it is one of `choices`, else a ValueError naming the argument and the choices."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}; got {value!r}")
    return value


def _lengths_array(lengths) -> np.ndarray:
    """Sample lengths as int64, each checked to be a non-negative integer (naming the sample)."""
    if not hasattr(lengths, "__len__"):
        raise TypeError(f"lengths must be a sequence or 1-D array of integers, got {type(lengths).__name__} "
                        f"(a generator or iterator? pass list(...))")
    array = np.asarray(lengths)
    if array.ndim != 1:
        raise ValueError(f"lengths must be 1-D, got shape {array.shape}")
    if not array.size:
        return array.astype(np.int64)
    if array.dtype.kind not in "iu":
        raise ValueError(f"lengths must be integers, got dtype {array.dtype}")
    bad = np.flatnonzero((array < 0) | (array > np.iinfo(np.int64).max))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"lengths[{i}] (sample {i}) is {array[i]}; lengths must be integers >= 0")
    return array.astype(np.int64, copy=False)


def _row_range(rows, num_rows: int) -> tuple[int, int]:
    if rows is None:
        return 0, num_rows
    if isinstance(rows, slice):
        first, last, step = rows.indices(num_rows)
        if step != 1:
            raise ValueError(f"rows must be a contiguous slice, got step {step}")
        return first, max(first, last)
    first, last = rows  # checked against the plan by the core
    return operator.index(first), operator.index(last)


def build_batch(plan: Plan, samples: Sequence, rows=None, pad_to_multiple: int = 1, pad_token_id: int = 0,
                restart_positions_per_piece: bool = True) -> dict:
    """Builds the packed batch of `rows` of `plan` in the flat ("THD") layout.

    samples: the planned samples, indexable by the plan's sample indices: each a 1-D sequence or
             array of token ids, or a mapping with "input_ids" and optionally "labels" (one per
             token; -100 ignores a token). Only the samples in the chosen rows are read.
    rows:    None (all rows), a slice, or (first, last) for rows [first, last).

    Returns a dict of torch tensors (T tokens, S segments, R rows):
        input_ids, labels, position_ids: int64 [T]; labels follow Hugging Face's
            DataCollatorWithFlattening (aligned with input_ids, -100 at each segment's first token);
            positions restart at 0 per segment.
        cu_seqlens: int32 [S + 1]; max_seqlen: int (host, no device sync needed).
        segment_sample, segment_offset: int64 [S] (source sample, -1 for padding; piece offset).
        row_offsets: int64 [R + 1], the token offset where each row starts.
        loss_weight_per_token, loss_weight_per_sample: float32 [T], each summing to 1: multiply the
            per-token loss by one and sum, for per-token or per-sample normalisation.
        num_samples: int, segments holding sample tokens (padding excluded).
    Padding from pad_to_multiple forms its own segment at the end of its row.
    """
    if not isinstance(plan, Plan):
        raise TypeError(f"plan must be a varpack.Plan (from varpack.plan), got {type(plan).__name__}")
    if not (hasattr(samples, "__getitem__") and hasattr(samples, "__len__")):
        raise TypeError(f"samples must be a sequence indexable by sample (a list, an array, a dataset), "
                        f"got {type(samples).__name__}")
    first, last = _row_range(rows, plan.num_rows)
    return _C.build_packed_batch(plan._native, first, last, samples,
                                 _int_in("pad_to_multiple", pad_to_multiple, 1, MAX_CAPACITY),
                                 _int_in("pad_token_id", pad_token_id, 0, 2**31 - 1),
                                 bool(restart_positions_per_piece))
