"""One schedule for data- and context-parallel ranks: documents longer than a rank's row go to
context-parallel groups, the rest are packed into rows, and each step's ranks are loaded evenly
under the cost model.

    sched = cp_schedule(lengths, ranks=64, rows_per_rank=2, capacity=32768)
    sched.for_rank(rank)   # per step: this rank's rows (plan row indices) and CP documents
    for step in rank_batches(sched, samples, rank): ...   # this rank's model inputs, step by step

A document of L > capacity tokens runs zigzag-split over g ranks, g the least power of two with
L / g <= capacity, doubled (up to `ranks`) while its share (alpha L + beta L^2) / g + overhead
costs more than one sample of `capacity` tokens (the costliest row a rank can get; otherwise the
quadratic term makes the CP shares the step's stragglers); each of the g ranks spends one of its rows_per_rank slots and
carries that share plus `cp_overhead(L, g)` (the variant's exposed communication and splitting cost, default none). Groups are aligned blocks of g consecutive ranks, so every group is a row of a
(ranks / g, g) DeviceMesh made once (cp_meshes). The planner marks the long documents (varpack.plan with
overlong="cp" leaves them out of its rows and counts them) and packs the rest (best-fit
decreasing, shuffled) into rows of `capacity`. Items (rows and CP documents) are taken in a shuffled
order, window_steps steps' worth at a time, sorted by per-rank cost and cut into steps first-fit by
slots; within a step the CP documents are placed first (costliest first, on the aligned block
and slot, free on all the block's ranks, whose busiest rank is least busy), then the rows,
longest-processing-time first, each in the first free slot of the least loaded rank with one. A
CP document runs in the same slot on all its ranks, and every rank has rows_per_rank slots (idle
ones included), so the ranks' collectives line up slot by slot.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field

import numpy as np

from .auto import ANCHOR_COST_MODEL, CostModel
from .balance import row_costs, select_rows
from .packing import build_batch, plan

__all__ = ["CPSchedule", "CPWork", "cp_group_size", "cp_meshes", "cp_schedule", "rank_batches"]


def cp_group_size(length: int, capacity: int, ranks: int, model: CostModel | None = None) -> int:
    """The least power of two g with length / g <= capacity (raises if more than `ranks`), raised
    while its per-rank share costs more than a row of one `capacity`-token sample and g < ranks."""
    model = model or ANCHOR_COST_MODEL
    g = 1
    while -(-length // g) > capacity:
        g *= 2
    if g > ranks:
        raise ValueError(f"cp_schedule: a document of {length} tokens needs {g} ranks of {capacity} tokens, "
                         f"more than the {ranks} ranks; raise capacity or ranks")
    while 2 * g <= ranks and _doc_cost(length, g, model) > _doc_cost(capacity, 1, model) * (1 + 1e-9):
        g *= 2
    return g


@dataclass(frozen=True)
class CPWork:
    """A context-parallel document in a step: document index, its group's first rank and size,
    and the slot (0..rows_per_rank-1) every rank of the group runs it in."""
    doc: int
    first_rank: int
    size: int
    slot: int


@dataclass
class CPSchedule:
    """rows: the plan of the documents that fit a row (overlong="cp": sample indices are document
    indices). long: the documents that run context-parallel. steps[s]: (rows per rank: list of arrays of row indices,
    CP documents: list of CPWork, slots: int64 [ranks, rows_per_rank] with a row index, -1 idle or
    -2 - j for CP document j). predicted[s, r]: rank r's predicted time in step s."""
    rows: object
    long: np.ndarray
    steps: list = field(default_factory=list)
    predicted: np.ndarray = None

    def for_rank(self, rank: int) -> list:
        """Per step, this rank's slots in order: ("row", row index), ("cp", CPWork, this rank's
        index in its group) or ("idle",). Every rank runs the same number of slots, and a CP
        document's ranks run it in the same slot, so collectives line up (an idle slot still has
        to take part in the data-parallel ones, e.g. FSDP's, with an empty forward)."""
        out = []
        for _, cps, slots in self.steps:
            mine = []
            for value in slots[rank]:
                if value >= 0:
                    mine.append(("row", int(value)))
                elif value == -1:
                    mine.append(("idle",))
                else:
                    work = cps[-2 - value]
                    mine.append(("cp", work, rank - work.first_rank))
            out.append(mine)
        return out

    def group_sizes(self) -> list[int]:
        """The context-parallel group sizes the schedule uses, ascending."""
        return sorted({work.size for _, cps, _ in self.steps for work in cps})


