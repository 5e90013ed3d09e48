"""The step-time simulator (bench/balance/simulate_steps.py) on a small case: every schedule's line
is printed, no schedule beats its ideal, cost balancing with windows beats dealing rows in order,
and the noise from the calibration's residuals is their RMS."""
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench" / "balance"))
import simulate_steps  # noqa: E402


def test_every_schedule_is_printed_and_none_beats_the_ideal(capsys):
    simulate_steps.main(["--mixes", "lognormal", "--ranks", "8", "--steps", "8", "--window", "4",
                         "--capacity", "8192", "--max-length", "40000", "--noise", "calibration,0.1"])
    rows = [line.split("|") for line in capsys.readouterr().out.splitlines() if line.startswith("| lognormal")]
    names = [r[4].strip().split(" (")[0] for r in rows]
    assert names == ["round robin", "rr + window sort", "LPT", "LPT + windows", "DP + CP"] * 2
    ratios = [float(r[6]) for r in rows]
    assert all(x >= 1.0 for x in ratios)
    assert ratios[3] < ratios[0] and ratios[4] < ratios[0]


def test_calibration_noise_is_the_residual_rms():
    model = simulate_steps.ANCHOR_COST_MODEL
    points = [([100], model.predict([100]) / 1.1), ([200], model.predict([200]) / 0.9)]
    assert np.isclose(simulate_steps.residual_noise(model, points), 0.1)
