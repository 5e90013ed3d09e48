"""The data-parallel example (examples/train_ddp.py) on 2 CPU processes over gloo: one step's loss
and gradients summed over the ranks equal one process's on all of the step's rows (fp32
tolerance), and the whole example runs both modes with every rank's compute time per step."""
import json
import pathlib
import sys

import numpy as np
import pytest
import torch

import varpack

from gloo_ranks import run_ranks

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples"))
import train_ddp  # noqa: E402

CAPACITY = 256


def samples():
    rng = np.random.default_rng(7)
    lengths = np.clip(rng.lognormal(np.log(24), 1.0, size=120).astype(int), 2, CAPACITY)
    return [rng.integers(0, 256, size=n).astype(np.int32) for n in lengths]


def dataset(rank, world):
    return varpack.BalancedPackedDataset(samples(), CAPACITY, rank=rank, world_size=world, rows_per_rank=2,
                                         seed=3)


def one_step_on_rank(rank, world):
    model = train_ddp.make_model(train_ddp.PRESETS["smoke"], seed=0)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    batch = dataset(rank, world)[0]
    count = torch.tensor([train_ddp.targets_in(batch)])
    torch.distributed.all_reduce(count)
    with ddp.no_sync():
        loss = train_ddp.forward_backward(ddp, batch, int(count), torch.device("cpu"))
    train_ddp.all_reduce_gradients(model)
    torch.distributed.all_reduce(loss)
    return float(loss), {name: p.grad.clone() for name, p in model.named_parameters()}


def on_rank(rank, world, out):
    # Both checks in one pair of processes: starting one (torch, transformers) takes seconds.
    return one_step_on_rank(rank, world), run_example(rank, world, out)


def run_example(rank, world, out):
    return train_ddp.main(["--preset", "smoke", "--device", "cpu", "--max-files", "40", "--out", out])


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ddp")
    return run_ranks(on_rank, 2, tmp, str(tmp / "out")), tmp / "out"


def test_two_ranks_give_the_gradient_of_one_process(two_ranks):
    ranks = [step for step, _ in two_ranks[0]]
    # One process, all rows of step 0 (both ranks' rows) in one batch.
    ds = dataset(0, 2)
    rows = np.concatenate(ds.balance.step(0))
    batch = ds.format.build(varpack.select_rows(ds.plan, rows), ds.samples)
    model = train_ddp.make_model(train_ddp.PRESETS["smoke"], seed=0)
    loss = train_ddp.forward_backward(model, batch, train_ddp.targets_in(batch), torch.device("cpu"))
    for rank_loss, grads in ranks:
        assert rank_loss == pytest.approx(float(loss), rel=1e-6)
        for name, p in model.named_parameters():
            torch.testing.assert_close(grads[name], p.grad, rtol=1e-5, atol=1e-7, msg=lambda m: f"{name}: {m}")


def test_example_runs_both_modes_on_two_ranks(two_ranks):
    ranks = [example for _, example in two_ranks[0]]
    results = json.loads((two_ranks[1] / "results.json").read_text())
    assert results["world_size"] == 2 and results["backend"] == "gloo"
    steps = train_ddp.timed_steps(train_ddp.PRESETS["smoke"])
    for mode in ("token", "cost"):
        r = results["modes"][mode]
        assert len(r["steps"]) == steps
        assert all(len(s["rank_compute_s"]) == 2 and min(s["rank_compute_s"]) > 0 for s in r["steps"])
        assert all(s["compute_imbalance"] >= 1.0 for s in r["steps"])
    # Same rows in both modes' timed windows, dealt by cost in one: never a worse predicted step.
    token, cost = results["modes"]["token"], results["modes"]["cost"]
    assert cost["balance"]["step_time"] <= token["balance"]["step_time"]
    assert ranks[0]["modes"]["cost"]["steps"][0]["loss"] == ranks[1]["modes"]["cost"]["steps"][0]["loss"]
