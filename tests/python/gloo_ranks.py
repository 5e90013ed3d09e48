"""Running a function on several CPU processes joined by a gloo process group, for the tests of
the distributed code (context parallelism, DDP): run_ranks(fn, world, tmp_path, *args) calls
fn(rank, world, *args) in `world` spawned processes and returns what each returned (anything
torch.save can write), in rank order. A failure in any rank fails the caller with its traceback."""
from __future__ import annotations

import gc
import os
import pathlib
import sys

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
        # DDP's reducer sits in reference cycles and holds the process group: collect it while the
        # interpreter is whole, before the group goes.
        gc.collect()
        dist.destroy_process_group()
    # Once in a few full-suite runs (2026-12-01, torch 2.13 CPU) a rank aborted in the interpreter's
    # teardown ("terminate called without an active exception": a gloo thread destroyed while
    # joinable) after its result was saved; nothing is left to do, so leave without that teardown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_ranks(fn, world: int, tmp_path: pathlib.Path, *args) -> list:
    results = tmp_path / "ranks"
    results.mkdir(exist_ok=True)
    store = tmp_path / "store"
    mp.spawn(_worker, args=(world, str(store), str(results), fn, args), nprocs=world, join=True)
    return [torch.load(results / f"rank{r}.pt", weights_only=False) for r in range(world)]