def cp_meshes(schedule: CPSchedule, device_type: str = "cuda") -> dict:
    """{g: the (ranks / g, g) DeviceMesh, dims ("dp", "cp")} for every group size g the schedule
    uses. A CPWork's group is mesh["cp"] on its ranks: pass it as cp_varlen_attention's group.
    Collective: every rank calls it once, after init_process_group, before the first step."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    ranks = dist.get_world_size()
    if ranks != schedule.predicted.shape[1]:
        raise ValueError(f"cp_meshes: the schedule is for {schedule.predicted.shape[1]} ranks, the "
                         f"process group has {ranks}; make the schedule with ranks={ranks}")
    return {g: init_device_mesh(device_type, (ranks // g, g), mesh_dim_names=("dp", "cp"))
            for g in schedule.group_sizes()}


def _doc_cost(length: int, g: int, model: CostModel) -> float:
    return model.overhead + (model.alpha * length + model.beta * float(length) ** 2) / g


def cp_schedule(lengths, ranks: int, rows_per_rank: int, capacity: int, cost_model: CostModel | None = None,
                window_steps: int = 16, seed: int = 0, cp_overhead=None) -> CPSchedule:
    """The schedule of the module docstring. cp_overhead(length, g) -> seconds per rank added to
    a CP document (e.g. a varpack.cp_cost VariantCost's overhead_s)."""
    ranks, k, capacity = operator.index(ranks), operator.index(rows_per_rank), operator.index(capacity)
    model = cost_model or ANCHOR_COST_MODEL
    n = np.asarray(lengths, dtype=np.int64).reshape(-1)
    long = np.flatnonzero(n > capacity)
    rows = plan(n, capacity, overlong="cp", shuffle=True, seed=seed)  # the rows leave `long` out
    costs = row_costs(rows, model)
    # Items: (per-rank cost, slots, kind, index); kind 0 = row, 1 = CP document.
    items = [(float(c), 1, 0, i) for i, c in enumerate(costs)]
    for d in long:
        g = cp_group_size(int(n[d]), capacity, ranks, model)
        extra = cp_overhead(int(n[d]), g) if cp_overhead else 0.0
        items.append((_doc_cost(int(n[d]), g, model) + extra, g, 1, int(d)))
    order = np.random.default_rng(seed).permutation(len(items))
    items = [items[i] for i in order]
    slots = ranks * k
    schedule = CPSchedule(rows, long)
    loads = []
    window = slots * max(1, window_steps)
    start = 0
    while start < len(items):
        taken, used = [], 0
        while start < len(items) and used + items[start][1] <= window:
            taken.append(items[start])
            used += items[start][1]
            start += 1
        if not taken:  # one document wider than a window: it gets its own
            taken, start = [items[start]], start + 1
        taken.sort(key=lambda it: (-it[0], it[2], it[3]))
        while taken:
            step, rest, free = [], [], slots
            for it in taken:
                if it[1] <= free:
                    step.append(it)
                    free -= it[1]
                else:
                    rest.append(it)
            placed, load, left = _place(step, ranks, k)
            taken = sorted(left + rest, key=lambda it: (-it[0], it[2], it[3]))
            schedule.steps.append(placed)
            loads.append(load)
    schedule.predicted = np.array(loads).reshape(-1, ranks)
    return schedule


def _place(items, ranks: int, k: int):
    load = np.zeros(ranks)
    slots = np.full((ranks, k), -1, dtype=np.int64)
    cps, left = [], []
    for item in items:  # costliest first
        cost, g, kind, index = item
        if kind == 1:
            # Blocks x slots free on all the block's ranks; the least busy block, then the lowest.
            blocks = ranks // g
            free = (slots[:blocks * g] == -1).reshape(blocks, g, k).all(axis=1)
            busiest = load[:blocks * g].reshape(blocks, g).max(axis=1)
            scores = np.where(free, busiest[:, None], np.inf)
            best = int(np.argmin(scores))
            if not np.isfinite(scores.flat[best]):  # no block has a slot free on all its ranks: next step
                left.append(item)
                continue
            first, slot = best // k * g, best % k
            load[first:first + g] += cost
            slots[first:first + g, slot] = -2 - len(cps)
            cps.append(CPWork(index, first, g, slot))
    for cost, g, kind, index in items:
        if kind == 0:
            free = (slots == -1).any(axis=1)
            r = int(np.argmin(np.where(free, load, np.inf)))
            load[r] += cost
            slots[r, int(np.argmax(slots[r] == -1))] = index
    rows = [r[r >= 0] for r in slots]
    return (rows, cps, slots), load, left


def rank_batches(schedule: CPSchedule, samples, rank: int):
    """Rank `rank`'s part of each step, slot by slot (CPSchedule.for_rank): ("row", build_batch of
    the row), ("cp", CPWork, cp_row_batch of its share) or ("idle", None). A CP document's group
    is ranks [first_rank, first_rank + size): cp_meshes(schedule)[size]["cp"] on those ranks."""
    from .context_parallel import cp_layout, cp_row_batch
    from .cp_layout import SPLIT

    for slots in schedule.for_rank(rank):
        step = []
        for entry in slots:
            if entry[0] == "row":
                step.append(("row", build_batch(select_rows(schedule.rows, [entry[1]]), samples)))
            elif entry[0] == "cp":
                work, index = entry[1], entry[2]
                doc = np.asarray(samples[work.doc])
                layout = cp_layout([0, len(doc)], work.size, owner=[SPLIT])
                step.append(("cp", work, cp_row_batch(doc, [0, len(doc)], layout, index)))
            else:
                step.append(("idle", None))
        yield step
