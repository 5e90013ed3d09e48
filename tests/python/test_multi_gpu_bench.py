"""Issue 63's measurement scripts (bench/distributed/cp_multi.py, schedule_multi.py) on 2 gloo
processes at tiny sizes, so that the multi-GPU run finds them working: every variant agrees with
one process, the collective-free kernel path runs the same calls, the schedule and both baselines
train every step on both ranks, and the one-rank path says that nothing parallel was measured."""
import pathlib
import subprocess
import sys

import pytest
import torch

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench" / "distributed"
sys.path.insert(0, str(BENCH))

CP_ARGS = ["--lengths", "256", "--row", "384", "--row-median", "64", "--heads", "4", "--kv-heads", "2",
           "--head-dim", "16", "--repeats", "1", "--device", "cpu"]
SCHEDULE_ARGS = ["--tiny", "--capacity", "128", "--steps", "2", "--window", "2", "--median", "48",
                 "--max-files", "40", "--device", "cpu"]


def cp_on_rank(rank, world):
    import cp_multi
    return cp_multi.run(cp_multi.parse_args(CP_ARGS), rank, world, torch.device("cpu"))


def schedule_on_rank(rank, world):
    import schedule_multi
    args, preset = schedule_multi.parse_args(SCHEDULE_ARGS)
    return schedule_multi.run(args, preset, rank, world, torch.device("cpu"))


def test_every_variant_on_two_ranks_agrees_with_one(tmp_path):
    from gloo_ranks import run_ranks
    results = run_ranks(cp_on_rank, 2, tmp_path)
    cases = results[0]["cases"]
    assert [c["tokens"] for c in cases] == [256, 384] and cases[1]["documents"] > 1
    for case in cases:
        assert case["variants"]["hybrid"] == {"skipped": "needs 4+ ranks"}
        for variant in ("allgather", "ring", "ulysses"):
            r = case["variants"][variant]
            assert len(r["rank_step_s"]) == 2 and r["exposed_s"] == pytest.approx(r["step_s"] - r["kernels_s"])
            # bf16 against bf16: the LSE merges round differently, nothing more.
            assert max(r["max_abs_error"].values()) < 0.05, (case["case"], variant, r["max_abs_error"])
    assert "ring's exposed communication" in results[0]["text"] and "| ring |" in results[0]["text"]


def test_the_kernel_path_without_collectives_runs_the_variants_calls():
    """LocalComm hands each rank its own bytes: with one document on 2 ranks and rank 0's data
    standing in for rank 1's, the shapes and the kernel calls are the variant's own."""
    import cp_multi
    from varpack.cp_layout import SPLIT, cp_layout
    from varpack.cp_variants import Mask
    layout = cp_layout([0, 64], 2, owner=[SPLIT])
    q, k, v, dout = (torch.randn(64, h, 16, dtype=torch.bfloat16) for h in (4, 2, 2, 4))
    local = [layout.shard(t, 0) for t in (q, k, v, dout)]
    for variant in ("allgather", "ring", "ulysses"):
        dq, dk, dv = cp_multi.local_step(layout, 0, variant, *local, Mask(-1, 0, 0.25, 0.0))
        assert dq.shape == local[0].shape and dk.shape == local[1].shape and dv.shape == local[2].shape
        assert torch.isfinite(dq.float()).all() and dq.abs().sum() > 0


def test_the_schedule_and_both_baselines_train_on_two_ranks(tmp_path):
    from gloo_ranks import run_ranks
    results = run_ranks(schedule_on_rank, 2, tmp_path)
    for mix in ("stdlib", "lognormal"):
        out = results[0]["mixes"][mix]
        assert out["longer_than_a_row"] > 0  # documents that only context parallelism keeps whole
        for mode in ("schedule", "token", "lpt"):
            s = out["modes"][mode]["summary"]
            assert s["steps"] >= 1 and 0 < s["tokens"] <= out["tokens"] and s["predicted_s"] > 0
            assert all(len(r["rank_compute_s"]) == 2 for r in out["modes"][mode]["steps"])
    assert results[1]["mixes"]["lognormal"]["modes"]["lpt"]["summary"] == \
        results[0]["mixes"]["lognormal"]["modes"]["lpt"]["summary"]  # every rank reports the same
    assert "simulator within 5%" in results[0]["text"]


@pytest.mark.parametrize("script", ["cp_multi.py", "schedule_multi.py"])
def test_help_and_one_rank(script, tmp_path):
    help_text = subprocess.run([sys.executable, str(BENCH / script), "--help"], capture_output=True, text=True,
                               check=True).stdout
    assert "torchrun --nproc_per_node" in help_text and "--tiny" in help_text
    if script == "cp_multi.py":  # the other's one-rank path is the same code as its two-rank one
        run = subprocess.run([sys.executable, str(BENCH / script), *CP_ARGS, "--out", str(tmp_path)],
                             capture_output=True, text=True, check=True)
        assert "no context parallelism was measured" in run.stdout
        assert (tmp_path / "cp.json").exists() and (tmp_path / "cp.md").exists()
