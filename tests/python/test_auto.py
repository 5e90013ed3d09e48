"""Tests for varpack.auto: the cost-model fit recovers known coefficients from synthetic timings,
stays non-negative on noise, rejects unusable input, and the chooser picks the faster path and
says so in the log."""
import logging

import numpy as np
import pytest

from varpack.auto import PADDED, VARLEN, CostModel, PathChooser, fit_cost_model


def synthetic(model, rng, count=40, noise=0.0):
    measurements = []
    for _ in range(count):
        lengths = rng.integers(1, 8192, size=rng.integers(1, 16))
        t = model.predict(lengths)
        measurements.append((lengths, t * (1 + noise * rng.standard_normal())))
    return measurements


def test_fit_recovers_exact_coefficients():
    # The reference fit of a 542M model step (bench/results/distributed.md): 3.4 ms + 7.26 us/token + 351 ps/token^2.
    truth = CostModel(alpha=7.26e-6, beta=3.51e-10, overhead=3.4e-3)
    fitted = fit_cost_model(synthetic(truth, np.random.default_rng(0)))
    assert fitted.alpha == pytest.approx(truth.alpha, rel=1e-9)
    assert fitted.beta == pytest.approx(truth.beta, rel=1e-9)
    assert fitted.overhead == pytest.approx(truth.overhead, rel=1e-6)


def test_fit_with_noise_is_close_and_nonnegative():
    truth = CostModel(alpha=2e-6, beta=1e-10, overhead=1e-3)
    fitted = fit_cost_model(synthetic(truth, np.random.default_rng(1), count=200, noise=0.02))
    assert fitted.alpha == pytest.approx(truth.alpha, rel=0.1)
    assert fitted.beta == pytest.approx(truth.beta, rel=0.1)
    assert min(fitted.alpha, fitted.beta, fitted.overhead) >= 0


def test_fit_clamps_negative_coefficients_to_zero():
    # Time falls with sum n^2 at fixed tokens: an unconstrained fit gives beta < 0.
    measurements = [([1000] * 4, 1.0), ([2000] * 2, 0.9), ([4000], 0.8), ([500] * 8, 1.1)]
    unconstrained, *_ = np.linalg.lstsq(
        np.array([[4000, 4e6, 1], [4000, 8e6, 1], [4000, 16e6, 1], [4000, 2e6, 1]]),
        np.array([1.0, 0.9, 0.8, 1.1]), rcond=None)
    assert unconstrained[1] < 0
    fitted = fit_cost_model(measurements)
    assert fitted.beta == 0.0 and fitted.alpha >= 0 and fitted.overhead >= 0


def test_fit_without_overhead():
    truth = CostModel(alpha=3e-6, beta=2e-10)
    fitted = fit_cost_model(synthetic(truth, np.random.default_rng(2)), fit_overhead=False)
    assert fitted.overhead == 0.0
    assert fitted.alpha == pytest.approx(truth.alpha, rel=1e-9)


@pytest.mark.parametrize("measurements, message", [
    ([], "no measurements"),
    ([([100, 200], 1.0), ([100, 200], 1.1)], "distinct"),
    ([([100, -5], 1.0), ([300], 1.0)], "negative"),
    ([([100], float("nan")), ([300], 1.0)], "finite"),
])
def test_fit_rejects_unusable_input(measurements, message):
    with pytest.raises(ValueError, match=message):
        fit_cost_model(measurements)


def test_predict_padded_counts_the_full_rectangle():
    model = CostModel(alpha=1.0, beta=0.5, overhead=2.0)
    assert model.predict_padded(3, 10) == pytest.approx(2 + 3 * (10 + 50))
    assert model.predict([10, 10, 10]) == model.predict_padded(3, 10)
    assert CostModel.from_dict(model.to_dict()) == model


def test_chooser_prefers_padded_at_low_padding_and_varlen_at_high(caplog):
    # The padded kernel is twice as fast per token and per token^2 (cuDNN vs FA2 varlen): it wins
    # when there is little padding and loses when the rectangle is mostly padding.
    varlen = CostModel(alpha=2e-6, beta=2e-10, overhead=1e-4)
    padded = CostModel(alpha=1e-6, beta=1e-10, overhead=1e-4)
    chooser = PathChooser(padded, varlen)
    with caplog.at_level(logging.INFO, logger="varpack.auto"):
        low = chooser.choose([4000, 4096, 3990, 4050], step=3)
        high = chooser.choose([4096, 100, 200, 50], step=4)
    assert low.path == PADDED and low.padding_rate < 0.05
    assert high.path == VARLEN and high.padding_rate > 0.5
    assert low.predicted_saving == 0.0 and 0 < high.predicted_saving < 1
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0].startswith("step 3: padded path") and messages[1].startswith("step 4: varlen path")


