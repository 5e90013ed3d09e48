"""Tests for multimodal packing (varpack.multimodal, varpack.multimodal_batch): image tokens count
toward a row, view pruning drops exactly the named views, the varlen and padded batches hold
each sample's placeholders, text and patches where a per-sample reference puts them, and errors
name the sample at fault."""
import numpy as np
import pytest
import torch

from varpack.multimodal import ViewPruning, image_specs, plan_multimodal, sample_tokens
from varpack.multimodal_batch import build_multimodal_batch, build_padded_multimodal, patchify

IMAGE = 7


def random_samples(rng, count, views=("wrist", "base", "top"), pixels=True, patch=2):
    samples = []
    for i in range(count):
        images = []
        for view in views[:rng.integers(0, len(views) + 1)]:
            rows, cols = (int(v) for v in rng.integers(1, 5, size=2))
            if pixels:
                images.append({"view": view, "patch": patch,
                               "pixels": rng.standard_normal((rows * patch, cols * patch, 3)).astype(np.float32)})
            else:
                images.append({"view": view, "patches": rows * cols})
        text = rng.integers(10, 50, size=int(rng.integers(1, 9)))
        labels = text.copy()
        labels[: len(text) // 2] = -100
        samples.append({"images": images, "input_ids": text, "labels": labels})
    return samples


def reference_patches(pixels, patch):
    """Patches one by one in grid order: the plain version of patchify."""
    rows, cols = pixels.shape[0] // patch, pixels.shape[1] // patch
    return np.stack([pixels[r * patch:(r + 1) * patch, c * patch:(c + 1) * patch].reshape(-1)
                     for r in range(rows) for c in range(cols)])


def kept(sample, index, pruning):
    dropped = pruning.dropped_views(sample, index) if pruning else frozenset()
    return [img for img in sample["images"] if img["view"] not in dropped]


def patches_of(image):
    if "patches" in image:
        return image["patches"]
    return (image["pixels"].shape[0] // image["patch"]) * (image["pixels"].shape[1] // image["patch"])


def check_sample_tokens(batch, sample, index, pruning, where, decoder_ids, decoder_labels, images_of):
    """The decoder tokens at `where` and the sample's images in the vision batch match the sample."""
    images = kept(sample, index, pruning)
    n = sum(patches_of(img) for img in images)
    text = np.asarray(sample["input_ids"])
    assert decoder_ids[where].tolist() == [IMAGE] * n + text.tolist()
    expected_labels = [-100] * n + np.asarray(sample["labels"]).tolist()
    expected_labels[0] = -100  # the builder's convention: no sample predicts across its start
    assert decoder_labels[where].tolist() == expected_labels
    with_tokens = [img for img in images if patches_of(img)]  # a 0-patch image has no vision sequence
    mine = images_of(index)
    assert [batch["image_view"][k] for k in mine] == [img["view"] for img in with_tokens]
    ranges = batch_cu(batch)
    offset = 0
    for k, img in zip(mine, with_tokens):
        tokens = slice(int(ranges[k]), int(ranges[k + 1]))
        placeholders = batch["image_token_index"][tokens].tolist()
        assert placeholders == list(range(where.start + offset, where.start + offset + patches_of(img)))
        if "pixels" in img:
            vision_rows = batch["vision_token_index"][tokens]
            got = batch["pixel_patches"].reshape(-1, batch["pixel_patches"].shape[-1])[vision_rows]
            np.testing.assert_array_equal(got.numpy(), reference_patches(img["pixels"], img["patch"]))
        offset += patches_of(img)


def batch_cu(batch):
    """Each image's [first, last) range within the visual tokens (both layouts list them in order)."""
    if "vision_cu_seqlens" in batch:
        return batch["vision_cu_seqlens"].numpy()
    lengths = batch["vision_mask"].sum(1).numpy()
    return np.concatenate([[0], np.cumsum(lengths)])


def test_image_sizes_parse_and_fail_with_the_sample_named():
    sample = {"input_ids": [1, 2], "images": [{"view": "a", "patches": 5},
                                              {"view": "b", "height": 32, "width": 48, "patch": 16},
                                              {"view": "c", "pixels": np.zeros((8, 4, 3)), "patch": 4}]}
    assert [s.patches for s in image_specs(sample, 0)] == [5, 6, 2]
    assert sample_tokens(sample, 0) == (13, 2)
    assert sample_tokens(sample, 0, ViewPruning(drop={"b"})) == (7, 2)
    with pytest.raises(ValueError, match=r"sample 3, image 0: a 30x32 image is not a whole number of 16x16"):
        image_specs({"input_ids": [1], "images": [{"view": "a", "height": 30, "width": 32, "patch": 16}]}, 3)
    with pytest.raises(ValueError, match=r"sample 2, image 1: the image has no \"view\""):
        image_specs({"input_ids": [1], "images": [{"view": "a", "patches": 1}, {"patches": 3}]}, 2)
    with pytest.raises(ValueError, match=r"sample 0, image 0: .* neither"):
        image_specs({"input_ids": [1], "images": [{"view": "a"}]}, 0)


def test_pruning_rules_drop_named_views_per_dataset_and_per_sample():
    samples = [{"dataset": "pick", "input_ids": [1], "images": [{"view": "wrist", "patches": 4},
                                                                {"view": "top", "patches": 9}]},
               {"dataset": "push", "input_ids": [1], "images": [{"view": "wrist", "patches": 4},
                                                                {"view": "top", "patches": 9}]},
               {"dataset": "push", "input_ids": [1], "drop_views": ["wrist"],
                "images": [{"view": "wrist", "patches": 4}, {"view": "top", "patches": 9}]}]
    pruning = ViewPruning(per_dataset={"pick": ["top"]})
    assert [sample_tokens(s, i, pruning)[0] for i, s in enumerate(samples)] == [4, 13, 9]
    everywhere = ViewPruning(drop={"wrist"})
    assert [sample_tokens(s, i, everywhere)[0] for i, s in enumerate(samples)] == [9, 9, 9]
    custom = ViewPruning(rule=lambda sample, index: {"top"} if index == 1 else set())
    assert [sample_tokens(s, i, custom)[0] for i, s in enumerate(samples)] == [13, 4, 13]


def test_plan_counts_image_tokens_and_keeps_samples_whole(rng):
    samples = random_samples(rng, 60, pixels=False)
    pruning = ViewPruning(drop={"base"})
    mplan = plan_multimodal(samples, capacity=64, pruning=pruning)
    expected = [sum(patches_of(img) for img in kept(s, i, pruning)) + len(s["input_ids"])
                for i, s in enumerate(samples)]
    assert mplan.lengths.tolist() == expected
    pieces = mplan.plan.pieces
    assert (pieces[:, 1] == 0).all() and (pieces[:, 2] == mplan.lengths[pieces[:, 0]]).all()  # never split
    assert sorted(pieces[:, 0].tolist()) == [i for i, n in enumerate(expected) if n > 0]
    for r in range(mplan.num_rows):
        assert mplan.plan.row(r)[:, 2].sum() <= 64


def test_overlong_sample_is_an_error_naming_it_or_dropped():
    samples = [{"input_ids": [1, 2], "images": [{"view": "a", "patches": 3}]},
               {"input_ids": [1] * 4, "images": [{"view": "a", "patches": 5}, {"view": "b", "patches": 2}]},
               {"input_ids": [1] * 10}]  # exactly the capacity: fits
    with pytest.raises(ValueError, match=r"sample 1 has 11 tokens \(7 image \+ 4 text\) .* capacity of 10"):
        plan_multimodal(samples, 10)
    mplan = plan_multimodal(samples, 10, overlong="drop")
    assert mplan.dropped == [1]
    assert sorted(mplan.plan.pieces[:, 0].tolist()) == [0, 2]
    assert plan_multimodal(samples, 10, pruning=ViewPruning(drop={"b"})).dropped == []
    with pytest.raises(ValueError, match="never split"):
        plan_multimodal(samples, 10, overlong="split")


@pytest.mark.parametrize("pruned", [False, True])
def test_varlen_batch_matches_each_sample(rng, pruned):
    samples = random_samples(rng, 30)
    samples.append({"input_ids": [11], "labels": [11], "images": []})              # length-1, no image
    samples.append({"input_ids": [12, 13], "labels": [12, 13],                          # an empty image
                    "images": [{"view": "wrist", "patches": 0}, {"view": "top", "patch": 2,
                                                                  "pixels": np.ones((2, 2, 3), np.float32)}]})
    pruning = ViewPruning(drop={"top"}) if pruned else None
    mplan = plan_multimodal(samples, capacity=48, pruning=pruning)
    batch = build_multimodal_batch(mplan, samples, rows=(1, mplan.num_rows), image_token_id=IMAGE, pad_to_multiple=4)
    cu = batch["cu_seqlens"].tolist()
    seen = []
    for segment, s in enumerate(batch["segment_sample"].tolist()):
        if s < 0:
            continue
        seen.append(s)
        where = slice(cu[segment], cu[segment + 1])
        assert batch["position_ids"][where].tolist() == list(range(where.stop - where.start))
        images_of = lambda index: [k for k, owner in enumerate(batch["image_sample"].tolist()) if owner == index]  # noqa: E731
        check_sample_tokens(batch, samples[s], s, pruning, where, batch["input_ids"], batch["labels"], images_of)
    planned = {int(p[0]) for r in range(1, mplan.num_rows) for p in mplan.plan.row(r)}
    assert sorted(seen) == sorted(planned)
    vision_cu = batch["vision_cu_seqlens"]
    assert vision_cu.dtype == torch.int32 and vision_cu[-1] == len(batch["image_token_index"])
    assert batch["vision_max_seqlen"] == int(vision_cu.diff().max())
    assert (batch["input_ids"][batch["image_token_index"]] == IMAGE).all()
    assert int((batch["input_ids"] == IMAGE).sum()) == len(batch["image_token_index"])  # text ids are >= 10


@pytest.mark.parametrize("fixed", [False, True])
def test_padded_batch_matches_each_sample(rng, fixed):
    samples = random_samples(rng, 12)
    pruning = ViewPruning(drop={"base"})
    indices = [5, 0, 7, 3, 11]
    kwargs = dict(width=40, image_width=16, image_slots=3 * len(indices)) if fixed else {}
    batch = build_padded_multimodal(samples, indices, pruning, image_token_id=IMAGE, pad_token_id=1, **kwargs)
    width = batch["input_ids"].shape[1]
    assert width == 40 if fixed else width % 8 == 0
    flat_ids, flat_labels = batch["input_ids"].view(-1), batch["labels"].view(-1)
    for row, index in enumerate(indices):
        n = sum(sample_tokens(samples[index], index, pruning))
        where = slice(row * width, row * width + n)
        images_of = lambda i: [k for k, owner in enumerate(batch["image_sample"].tolist()) if owner == i]  # noqa: E731
        check_sample_tokens(batch, samples[index], index, pruning, where, flat_ids, flat_labels, images_of)
        assert (batch["input_ids"][row, n:] == 1).all() and (batch["labels"][row, n:] == -100).all()
    mask = batch["vision_mask"]
    if fixed:
        assert mask.shape == (15, 16)
    assert (batch["pixel_patches"][~mask] == 0).all()
    assert mask.sum() == len(batch["image_token_index"]) == len(batch["vision_token_index"])


def test_batch_errors_name_the_sample():
    samples = [{"input_ids": [1, 2], "labels": [1], "images": []},
               {"input_ids": [1], "images": [{"view": "a", "patches": 2},
                                             {"view": "b", "patch": 1, "pixels": np.zeros((1, 1, 3))}]}]
    with pytest.raises(ValueError, match="sample 0: 1 labels for 2 input_ids"):
        build_multimodal_batch(plan_multimodal(samples[:1], 8), samples[:1])
    with pytest.raises(ValueError, match="sample 1, image 0: has no pixels while other images"):
        build_padded_multimodal(samples, [1])
    with pytest.raises(ValueError, match="sample 1 has 4 decoder tokens .* more than the padded width 3"):
        build_padded_multimodal(samples, [1], width=3)


def test_patchify_equals_the_loop(rng):
    for h, w, p in ((4, 6, 2), (3, 3, 1), (16, 8, 8), (5, 15, 5)):
        pixels = rng.standard_normal((h, w, 3))
        np.testing.assert_array_equal(patchify(pixels, p), reference_patches(pixels, p))


def test_collator_builds_varlen_or_padded_as_the_chooser_predicts(rng, caplog):
    import logging

    from varpack.auto import PADDED, VARLEN, CostModel, MultimodalPathChooser
    from varpack.multimodal_collator import MultimodalCollator

    samples = random_samples(rng, 9)
    samples.append({"input_ids": [10] * 40, "images": [{"view": "wrist", "patches": 30}]})  # over 64: dropped
    pruning = ViewPruning(drop={"top"})
    varlen = MultimodalCollator(64, pruning, image_token_id=IMAGE, overlong="drop")(samples)
    expected = build_multimodal_batch(plan_multimodal(samples, 64, pruning, overlong="drop"), samples,
                                      image_token_id=IMAGE)
    for key in ("input_ids", "labels", "cu_seqlens", "vision_cu_seqlens", "image_token_index", "pixel_patches"):
        assert torch.equal(varlen[key], expected[key]), key

    cheap, dear = CostModel(0.0, 0.0, 1e-6), CostModel(1.0, 1.0, 1.0)
    to_padded = MultimodalCollator(64, pruning, image_token_id=IMAGE, overlong="drop",
                                   chooser=MultimodalPathChooser(cheap, dear, cheap, dear))
    with caplog.at_level(logging.INFO, logger="varpack.auto"):
        padded = to_padded(samples)
    assert to_padded.last_decision.path == PADDED and "step 0: padded path" in caplog.text
    kept = [i for i in range(len(samples) - 1) if sum(sample_tokens(samples[i], i, pruning))]
    direct = build_padded_multimodal(samples, kept, pruning, image_token_id=IMAGE)
    for key in ("input_ids", "labels", "vision_mask", "image_token_index", "pixel_patches"):
        assert torch.equal(padded[key], direct[key]), key
    to_varlen = MultimodalCollator(64, pruning, image_token_id=IMAGE, overlong="drop",
                                   chooser=MultimodalPathChooser(dear, cheap, dear, cheap))
    assert "cu_seqlens" in to_varlen(samples) and to_varlen.last_decision.path == VARLEN
    with pytest.raises(ValueError, match="sample 9 has 70 tokens"):
        MultimodalCollator(64, pruning)(samples)
