"""A map-style dataset for data-parallel training over packed rows balanced by cost across ranks.

    ds = varpack.BalancedPackedDataset(samples, capacity=4096, rows_per_rank=2)  # rank from torch.distributed
    loader = torch.utils.data.DataLoader(ds, batch_size=None, shuffle=False)
    for epoch in range(epochs):
        ds.set_epoch(epoch)
        for batch in loader:          # this rank's rows of one step, flattened to [1, T]
            loss = model(**batch).loss

Every rank plans the same rows from the same lengths and seed, balances them the same way
(varpack.balance_rows), and reads only the samples of its own rows: nothing is exchanged between
ranks, and every rank has the same number of steps, so no rank waits at a collective for a batch
that never comes. Batches have the keys PackingCollator emits (its _BatchFormat lays them out).
"""
from __future__ import annotations

import operator
from typing import Sequence

import numpy as np

from .balance import Balance, balance_rows, select_rows
from .collator import _BatchFormat, epoch_seed, sample_length
from .packing import Plan, plan
from .sharding import StepDataset, distributed_defaults
from .token_files import TOKEN_SOURCES, as_samples

__all__ = ["BalancedPackedDataset"]


class BalancedPackedDataset(StepDataset):
    """Packs `samples` into rows of `capacity` tokens, deals the rows to `world_size` ranks with
    near-equal attention cost per step, and gives this rank's batch of each step.

    samples:        what PackingCollator accepts (a sequence of token-id sequences, or of mappings
                    with "input_ids" and optionally "labels"), a varpack.TokenFile, or what
                    varpack.read_tokens reads (Arrow data, a Parquet file, a path). Each sample's
                    length is read once here (a TokenFile's from its index), unless `lengths` gives
                    them (e.g. a length column), which must then be the samples' true lengths.
    rank, world_size: this process's data-parallel rank and the number of ranks; None takes
                    torch.distributed's when its process group is initialised, else rank 0 of 1.
    rows_per_rank:  rows each rank runs per step, concatenated into one [1, T] batch.
    algorithm, overlong, shuffle: the planner's (varpack.plan); shuffle permutes the rows with a seed
                    from (seed, epoch), so every epoch visits them in a new order.
    cost_model, window_steps, drop_last, method: the balancer's (varpack.balance_rows). With
                    drop_last=False the rows of a partial last step are spread over the ranks; a
                    rank that gets none gets a padding row (varpack.sharding explains).
    pad_to_multiple, pad_token_id, loss_normalization, return_flash_attn_kwargs,
    return_loss_weights, return_segments: the batch layout, as in PackingCollator.

    len(ds) is the number of steps, the same on every rank; ds[step] is this rank's batch of that
    step. Use DataLoader(ds, batch_size=None, shuffle=False): the order is the plan's, already
    shuffled per epoch, and shuffling steps differently per rank would pair unbalanced rows. Call
    set_epoch(epoch) on every rank before iterating an epoch; state_dict / load_state_dict resume
    mid-epoch (varpack.sharding has the contract). ds.plan and ds.balance are the current epoch's
    varpack.Plan and varpack.Balance (log ds.balance.stats to see the imbalance).
    """

    _unpickled = ("plan", "balance")

    def __init__(self, samples: Sequence, capacity: int, *, rank: int | None = None,
                 world_size: int | None = None, rows_per_rank: int = 1, algorithm: str = "bfd",
                 overlong: str = "error", shuffle: bool = True, seed: int = 0, window_steps: int = 1,
                 cost_model=None, drop_last: bool = True, method: str = "lpt", lengths=None,
                 pad_to_multiple: int = 1, pad_token_id: int = 0, loss_normalization: str = "token",
                 return_flash_attn_kwargs: bool = True, return_loss_weights: bool = False,
                 return_segments: bool = False):
        super().__init__()
        rank, world_size = distributed_defaults(rank, world_size, "BalancedPackedDataset")
        if operator.index(capacity) <= 0:
            raise ValueError(f"BalancedPackedDataset: capacity={capacity}; give a positive number of "
                             "tokens per row")
        samples = as_samples(samples)  # Arrow data or a path: read once, zero-copy where it can be
        if len(samples) == 0:
            raise ValueError("BalancedPackedDataset: samples is empty; there is nothing to pack")
        self.samples = samples
        self.lengths = self._lengths(samples, lengths)
        self.capacity = operator.index(capacity)
        self.rank = rank
        self.world_size = world_size
        self.rows_per_rank = rows_per_rank
        self.algorithm = algorithm
        self.overlong = overlong
        self.shuffle = shuffle
        self.seed = seed
        self.window_steps = window_steps
        self.cost_model = cost_model
        self.drop_last = drop_last
        self.method = method
        self.format = _BatchFormat(pad_to_multiple, pad_token_id, loss_normalization,
                                   return_flash_attn_kwargs, return_loss_weights, return_segments)
        self._start_epochs()

    @staticmethod
    def _lengths(samples: Sequence, lengths) -> np.ndarray:
        if lengths is None:
            if isinstance(samples, TOKEN_SOURCES):
                return samples.lengths
            return np.array([sample_length(s, i) for i, s in enumerate(samples)], dtype=np.int64)
        array = np.asarray(lengths)
        if array.shape != (len(samples),):
            raise ValueError(f"BalancedPackedDataset: lengths has shape {array.shape}; give one length "
                             f"per sample ({len(samples)})")
        return array

    def _schedule(self, epoch: int) -> None:
        # The same rows on every rank for the same (seed, epoch), a new order for a new epoch.
        self.plan: Plan = plan(self.lengths, self.capacity, algorithm=self.algorithm,
                               overlong=self.overlong, seed=epoch_seed(self.seed, epoch),
                               shuffle=self.shuffle)
        self.balance: Balance = balance_rows(self.plan, self.world_size, self.rows_per_rank,
                                             drop_last=self.drop_last, cost_model=self.cost_model,
                                             method=self.method, window_steps=self.window_steps)
        if self.balance.num_steps == 0:
            raise ValueError(f"BalancedPackedDataset: the plan's {self.plan.num_rows} rows fill no step "
                             f"of world_size={self.world_size} x rows_per_rank={self.rows_per_rank} rows; "
                             "lower rows_per_rank or capacity, or pass drop_last=False")

    def _num_steps(self) -> int:
        return self.balance.num_steps

    def _batch(self, step: int) -> dict | None:
        rows = self.balance.rows_of(step, self.rank)
        return self.format.build(select_rows(self.plan, rows), self.samples) if len(rows) else None