def test_chooser_decision_matches_brute_force():
    rng = np.random.default_rng(3)
    varlen = CostModel(alpha=2e-6, beta=3e-10, overhead=5e-4)
    padded = CostModel(alpha=1.2e-6, beta=1.5e-10, overhead=2e-4)
    chooser = PathChooser(padded, varlen, level=logging.DEBUG)
    for _ in range(200):
        lengths = rng.integers(1, 4097, size=rng.integers(1, 32))
        decision = chooser.choose(lengths)
        t_padded = padded.overhead + len(lengths) * (padded.alpha * lengths.max()
                                                     + padded.beta * float(lengths.max()) ** 2)
        t_varlen = varlen.overhead + (varlen.alpha * lengths + varlen.beta * lengths.astype(float) ** 2).sum()
        assert decision.predicted_padded_s == pytest.approx(t_padded)
        assert decision.predicted_varlen_s == pytest.approx(t_varlen)
        assert decision.path == (VARLEN if t_varlen < t_padded else PADDED)


def test_chooser_rejects_a_layout_too_small():
    chooser = PathChooser(CostModel(1, 1), CostModel(1, 1))
    with pytest.raises(ValueError, match="cannot hold"):
        chooser.choose([100, 100], rows=1, width=150)
    with pytest.raises(ValueError, match="no samples"):
        chooser.choose([])


def test_multimodal_chooser_sums_both_towers(caplog):
    from varpack.auto import MultimodalPathChooser
    vision_padded, vision_varlen = CostModel(1e-6, 1e-9, 1e-3), CostModel(2e-6, 2e-9, 2e-3)
    decoder_padded, decoder_varlen = CostModel(3e-6, 1e-9, 1e-3), CostModel(4e-6, 2e-9, 1e-3)
    chooser = MultimodalPathChooser(vision_padded, vision_varlen, decoder_padded, decoder_varlen)
    images, samples = [16, 100, 36], [160, 40]
    with caplog.at_level(logging.INFO, logger="varpack.auto"):
        decision = chooser.choose(images, samples, step=3)
    assert decision.predicted_padded_s == pytest.approx(vision_padded.predict_padded(3, 100)
                                                        + decoder_padded.predict_padded(2, 160))
    assert decision.predicted_varlen_s == pytest.approx(vision_varlen.predict(images) + decoder_varlen.predict(samples))
    assert decision.path == (VARLEN if decision.predicted_varlen_s < decision.predicted_padded_s else PADDED)
    assert decision.padding_rate == pytest.approx(1 - (152 + 200) / (300 + 320))
    assert [r.getMessage() for r in caplog.records if "both towers" in r.getMessage()][0].startswith("step 3:")
    assert len(caplog.records) == 1  # one line per step, not one per tower
    # Fixed shapes: the padded side grows with them, the varlen side does not move.
    fixed = chooser.choose(images, samples, image_slots=6, image_width=256, rows=2, width=512)
    assert fixed.predicted_varlen_s == pytest.approx(decision.predicted_varlen_s)
    assert fixed.predicted_padded_s > decision.predicted_padded_s
    assert fixed.path == VARLEN
    # No images: the decoder alone.
    text_only = chooser.choose([], [10, 10])
    assert text_only.predicted_padded_s == pytest.approx(decoder_padded.predict_padded(2, 10))
    assert text_only.path == PADDED  # equal lengths: padding costs nothing and the padded model is cheaper
    with pytest.raises(ValueError, match="no samples"):
        chooser.choose([4], [])
    with pytest.raises(ValueError, match="cannot hold"):
        chooser.choose(images, samples, image_slots=1, image_width=100)

def test_cost_model_saves_and_loads_as_json(tmp_path):
    model = CostModel(alpha=7.26e-6, beta=3.51e-10, overhead=3.38e-3)
    path = tmp_path / "calibration.json"
    model.save(path, device="test", points=[[[1, 2], 0.5]])
    assert CostModel.load(path) == model
    assert [p.name for p in tmp_path.iterdir()] == ["calibration.json"]  # no temporary left behind
    (tmp_path / "bad.json").write_text('{"alpha": 1e-6, "overhead": 0}')
    with pytest.raises(ValueError, match="bad.json: the cost model has no 'beta'"):
        CostModel.load(tmp_path / "bad.json")
    (tmp_path / "neg.json").write_text('{"alpha": 1e-6, "beta": -1}')
    with pytest.raises(ValueError, match="neg.json: 'beta' is -1"):
        CostModel.load(tmp_path / "neg.json")
    with pytest.raises(ValueError, match="may not override"):
        model.save(path, alpha=1)
