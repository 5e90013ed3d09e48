"""Hugging Face Trainer and Accelerate on varpack's datasets, which are rank-aware already
(varpack.sharding): they must not be sharded again, and each of their items is a whole step.

    import varpack.trainer
    trainer = varpack.trainer.Trainer(model=model, args=args, train_dataset=ds)  # ds: a varpack dataset
    trainer.train()                                  # or train(resume_from_checkpoint=True)

Trainer's own loader goes through accelerator.prepare, which fails on DataLoader(ds,
batch_size=None) and, with batch_size=1, deals the steps over the ranks a second time (each rank
would skip half of its rows and run rows never balanced together). This subclass hands Trainer
step_loader(ds) instead, unprepared: Trainer still moves each batch to the device, calls
set_epoch, and on resume skips the trained steps through accelerate's skip_first_batches (by
index, without building them, for the map-style datasets). The loss is transformers': with
average_tokens_across_devices (the default) Trainer divides by the predicted tokens of the step
on all ranks and multiplies by the rank count, so DDP's average of gradients equals one process on
every rank's rows (varpack.loss.data_parallel_loss does the same in a loop of your own).

With Accelerate alone: accelerator.prepare(model, optimizer), not the loader; iterate
step_loader(ds) (or DataLoader(ds, batch_size=None)) and move batches with to_device(batch,
accelerator.device).
"""
from __future__ import annotations

import glob
import json
import math
import os

import torch
import transformers

from .sharding import StepDataset, check_state

__all__ = ["StepSampler", "Trainer", "is_varpack_dataset", "step_loader", "to_device"]


def is_varpack_dataset(dataset) -> bool:
    from .collator import PackedStream

    return isinstance(dataset, (StepDataset, PackedStream))


class StepSampler(torch.utils.data.Sampler):
    """Yields [step] for every step of the dataset's current pass: a batch sampler, so that
    accelerate's skip_first_batches skips steps by index, and Trainer's set_epoch reaches the
    dataset through it after such a skip."""

    def __init__(self, dataset: StepDataset):
        self.dataset = dataset

    def set_epoch(self, epoch: int) -> None:
        self.dataset.set_epoch(epoch)

    def __iter__(self):
        return ([step] for step in range(len(self.dataset)))

    def __len__(self) -> int:
        return len(self.dataset)


def _only(batch: list) -> dict:
    return batch[0]


class StepLoader(torch.utils.data.DataLoader):
    """A DataLoader over a varpack dataset, one step per batch, with set_epoch (as Trainer and
    accelerate's loaders have)."""

    def set_epoch(self, epoch: int) -> None:
        self.dataset.set_epoch(epoch)


def step_loader(dataset, **loader_kwargs) -> StepLoader:
    """The DataLoader a varpack dataset wants: one step per batch, in the dataset's order
    (loader_kwargs: num_workers, pin_memory, persistent_workers, prefetch_factor, ...)."""
    if not is_varpack_dataset(dataset):
        raise TypeError(f"step_loader takes a varpack dataset (BalancedPackedDataset, PackedFileDataset, "
                        f"PackedStream), got {type(dataset).__name__}")
    if isinstance(dataset, torch.utils.data.IterableDataset):
        return StepLoader(dataset, batch_size=None, **loader_kwargs)
    return StepLoader(dataset, batch_sampler=StepSampler(dataset), collate_fn=_only, **loader_kwargs)


def to_device(batch: dict, device) -> dict:
    """The batch's tensors on `device` (max_length_q/k stay Python ints: no device sync)."""
    return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


class _EpochCallback(transformers.TrainerCallback):
    # After a resume Trainer iterates accelerate's SkipDataLoader, which has no set_epoch, over an
    # IterableDataset: set the epoch from the trainer state (0.5 = half of epoch 0 done).
    def __init__(self, dataset):
        self.dataset = dataset

    def on_epoch_begin(self, args, state, control, **kwargs):
        self.dataset.set_epoch(math.floor(state.epoch + 1e-9) if state.epoch else 0)


DATA_STATE = "varpack_data_rank{rank}.json"


class Trainer(transformers.Trainer):
    """transformers.Trainer that trains on a varpack dataset as it is: one of its items per step
    and rank, no re-sharding (module notes). Any other train_dataset goes Trainer's usual way.

    A checkpoint also holds each rank's dataset state (varpack_data_rank{R}.json): Trainer places
    the data by its global step, which is only the same data for the same layout, so a resume
    with another world size, rank or seed is refused instead of training on other rows."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if is_varpack_dataset(self.train_dataset):
            self.add_callback(_EpochCallback(self.train_dataset))

    def get_train_dataloader(self) -> torch.utils.data.DataLoader:
        if not is_varpack_dataset(self.train_dataset):
            return super().get_train_dataloader()
        args = self.args
        options = {"num_workers": args.dataloader_num_workers, "pin_memory": args.dataloader_pin_memory}
        if args.dataloader_num_workers:
            options.update(persistent_workers=args.dataloader_persistent_workers,
                           prefetch_factor=args.dataloader_prefetch_factor,
                           multiprocessing_context=args.dataloader_multiprocessing_context)
        return step_loader(self.train_dataset, **options)

    def _save_checkpoint(self, model, trial) -> None:
        super()._save_checkpoint(model, trial)
        if is_varpack_dataset(self.train_dataset):
            folder = os.path.join(self._get_output_dir(trial=trial),
                                  f"{transformers.trainer_utils.PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
            state = dict(self.train_dataset.state_dict(), global_step=self.state.global_step)
            path = os.path.join(folder, DATA_STATE.format(rank=self.train_dataset.rank))
            with open(path + ".tmp", "w") as f:
                json.dump(state, f)
            os.replace(path + ".tmp", path)

    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        if resume_from_checkpoint and is_varpack_dataset(self.train_dataset):
            folder = resume_from_checkpoint
            if folder is True:
                folder = transformers.trainer_utils.get_last_checkpoint(self.args.output_dir)
            name = type(self.train_dataset).__name__
            path = os.path.join(str(folder), DATA_STATE.format(rank=self.train_dataset.rank))
            if os.path.exists(path):
                with open(path) as f:
                    check_state(name, json.load(f), self.train_dataset.layout())
            elif folder and glob.glob(os.path.join(str(folder), DATA_STATE.format(rank="*"))):
                # Saved by fewer ranks: refuse here too, or this rank would wait for a refused peer.
                raise ValueError(f"{name}: {folder} holds no data state for rank {self.train_dataset.rank}; "
                                 "it was saved by fewer ranks, and a mid-epoch position only carries over "
                                 "to the same layout")
        return super().train(resume_from_checkpoint, *args, **kwargs)
