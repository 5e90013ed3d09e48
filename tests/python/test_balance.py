"""varpack.balance_rows and varpack.row_costs: the assignment's invariants checked in numpy, costs
against a numpy sum over the plan's pieces, the round-robin baseline, errors and determinism."""

import numpy as np
import pytest

import varpack
from varpack.auto import CostModel


def check(balance, costs, ranks, k, drop_last):
    """Every assigned row once, in its own step, k per rank (the round-robin counts in a partial
    last step), increasing within a rank, and costs and statistics that match."""
    costs = np.asarray(costs, dtype=np.float64)
    n, step_rows = len(costs), ranks * k
    partial = not drop_last and n % step_rows > 0
    assert balance.num_steps == n // step_rows + partial
    assert balance.rank_cost.shape == (balance.num_steps, ranks)
    seen = np.zeros(n, dtype=np.int64)
    worst = []
    for s, step in enumerate(balance):
        m = min(step_rows, n - s * step_rows)
        for r, rows in enumerate(step):
            assert len(rows) == m // ranks + (r < m % ranks)
            assert np.all(np.diff(rows) > 0)
            assert np.all((rows >= s * step_rows) & (rows < s * step_rows + m))
            seen[rows] += 1
            assert balance.rank_cost[s, r] == pytest.approx(costs[rows].sum(), rel=1e-12, abs=0)
        worst.append(balance.rank_cost[s].max())
    assigned = balance.stats["assigned_rows"]
    assert np.array_equal(seen, (np.arange(n) < assigned).astype(np.int64))
    assert assigned + balance.stats["dropped_rows"] == n
    assert balance.stats["step_time"] == pytest.approx(sum(worst), rel=1e-12)
    assert balance.stats["total_cost"] == pytest.approx(costs[:assigned].sum(), rel=1e-12)


@pytest.fixture
def long_plan(rng):
    lengths = rng.integers(1000, 8001, size=3000)
    return varpack.plan(lengths, capacity=16384, shuffle=True, seed=3)


def test_row_costs_match_a_numpy_sum_over_pieces(long_plan):
    for model in (None, CostModel(alpha=2e-6, beta=5e-10, overhead=1.0)):
        costs = varpack.row_costs(long_plan, model)
        alpha, beta, c = (7.26e-6, 351e-12, 0.0) if model is None else (model.alpha, model.beta, model.overhead)
        n = long_plan.pieces[:, 2].astype(np.float64)
        want = c + np.add.reduceat(alpha * n + beta * n * n, long_plan.row_begin[:-1])
        np.testing.assert_allclose(costs, want, rtol=1e-12)


@pytest.mark.parametrize("ranks,k", [(8, 1), (8, 2), (8, 4), (3, 5), (1, 3)])
@pytest.mark.parametrize("drop_last", [True, False])
def test_balanced_steps_are_valid_and_never_slower(long_plan, ranks, k, drop_last):
    costs = varpack.row_costs(long_plan)
    balance = varpack.balance_rows(long_plan, ranks, k, drop_last=drop_last)
    check(balance, costs, ranks, k, drop_last)
    naive = varpack.balance_rows(costs, ranks, k, drop_last=drop_last, method="round_robin")
    check(naive, costs, ranks, k, drop_last)
    assert np.all(balance.rank_cost.max(axis=1) <= naive.rank_cost.max(axis=1))
    if k > 1 and ranks > 1:
        assert balance.stats["step_time"] < naive.stats["step_time"]
        assert balance.stats["mean_imbalance"] < naive.stats["mean_imbalance"]


