"""varpack.calibrate and `python -m varpack calibrate`: the fit recovers a known row cost from a
step whose time follows it, the command runs a real (tiny) model and writes a cost model that
CostModel.load and balance_rows take, and bad --model specs get a one-line error."""
import json
import time

import pytest
import torch

import varpack
from varpack.__main__ import main
from varpack.auto import CostModel
from varpack.calibrate import calibrate, row_compositions


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    import varpack.hf
    varpack.hf.register()
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512)
    config._attn_implementation = "varpack"
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def test_row_compositions_separate_the_terms():
    rows = row_compositions(4096)
    assert all(sum(r) in (2048, 4096) for r in rows)
    assert {len(r) for r in rows} == {1, 2, 4, 16, 64}
    with pytest.raises(ValueError, match="too small"):
        row_compositions(20)


def test_fit_recovers_the_cost_of_a_timed_step():
    # A "step" that sleeps for c + alpha * tokens + beta * sum(len^2): the fit must find it.
    truth = CostModel(alpha=4e-6, beta=2e-9, overhead=6e-3)

    def step(batch):
        lengths = batch["cu_seq_lens_q"].diff().tolist()
        time.sleep(truth.predict(lengths))

    result = calibrate(step, capacity=2048, repeats=3, warmup=0)
    fitted = result.cost_model
    # Sleeps overshoot by scheduler noise (about 0.1 ms here), a few percent of the 6-20 ms rows.
    assert fitted.overhead == pytest.approx(truth.overhead, rel=0.25)
    assert fitted.alpha == pytest.approx(truth.alpha, rel=0.25)
    assert fitted.beta == pytest.approx(truth.beta, rel=0.25)
    assert max(abs(e) for e in result.residuals()) < 0.1


def test_command_calibrates_a_model_and_writes_a_loadable_cost_model(tmp_path, capsys):
    out = tmp_path / "calibration.json"
    assert main(["calibrate", "--model", "test_calibrate:tiny_llama", "--capacity", "256",
                 "--device", "cpu", "--repeats", "1", "--warmup", "0", "--out", str(out)]) == 0
    assert "cost per row" in capsys.readouterr().out
    model = CostModel.load(out)
    saved = json.loads(out.read_text())
    assert len(saved["points"]) == len(row_compositions(256)) and saved["device"] == "cpu"
    plan = varpack.plan([100, 200, 50, 250] * 4, capacity=256)
    assert varpack.balance_rows(plan, 2, 1, cost_model=model).num_steps > 0


def test_model_spec_may_name_a_file(tmp_path):
    # A file whose module defines a dataclass: it must be registered in sys.modules to load.
    (tmp_path / "my_models.py").write_text(
        "from __future__ import annotations\nimport dataclasses\n\n@dataclasses.dataclass\nclass C:\n"
        "    x: int = 1\n\ndef build():\n    return C()\n")
    from varpack.__main__ import load_factory
    assert load_factory(f"{tmp_path / 'my_models.py'}:build")().x == 1


def test_command_names_a_bad_model_spec(tmp_path, capsys):
    for spec, message in (("no_colon", "module:function"), ("test_calibrate:missing", "no function 'missing'"),
                          ("nowhere.py:f", "no file nowhere.py")):
        assert main(["calibrate", "--model", spec, "--capacity", "256", "--device", "cpu",
                     "--out", str(tmp_path / "x.json")]) == 2  # bad usage
        assert message in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def not_a_model():
    return "a string"


def test_command_errors_are_one_line_with_the_documented_status(tmp_path, capsys):
    out = ["--out", str(tmp_path / "x.json")]
    # A factory returning something else than a module: bad input (it was an AttributeError).
    assert main(["calibrate", "--model", "test_calibrate:not_a_model", "--capacity", "256",
                 "--device", "cpu", *out]) == 1
    err = capsys.readouterr().err
    assert err.startswith("varpack: error: ") and "returned str, not a torch.nn.Module" in err
    assert err.count("\n") == 1
    if not torch.cuda.is_available():  # was a raw AssertionError from torch
        assert main(["calibrate", "--model", "test_calibrate:tiny_llama", "--capacity", "256",
                     "--device", "cuda", *out]) == 2
        assert "sees no CUDA GPU; use --device cpu" in capsys.readouterr().err
    for bad in (["--capacity", "0"], ["--capacity", "256", "--repeats", "0"], ["--capacity", "x"]):
        with pytest.raises(SystemExit) as exit_:
            main(["calibrate", "--model", "test_calibrate:tiny_llama", "--device", "cpu", *bad, *out])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("varpack: error: ") and err.count("\n") == 1, err
    assert not (tmp_path / "x.json").exists()
