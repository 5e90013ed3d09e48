"""Training on a packed binary file (`varpack pack ... --out packed.bin`): a map-style dataset whose
item is this rank's batch of a step, with the keys PackingCollator emits.

    ds = varpack.PackedFileDataset("packed.bin", rows_per_rank=2)   # rank from torch.distributed
    loader = torch.utils.data.DataLoader(ds, batch_size=None, shuffle=False, num_workers=2)
    for epoch in range(epochs):
        ds.set_epoch(epoch)
        for batch in loader:
            loss = model(**batch).loss

The rows are the file's, read through numpy memory maps (varpack.PackedFile): nothing is re-packed
and only the step's rows are read. Per epoch the rows are shuffled with a seed from (seed, epoch)
and dealt to ranks by predicted cost with varpack.balance_rows, as BalancedPackedDataset does;
varpack.sharding states the contract (ranks, equal steps, padding rows, set_epoch, resume).
"""
from __future__ import annotations

import os

import numpy as np
import torch

from .balance import balance_rows
from .collator import _BatchFormat, epoch_seed
from .packed_file import PackedFile
from .sharding import StepDataset, distributed_defaults

__all__ = ["PackedFileDataset"]

IGNORE_INDEX = -100


class PackedFileDataset(StepDataset):
    """The rows of the packed binary file at `path`, `rows_per_rank` rows per rank and step.

    rank, world_size: as BalancedPackedDataset (None: torch.distributed's, else rank 0 of 1).
    shuffle, seed:  rows are visited in an order shuffled per (seed, epoch); shuffle=False keeps
                    the file's order (the planner's, a length curriculum unless packed shuffled).
    cost_model, window_steps, drop_last, method: the balancer's (varpack.balance_rows); cost_model
                    None balances with varpack.auto.ANCHOR_COST_MODEL. With drop_last=True the rows
                    after the last full step are left out of the epoch.
    pad_to_multiple, pad_token_id, loss_normalization, return_flash_attn_kwargs,
    return_loss_weights, return_segments: the batch layout, as in PackingCollator; segment_sample
                    and segment_offset are the file's sample index and offset of each piece.
    """

    _unpickled = ("file", "balance", "order")

    def __init__(self, path, *, rank: int | None = None, world_size: int | None = None, rows_per_rank: int = 1,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = True, cost_model=None, method: str = "lpt",
                 window_steps: int = 1, pad_to_multiple: int = 1, pad_token_id: int = 0,
                 loss_normalization: str = "token", return_flash_attn_kwargs: bool = True,
                 return_loss_weights: bool = False, return_segments: bool = False):
        super().__init__()
        self.rank, self.world_size = distributed_defaults(rank, world_size, "PackedFileDataset")
        self.path = os.fspath(path)
        self.file = PackedFile(self.path)
        if self.file.num_rows == 0:
            raise ValueError(f"PackedFileDataset: {self.path} holds no rows; there is nothing to train on")
        self.rows_per_rank = rows_per_rank
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.method = method
        self.window_steps = window_steps
        self.costs = self._row_costs(cost_model)
        self.format = _BatchFormat(pad_to_multiple, pad_token_id, loss_normalization,
                                   return_flash_attn_kwargs, return_loss_weights, return_segments)
        self._start_epochs()

    def _row_costs(self, cost_model) -> np.ndarray:
        from .auto import ANCHOR_COST_MODEL

        model = ANCHOR_COST_MODEL if cost_model is None else cost_model
        f = self.file
        n = f.pieces[:, 2].astype(np.float64)
        row_of_piece = np.repeat(np.arange(f.num_rows), np.diff(f.row_pieces))
        pieces = np.bincount(row_of_piece, weights=model.alpha * n + model.beta * n * n, minlength=f.num_rows)
        return pieces + float(getattr(model, "overhead", 0.0))

    def _schedule(self, epoch: int) -> None:
        rows = self.file.num_rows
        self.order = (np.random.default_rng(epoch_seed(self.seed, epoch)).permutation(rows) if self.shuffle
                      else np.arange(rows))
        self.balance = balance_rows(self.costs[self.order], self.world_size, self.rows_per_rank,
                                    drop_last=self.drop_last, method=self.method, window_steps=self.window_steps)
        if self.balance.num_steps == 0:
            raise ValueError(f"PackedFileDataset: {self.path}'s {rows} rows fill no step of world_size="
                             f"{self.world_size} x rows_per_rank={self.rows_per_rank} rows; lower rows_per_rank "
                             "or pass drop_last=False")

    def _num_steps(self) -> int:
        return self.balance.num_steps

    def layout(self) -> dict:
        return {**super().layout(), "rows": self.file.num_rows}

    def _batch(self, step: int) -> dict | None:
        rows = self.order[self.balance.rows_of(step, self.rank)]
        return self.format.emit(self.rows_batch(rows)) if len(rows) else None

    def rows_batch(self, rows) -> dict:
        """build_batch's keys for the file rows `rows`, in that order (padding to pad_to_multiple as
        a segment of its own at the end of each row, as the batch builder pads)."""
        f, multiple, pad_id = self.file, self.format.pad_to_multiple, self.format.pad_token_id
        parts = {"input_ids": [], "labels": [], "position_ids": []}
        lengths, sample, offset, row_ends = [], [], [], [0]
        for r in rows:
            begin, end = int(f.row_offsets[r]), int(f.row_offsets[r + 1])
            pieces = f.pieces[int(f.row_pieces[r]):int(f.row_pieces[r + 1])]
            for name in parts:
                parts[name].append(getattr(f, name)[begin:end])
            lengths.append(pieces[:, 2])
            sample.append(pieces[:, 0])
            offset.append(pieces[:, 1])
            pad = -(end - begin) % multiple
            if pad:
                parts["input_ids"].append(np.full(pad, pad_id, np.int32))
                parts["labels"].append(np.full(pad, IGNORE_INDEX, np.int32))
                parts["position_ids"].append(np.arange(pad, dtype=np.int32))
                lengths.append([pad])
                sample.append([-1])
                offset.append([0])
            row_ends.append(row_ends[-1] + end - begin + pad)
        flat = {name: torch.from_numpy(np.concatenate(v).astype(np.int64)) for name, v in parts.items()}
        seg = np.concatenate(lengths).astype(np.int64)
        built = dict(flat, cu_seqlens=torch.from_numpy(np.concatenate([[0], np.cumsum(seg)]).astype(np.int32)),
                     max_seqlen=int(seg.max()), segment_sample=torch.from_numpy(np.concatenate(sample).astype(np.int64)),
                     segment_offset=torch.from_numpy(np.concatenate(offset).astype(np.int64)),
                     row_offsets=torch.tensor(row_ends, dtype=torch.int64))
        built.update(_loss_weights(flat["labels"].numpy(), seg))
        return built

    def _reopen(self) -> None:
        self.file = PackedFile(self.path)  # memory maps do not pickle as maps: a copy maps the file again


def _loss_weights(labels: np.ndarray, segment_lengths: np.ndarray) -> dict:
    """The batch builder's two weightings (each sums to 1; varpack.loss explains) for flat labels
    cut into segments: per token 1 / labelled positions; per sample 1 / (segments with a labelled
    position x that segment's labelled positions)."""
    labelled = labels != IGNORE_INDEX
    segment = np.repeat(np.arange(len(segment_lengths)), segment_lengths)
    labelled_in = np.bincount(segment, weights=labelled, minlength=len(segment_lengths))
    total, segments = labelled.sum(), np.count_nonzero(labelled_in)
    per_token = np.where(labelled, 1.0 / max(total, 1), 0.0)
    per_sample = np.where(labelled, 1.0 / (max(segments, 1) * np.maximum(labelled_in[segment], 1)), 0.0)
    return {"loss_weight_per_token": torch.from_numpy(per_token.astype(np.float32)),
            "loss_weight_per_sample": torch.from_numpy(per_sample.astype(np.float32))}
