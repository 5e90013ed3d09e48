"""Balancing packed rows over data-parallel ranks by cost.

    plan = varpack.plan(lengths, capacity=16384, shuffle=True, seed=epoch_seed)
    balance = varpack.balance_rows(plan, ranks=world_size, rows_per_rank=2)
    for step in range(balance.num_steps):
        mine = varpack.select_rows(plan, balance.rows_of(step, rank))  # this rank's rows, this step
        batch = varpack.build_batch(mine, samples)

Every rank runs rows_per_rank rows per step and the step waits for the slowest rank; a row of one
long sample costs more than a row of many short ones (attention is quadratic), so dealing rows in
order (row i -> rank i % ranks, what a DistributedSampler does) leaves ranks waiting. The balancer
groups rows into steps in the plan's order and, within each step, gives the rows to ranks by cost
(longest first to the least-loaded rank with room, then swaps), never worse than dealing in order.
Same plan, same assignment: derive the plan's seed from (seed, epoch) for a new order each epoch.

The work runs in the C++ core (include/varpack/balance.h); this module only shapes arguments and
results. Errors from the core are raised as ValueError with its message.
"""

from __future__ import annotations

import operator
from typing import Any, Iterator

import numpy as np

from . import _C
from .packing import Plan

__all__ = ["Balance", "balance_rows", "row_costs", "select_rows"]


class Balance:
    """Rows of a plan (or of a list of row costs) assigned to ranks, step by step.

    rows:           int64 [assigned rows]; the row indices, step by step, rank by rank, each rank's
                    rows in increasing order.
    rank_begin:     int64 [steps * ranks + 1]; the rows of step s, rank r are
                    rows[rank_begin[s * ranks + r]:rank_begin[s * ranks + r + 1]].
    rank_cost:      float64 [steps, ranks]; each rank's summed row cost per step.
    step_imbalance: float64 [steps]; max / mean rank cost of each step (1.0 = perfectly even).
    stats:          dict: rows, assigned_rows, dropped_rows, steps, partial_step_rows,
                    round_robin_steps (steps where dealing in order was better and was kept),
                    total_cost, step_time (sum over steps of the slowest rank's cost),
                    ideal_step_time (sum of the mean rank costs), mean_imbalance, max_imbalance.

    The arrays are read-only views of the C++ result.
    """

    def __init__(self, native: Any):
        self._native = native
        self.ranks: int = native.ranks
        self.rows_per_rank: int = native.rows_per_rank
        self.rows: np.ndarray = native.rows
        self.rank_begin: np.ndarray = native.rank_begin
        self.rank_cost: np.ndarray = native.rank_cost
        self.step_imbalance: np.ndarray = native.step_imbalance
        self.stats: dict = native.stats

    @property
    def num_steps(self) -> int:
        return len(self.step_imbalance)

    def __len__(self) -> int:
        return self.num_steps

    def rows_of(self, step: int, rank: int) -> np.ndarray:
        """The row indices rank `rank` runs in step `step` (fewer than rows_per_rank, or none, only
        in a partial last step, which drop_last=False keeps)."""
        step, rank = operator.index(step), operator.index(rank)
        if not 0 <= step < self.num_steps:
            raise IndexError(f"step {step} is out of range: the assignment has {self.num_steps} steps")
        if not 0 <= rank < self.ranks:
            raise IndexError(f"rank {rank} is out of range: the assignment has {self.ranks} ranks")
        i = step * self.ranks + rank
        return self.rows[self.rank_begin[i]:self.rank_begin[i + 1]]

    def step(self, step: int) -> list[np.ndarray]:
        """One array of row indices per rank for step `step`."""
        return [self.rows_of(step, r) for r in range(self.ranks)]

    def __iter__(self) -> Iterator[list[np.ndarray]]:
        return (self.step(s) for s in range(self.num_steps))

    def for_rank(self, rank: int) -> list[np.ndarray]:
        """Rank `rank`'s rows, one array per step: what that rank's data loader iterates."""
        return [self.rows_of(s, rank) for s in range(self.num_steps)]

    def as_array(self) -> np.ndarray:
        """The row indices as an int64 [steps, ranks, rows_per_rank] array (full steps only)."""
        if self.stats["partial_step_rows"]:
            raise ValueError(f"the last step is partial ({self.stats['partial_step_rows']} rows for "
                             f"{self.ranks} ranks x {self.rows_per_rank}); use rows_of/step, or "
                             "balance with drop_last=True")
        return self.rows.reshape(self.num_steps, self.ranks, self.rows_per_rank)

    def __repr__(self) -> str:
        s = self.stats
        return (f"Balance(steps={s['steps']}, ranks={self.ranks}, rows_per_rank={self.rows_per_rank}, "
                f"dropped_rows={s['dropped_rows']}, mean_imbalance={s['mean_imbalance']:.4f}, "
                f"step_time/ideal={s['step_time'] / s['ideal_step_time'] if s['ideal_step_time'] else 1.0:.4f})")


