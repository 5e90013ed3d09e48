"""The VLA example (examples/train_vla.py and its model): the multimodal packed batch run through both
towers varlen gives each sample what running it alone gives (float64), no token of one image or
sample reaches another (bit-exact under perturbation), and the CPU smoke preset runs every mode."""
import json
import pathlib
import sys

import numpy as np
import pytest
import torch

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))

from varpack.multimodal import ViewPruning, plan_multimodal, sample_tokens  # noqa: E402
from varpack.multimodal_batch import build_multimodal_batch, build_padded_multimodal  # noqa: E402


@pytest.fixture(scope="module")
def setting():
    from train_vla import PRESETS
    from vla_model import VLAModel
    from vla_task import TaskDataset
    preset = PRESETS["smoke"]
    data = TaskDataset(preset.task, 10, seed=3).samples
    data.append({"images": [], "input_ids": np.array([2, 4, 5]), "labels": np.array([-100, -100, 5])})
    torch.manual_seed(0)
    model = VLAModel(preset.model).double().eval()
    return data, model


def as_double(batch):
    return {k: (v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
            for k, v in batch.items()}


def packed_hidden(model, data, pruning=None):
    """Each sample's decoder hidden states from one varlen batch of all samples."""
    mplan = plan_multimodal(data, 128, pruning=pruning)
    batch = build_multimodal_batch(mplan, data, image_token_id=1)
    with torch.no_grad():
        hidden = model.hidden(as_double(batch))
    cu = batch["cu_seqlens"].tolist()
    return {s: hidden[cu[g]:cu[g + 1]] for g, s in enumerate(batch["segment_sample"].tolist()) if s >= 0}


def test_packed_and_padded_equal_each_sample_alone(setting):
    data, model = setting
    for pruning in (None, ViewPruning(drop={"overhead"})):
        packed = packed_hidden(model, data, pruning)
        padded_batch = build_padded_multimodal(data, range(len(data)), pruning, image_token_id=1)
        with torch.no_grad():
            padded = model.hidden(as_double(padded_batch))
        assert sorted(packed) == list(range(len(data)))
        for index, sample in enumerate(data):
            alone = build_padded_multimodal(data, [index], pruning, image_token_id=1, multiple=1)
            with torch.no_grad():
                reference = model.hidden(as_double(alone))[0]
            n = sum(sample_tokens(sample, index, pruning))
            assert reference.shape[0] == n
            torch.testing.assert_close(packed[index], reference, rtol=0, atol=1e-10)
            torch.testing.assert_close(padded[index, :n], reference, rtol=0, atol=1e-10)


def test_no_token_reaches_another_image_or_sample(setting):
    """Changing one image of sample 4 changes nothing of any other sample (bit-exact) and, in the
    vision tower, nothing of that sample's other images."""
    data, model = setting
    mplan = plan_multimodal(data, 128)
    changed = [dict(s) for s in data]
    changed[4]["images"] = [dict(img) for img in data[4]["images"]]
    base = changed[4]["images"][1]
    base["pixels"] = base["pixels"] + np.float16(0.5)
    outputs = []
    for samples in (data, changed):
        batch = as_double(build_multimodal_batch(mplan, samples, image_token_id=1))
        with torch.no_grad():
            outputs.append((model.encode_images(batch), model.hidden(batch), batch))
    (vision_a, hidden_a, batch), (vision_b, hidden_b, _) = outputs
    image_cu = batch["vision_cu_seqlens"].tolist()
    for k, (owner, position) in enumerate(zip(batch["image_sample"].tolist(), batch["image_index"].tolist())):
        same = torch.equal(vision_a[image_cu[k]:image_cu[k + 1]], vision_b[image_cu[k]:image_cu[k + 1]])
        assert same == (owner != 4 or position != 1), (owner, position)
    cu = batch["cu_seqlens"].tolist()
    for g, owner in enumerate(batch["segment_sample"].tolist()):
        same = torch.equal(hidden_a[cu[g]:cu[g + 1]], hidden_b[cu[g]:cu[g + 1]])
        assert same == (owner != 4), owner


def test_smoke_preset_runs_every_mode(tmp_path):
    import train_vla
    train_vla.main(["--preset", "smoke", "--device", "cpu", "--out", str(tmp_path)])
    results = json.loads((tmp_path / "results.json").read_text())
    modes = results["modes"]
    for mode in train_vla.MODES:
        assert modes[mode]["status"] == "ok", (mode, modes[mode])
        assert np.isfinite(modes[mode]["heldout_loss"]) and modes[mode]["step_ms_median"] > 0
    # The same samples in every mode: the same first loss (same weights) except where views are pruned.
    first = {m: modes[m]["losses"][0] for m in train_vla.MODES}
    assert first["dynamic"] == pytest.approx(first["padded"], rel=1e-4)
    assert first["varlen"] == pytest.approx(first["padded"], rel=1e-4)
    assert first["varlen_pruned"] != pytest.approx(first["padded"], rel=1e-4)
    valid = {m: modes[m]["decoder_valid_per_step"] for m in train_vla.MODES}
    assert valid["padded"] == valid["dynamic"] == valid["varlen"] > valid["varlen_pruned"]
    assert modes["padded"]["decoder_computed_per_step"] >= modes["dynamic"]["decoder_computed_per_step"] \
        > modes["varlen"]["decoder_computed_per_step"] == valid["varlen"]
    assert modes["padded"]["vision_computed_per_step"] > modes["varlen"]["vision_computed_per_step"] \
        > modes["varlen_pruned"]["vision_computed_per_step"]
    assert "| varlen_pruned |" in (tmp_path / "results.md").read_text()
    assert "targets" in results