def test_windows_help_one_row_per_rank(long_plan):
    costs = varpack.row_costs(long_plan)
    plain = varpack.balance_rows(costs, 8, 1)
    windowed = varpack.balance_rows(costs, 8, 1, window_steps=8)
    assert windowed.stats["step_time"] < plain.stats["step_time"]
    # Every row of window w (8 steps of 8 rows) stays in that window.
    for s in range(windowed.num_steps):
        rows = np.concatenate(windowed.step(s))
        assert np.all(rows // 64 == s // 8)
    assert sorted(windowed.rows.tolist()) == list(range(windowed.stats["assigned_rows"]))
    with pytest.raises(ValueError, match="window_steps"):
        varpack.balance_rows(costs, 8, 1, window_steps=0)


def test_round_robin_deals_row_i_to_rank_i_mod_ranks(rng):
    costs = rng.random(50)
    naive = varpack.balance_rows(costs, 4, 3, drop_last=False, method="round_robin")
    for s, step in enumerate(naive):
        for r, rows in enumerate(step):
            assert np.all((rows - s * 12) % 4 == r)


def test_same_input_same_assignment(long_plan):
    a = varpack.balance_rows(long_plan, 8, 2)
    b = varpack.balance_rows(long_plan, 8, 2)
    assert np.array_equal(a.rows, b.rows) and np.array_equal(a.rank_cost, b.rank_cost)
    assert np.array_equal(a.as_array()[0, 3], a.rows_of(0, 3))
    assert [list(x) for x in a.for_rank(5)] == [list(a.rows_of(s, 5)) for s in range(a.num_steps)]


def test_partial_step_and_more_ranks_than_rows():
    costs = [5.0, 1.0, 2.0]
    dropped = varpack.balance_rows(costs, 8, 1)
    assert dropped.num_steps == 0 and dropped.stats["dropped_rows"] == 3
    kept = varpack.balance_rows(costs, 8, 1, drop_last=False)
    check(kept, costs, 8, 1, False)
    assert kept.stats["partial_step_rows"] == 3
    assert [len(rows) for rows in kept.step(0)] == [1, 1, 1, 0, 0, 0, 0, 0]
    with pytest.raises(ValueError, match="partial"):
        kept.as_array()


def test_hand_case_is_optimal():
    # Dealt in order: {3, 2, 2} = 7 against {3, 2, 0}; balanced: {3, 3, 0} and {2, 2, 2} = 6.
    balance = varpack.balance_rows([3, 3, 2, 2, 2, 0], 2, 3)
    assert balance.rank_cost.tolist() == [[6.0, 6.0]]
    assert balance.stats["mean_imbalance"] == 1.0


def test_a_rank_builds_its_step_from_the_selected_rows(rng):
    lengths = rng.integers(50, 800, size=400)
    samples = [rng.integers(0, 32000, size=n, dtype=np.int32) for n in lengths]
    plan = varpack.plan(lengths, capacity=4096, shuffle=True, seed=1)
    balance = varpack.balance_rows(plan, 4, 2)
    for step in range(balance.num_steps):
        for rank in range(4):
            rows = balance.rows_of(step, rank)
            batch = varpack.build_batch(varpack.select_rows(plan, rows), samples)
            # The plain way: one batch per row, joined.
            parts = [varpack.build_batch(plan, samples, rows=(r, r + 1)) for r in rows]
            for key in ("input_ids", "labels", "position_ids"):
                assert np.array_equal(batch[key].numpy(), np.concatenate([p[key].numpy() for p in parts]))
    with pytest.raises(ValueError, match="row index 99999"):
        varpack.select_rows(plan, [0, 99999])


def test_errors_name_the_parameter(long_plan):
    with pytest.raises(ValueError, match="ranks must be >= 1"):
        varpack.balance_rows(long_plan, 0, 1)
    with pytest.raises(ValueError, match="rows_per_rank must be >= 1"):
        varpack.balance_rows(long_plan, 2, 0)
    with pytest.raises(ValueError, match="cost of row 1"):
        varpack.balance_rows([1.0, -2.0], 1, 1)
    with pytest.raises(ValueError, match="cost of row 0"):
        varpack.balance_rows([np.nan], 1, 1)
    with pytest.raises(ValueError, match="round_robin"):
        varpack.balance_rows([1.0], 1, 1, method="greedy")
    with pytest.raises(ValueError, match="cost_model"):
        varpack.balance_rows([1.0], 1, 1, cost_model=CostModel(1.0, 0.0))
    with pytest.raises(ValueError, match="1-D"):
        varpack.balance_rows(np.ones((2, 2)), 1, 1)
    with pytest.raises(TypeError, match="alpha and beta"):
        varpack.row_costs(long_plan, cost_model=(1.0, 2.0))
    with pytest.raises(ValueError, match="alpha"):
        varpack.row_costs(long_plan, cost_model=CostModel(-1.0, 0.0))
    with pytest.raises(IndexError, match="rank 8"):
        varpack.balance_rows(long_plan, 8, 1).rows_of(0, 8)
