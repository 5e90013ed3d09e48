"""The sampler contract every varpack training dataset keeps (BalancedPackedDataset,
PackedFileDataset, PackedStream), so that a data-parallel run neither hangs nor silently repeats or
skips data:

  ranks       rank and world size from torch.distributed when its process group is initialised,
              else from the arguments (default rank 0 of 1); ranks get disjoint rows.
  steps       every rank has the same number of steps per epoch, and no batch is empty: a rank short
              of rows in a step gets one padding row (pad tokens, labels -100, loss weight 0), so
              the model runs and collectives line up, while the loss and its gradient get nothing.
  epochs      set_epoch(epoch) re-plans for that epoch (a new order per (seed, epoch)); it reaches
              DataLoader workers that are already running (persistent_workers=True) through a
              shared-memory cell that every copy of the dataset reads before each step.
  resume      state_dict() / load_state_dict() hold (epoch, step): the next pass starts at that
              step of that epoch. The step a DataLoader has reached is known where its batches are
              consumed, not in the dataset (workers prefetch), so state_dict(steps_done=k) is the
              state after k more batches of the current pass (a plain DataLoader: the loop's count;
              the same with any num_workers on resume); torchdata's StatefulDataLoader counts the
              batches itself and stores state_dict() (the pass's start) inside its own state.
"""
from __future__ import annotations

import operator

import torch

__all__ = ["EpochCell", "distributed_defaults"]


def distributed_defaults(rank: int | None, world_size: int | None, owner: str) -> tuple[int, int]:
    """(rank, world_size): the given ones, else torch.distributed's when initialised, else (0, 1)."""
    initialised = torch.distributed.is_available() and torch.distributed.is_initialized()
    if rank is None:
        rank = torch.distributed.get_rank() if initialised else 0
    if world_size is None:
        world_size = torch.distributed.get_world_size() if initialised else 1
    rank, world_size = operator.index(rank), operator.index(world_size)
    if world_size < 1:
        raise ValueError(f"{owner}: world_size={world_size}; it must be >= 1 (the number of data-parallel ranks)")
    if not 0 <= rank < world_size:
        raise ValueError(f"{owner}: rank={rank} is outside [0, world_size={world_size})")
    return rank, world_size


class EpochCell:
    """(epoch, first step of the pass) in shared memory: the main process writes it (set_epoch,
    load_state_dict) and DataLoader workers, forked or spawned, persistent or not, read the same
    two numbers, so a worker started in epoch 0 builds epoch 1's steps once epoch 1 is set."""

    def __init__(self):
        self._cell = torch.zeros(2, dtype=torch.int64).share_memory_()

    def get(self) -> tuple[int, int]:
        epoch, start = self._cell.tolist()
        return epoch, start

    def set(self, epoch: int, start: int) -> None:
        self._cell.copy_(torch.tensor([operator.index(epoch), operator.index(start)]))


def check_state(owner: str, state: dict, expected: dict) -> tuple[int, int]:
    """(epoch, step) of a state_dict after checking that it was saved by a dataset laid out the
    same way (the same world size, rank and seed give the same steps)."""
    missing = {"epoch", "step"} - state.keys()
    if missing:
        raise ValueError(f"{owner}.load_state_dict: the state has no {sorted(missing)}; give what "
                         f"{owner}.state_dict() returned")
    for key, value in expected.items():
        if key in state and state[key] != value:
            raise ValueError(f"{owner}.load_state_dict: the state was saved with {key}={state[key]}, this dataset "
                             f"has {key}={value}; a mid-epoch position only carries over to the same layout")
    epoch, step = operator.index(state["epoch"]), operator.index(state["step"])
    if epoch < 0 or step < 0:
        raise ValueError(f"{owner}.load_state_dict: epoch={epoch}, step={step}; both must be >= 0")
    return epoch, step