def _model_coefficients(cost_model) -> tuple[float, float, float]:
    # Any object with alpha and beta, and optionally overhead (varpack.CostModel, from
    # varpack.calibrate or varpack.auto.fit_cost_model, has all three). The overhead is paid once
    # per row: with the same rows per rank it moves every rank's cost alike, but it counts where
    # ranks run different numbers of rows (a partial last step) and in the step time.
    if not (hasattr(cost_model, "alpha") and hasattr(cost_model, "beta")):
        raise TypeError(f"cost_model must have alpha and beta (e.g. varpack.CostModel), "
                        f"got {type(cost_model).__name__}")
    return float(cost_model.alpha), float(cost_model.beta), float(getattr(cost_model, "overhead", 0.0))


def row_costs(plan: Plan, cost_model=None) -> np.ndarray:
    """float64 [rows]: each row's cost with varlen attention, overhead + the sum over its pieces
    of alpha * n + beta * n^2. cost_model: a varpack.CostModel (or any object with alpha, beta and
    optionally overhead), or None for the core's default (the fit of a 542M-parameter decoder on
    an H200, in seconds, without the overhead)."""
    if not isinstance(plan, Plan):
        raise TypeError(f"plan must be a varpack.Plan (from varpack.plan), got {type(plan).__name__}")
    if cost_model is None:
        return _C.row_costs(plan._native)
    alpha, beta, overhead = _model_coefficients(cost_model)
    return _C.row_costs(plan._native, alpha, beta, overhead)


def balance_rows(rows, ranks: int, rows_per_rank: int, *, drop_last: bool = True, cost_model=None,
                 method: str = "lpt", window_steps: int = 1) -> Balance:
    """Assigns rows to `ranks` ranks, `rows_per_rank` rows per rank per step, with near-equal cost.

    rows:       a varpack.Plan (costed with `cost_model`, see row_costs), or a 1-D array of
                per-row costs (finite, >= 0; then cost_model must be None).
    drop_last:  drop the rows left over after the last full step (like DistributedSampler's
                drop_last); with False they form a partial last step where rank r gets
                floor(m / ranks) rows, plus one for r < m % ranks (m rows left): some ranks may get
                none, and stats["partial_step_rows"] says so.
    method:     "lpt" (balance by cost) or "round_robin" (row i of a step -> rank i % ranks: the
                baseline, for comparison).
    window_steps: with W > 1, the rows of each W full steps are sorted by cost and cut into steps
                in that order, so a step holds rows of similar cost (the steps of a window then run
                from the costliest down). This is what helps with rows_per_rank=1, where no
                assignment within a step can change its slowest row. 1 keeps the rows' order.

    Steps take the rows in their order (the plan's, shuffled by its seed) and nothing is random,
    so the result is the same on every rank and every run.
    """
    if isinstance(rows, Plan):
        costs = row_costs(rows, cost_model)
    else:
        if cost_model is not None:
            raise ValueError("cost_model applies to a Plan's rows; row costs given directly are used as they are")
        costs = np.asarray(rows)
        if costs.ndim != 1:
            raise ValueError(f"row costs must be 1-D, got shape {costs.shape}")
        if costs.size and not (np.issubdtype(costs.dtype, np.floating) or np.issubdtype(costs.dtype, np.integer)):
            raise ValueError(f"row costs must be numbers, got dtype {costs.dtype}")
    return Balance(_C.balance_rows(costs.astype(np.float64, copy=False), operator.index(ranks),
                                   operator.index(rows_per_rank), bool(drop_last), str(method),
                                   operator.index(window_steps)))


def select_rows(plan: Plan, rows) -> Plan:
    """The rows `rows` of `plan` (row indices, in that order) as a Plan of their own, for
    build_batch: a rank's rows of a step are scattered over the plan. Pieces keep their sample
    indices; stats are those of the selected rows (samples, truncated_tokens, skipped_samples and
    split_samples of the whole input)."""
    if not isinstance(plan, Plan):
        raise TypeError(f"plan must be a varpack.Plan (from varpack.plan), got {type(plan).__name__}")
    array = np.asarray(rows)
    if array.ndim != 1 or (array.size and not np.issubdtype(array.dtype, np.integer)):
        raise ValueError(f"rows must be a 1-D sequence of row indices, got shape {array.shape}, dtype {array.dtype}")
    return Plan(_C.select_rows(plan._native, array.astype(np.int64, copy=False)))
