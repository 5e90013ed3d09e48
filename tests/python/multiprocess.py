"""Running a function on several CPU processes joined by a gloo process group, for the tests of
the distributed code (context parallelism, DDP): run_ranks(fn, world, tmp_path, *args) calls
fn(rank, world, *args) in `world` spawned processes and returns what each returned (anything
torch.save can write), in rank order. A failure in any rank fails the caller with its traceback."""
from __future__ import annotations

import os
import pathlib

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _worker(rank, world, store_file, results, fn, args):
    # One thread per process: the two ranks share the machine's cores with each other.
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=rank, world_size=world)
    try:
        result = fn(rank, world, *args)
        torch.save(result, os.path.join(results, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def run_ranks(fn, world: int, tmp_path: pathlib.Path, *args) -> list:
    results = tmp_path / "ranks"
    results.mkdir(exist_ok=True)
    store = tmp_path / "store"
    mp.spawn(_worker, args=(world, str(store), str(results), fn, args), nprocs=world, join=True)
    return [torch.load(results / f"rank{r}.pt", weights_only=False) for r in range(world)]