class StepDataset(torch.utils.data.Dataset):
    """Base of the map-style datasets whose item is a step: ds[i] is this rank's batch of step
    start + i of the current epoch, len(ds) the steps left in it. Use it with
    DataLoader(ds, batch_size=None, shuffle=False): the order is the epoch's plan, already
    shuffled per (seed, epoch) and the same on every rank.

    A subclass sets self.rank, self.world_size, self.seed, self.format (a collator _BatchFormat)
    and implements _schedule(epoch) (plans that epoch's steps), _num_steps() and _batch(step)
    (this rank's batch of a step, or None where it has no rows), then calls _start_epochs()."""

    def _schedule(self, epoch: int) -> None:
        raise NotImplementedError

    def _num_steps(self) -> int:
        raise NotImplementedError

    def _batch(self, step: int) -> dict | None:
        raise NotImplementedError

    def _start_epochs(self) -> None:
        self._cell = EpochCell()
        self._scheduled = None
        self._resume_epoch = None
        self.set_epoch(0)

    def _sync(self) -> int:
        """Brings this copy to the shared (epoch, start); returns start."""
        epoch, start = self._cell.get()
        if self._scheduled != epoch:
            self._schedule(epoch)
            self._scheduled = epoch
        return start

    @property
    def epoch(self) -> int:
        return self._cell.get()[0]

    def set_epoch(self, epoch: int) -> None:
        """Plans `epoch` (the same steps on every rank for the same (seed, epoch)); the next pass
        starts at its first step, or at the step load_state_dict gave for this epoch."""
        epoch = operator.index(epoch)
        start = self._cell.get()[1] if epoch == self._resume_epoch else 0
        if epoch != self._resume_epoch:
            self._resume_epoch = None
        self._schedule(epoch)
        self._scheduled = epoch
        self._cell.set(epoch, start)

    def __len__(self) -> int:
        start = self._sync()
        return self._num_steps() - start

    def __getitem__(self, index: int) -> dict:
        start = self._sync()
        step = start + operator.index(index)
        if not start <= step < self._num_steps():
            raise IndexError(f"{type(self).__name__}: step {step} is out of range; epoch {self.epoch} has "
                             f"{self._num_steps()} steps (this pass starts at {start})")
        batch = self._batch(step)
        return self.format.build_padding() if batch is None else batch

    def layout(self) -> dict:
        """What a saved position is valid for: the same layout gives the same steps."""
        return {"world_size": self.world_size, "rank": self.rank, "seed": self.seed}

    def state_dict(self, steps_done: int = 0) -> dict:
        """The position after `steps_done` more batches of the current pass: {"epoch", "step"} and
        the layout it is valid for. A plain DataLoader's loop passes its count; torchdata's
        StatefulDataLoader stores the pass's start (steps_done=0) and counts batches itself."""
        start = self._sync()
        return {"epoch": self.epoch, "step": start + operator.index(steps_done), "num_steps": self._num_steps(),
                **self.layout()}

    def load_state_dict(self, state: dict) -> None:
        """The next pass runs epoch state["epoch"] from step state["step"] (set_epoch of that epoch
        keeps the step; another epoch starts at 0)."""
        epoch, step = check_state(type(self).__name__, state, self.layout())
        self._schedule(epoch)
        self._scheduled = epoch
        if step > self._num_steps():
            raise ValueError(f"{type(self).__name__}.load_state_dict: step {step} is past epoch {epoch}'s "
                             f"{self._num_steps()} steps; the state is from another dataset")
        self._resume_epoch = epoch
        self._cell.set(epoch, step)

    def __getstate__(self) -> dict:
        # The epoch's schedule holds C++ objects that do not pickle; a copy re-plans.
        state = dict(self.__dict__)
        for name in self._unpickled:
            state.pop(name, None)
        state["_scheduled"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._reopen()
        self._sync()

    def _reopen(self) -> None:
        """Reopens what __getstate__ left out beside the schedule (a subclass's files)."""

    _unpickled: tuple = ()
