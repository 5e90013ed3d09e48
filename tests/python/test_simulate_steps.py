"""The step-time simulator (bench/balance/simulate_steps.py) on a small case: the cost-balanced
schedule is never slower than the token-balanced one, no schedule beats the ideal, and no whole-row
schedule beats the whole-row bound."""
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench" / "balance"))
import simulate_steps  # noqa: E402


@pytest.mark.parametrize("k", [1, 2])
def test_cost_balancing_is_between_the_ideal_and_token_balancing(k):
    r = simulate_steps.simulate("lognormal", ranks=4, k=k, window=4, steps=8, capacity=8192,
                                model=simulate_steps.ANCHOR_COST_MODEL, seed=1)
    assert r["steps"] == 8
    assert 1.0 - 1e-12 <= r["bound_vs_ideal"] <= r["cost_vs_ideal"] + 1e-12
    assert r["cost_vs_ideal"] <= r["token_vs_ideal"] + 1e-12
    assert r["speedup"] == pytest.approx(r["token_vs_ideal"] / r["cost_vs_ideal"])
