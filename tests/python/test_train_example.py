"""Smoke test of the training benchmark and the saving-curve script (examples/): the tiny CPU
presets run every mode that can run on the CPU, report the others as not available with a reason,
and the packed and padded parity runs reach the same held-out loss."""
import json
import pathlib
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))


@pytest.fixture(scope="module")
def train_results(tmp_path_factory):
    import train_packed
    out = tmp_path_factory.mktemp("train")
    train_packed.main(["--preset", "smoke", "--device", "cpu", "--out", str(out), "--max-files", "40"])
    return out


def test_benchmark_runs_every_cpu_mode(train_results):
    results = json.loads((train_results / "results.json").read_text())
    for name, profile in results["benchmark"]["profiles"].items():
        modes = profile["modes"]
        assert modes["packed_torch"]["status"] == "not available"
        assert "CUDA" in modes["packed_torch"]["reason"]
        for mode in ("fixed", "dynamic", "packed_varpack", "auto"):
            assert modes[mode]["status"] == "ok", (name, mode, modes[mode])
            assert modes[mode]["valid_tokens_per_s"] > 0
        # Same samples per step in every mode: same valid tokens, padding only where padded.
        valid = {modes[m]["valid_tokens_per_step"] for m in ("fixed", "dynamic", "packed_varpack")}
        assert len(valid) == 1
        assert modes["fixed"]["padding_rate"] >= modes["dynamic"]["padding_rate"] > 0
        assert modes["packed_varpack"]["padding_rate"] == 0
        assert sum(modes["auto"]["auto_choices"].values()) == len(modes["auto"]["losses"])
    assert "| packed_varpack |" in (train_results / "results.md").read_text()


def test_first_step_losses_agree_across_modes(train_results):
    # Same initial weights and samples: the first step's loss is the same computation in every
    # layout (float32 on the CPU).
    results = json.loads((train_results / "results.json").read_text())
    for profile in results["benchmark"]["profiles"].values():
        first = [r["losses"][0] for r in profile["modes"].values() if r["status"] == "ok"]
        assert max(first) - min(first) < 1e-4 * max(first)


def test_packed_samples_match_one_by_one(train_results):
    parity = json.loads((train_results / "results.json").read_text())["sample_parity"]
    assert parity["varpack"]["status"] == "ok" and parity["varpack"]["within_tolerance"]
    assert "torch_varlen" not in parity  # CUDA only: not run, not faked


def test_parity_run_reaches_the_same_heldout_loss(train_results):
    parity = json.loads((train_results / "results.json").read_text())["parity"]
    assert parity["status"] == "ok" and parity["varlen_kernel"] == "varpack"
    assert parity["relative_difference"] < 1e-3


def test_saving_curve_runs(tmp_path):
    import saving_curve
    results = saving_curve.main(["--preset", "smoke", "--device", "cpu", "--out", str(tmp_path),
                                 "--max-files", "20"])
    assert set(results["savings"]["attention"]) == {"varpack"}
    assert set(results["savings"]["step"]["varpack"]) == set(saving_curve.PADDING_RATES)
    assert (tmp_path / "saving_curve.md").exists()
