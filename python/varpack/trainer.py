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

import math

import torch
import transformers

from .sharding import StepDataset

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


class Trainer(transformers.Trainer):
    """transformers.Trainer that trains on a varpack dataset as it is: one of its items per step
    and rank, no re-sharding (module notes). Any other train_dataset goes Trainer's usual way."""

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
