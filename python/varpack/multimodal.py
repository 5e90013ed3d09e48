"""Multimodal samples for packing: images (camera views) with text/action tokens, view pruning, and
the plan of rows that counts image tokens toward a row's capacity.

A multimodal sample is a mapping:

    {"images": [{"view": "wrist", "patches": 64},                       # a patch count, or
                {"view": "base", "height": 96, "width": 128, "patch": 16},  # pixel sizes, or
                {"view": "top", "pixels": array[H, W, C], "patch": 16}],    # the pixels themselves
     "input_ids": [...],          # instruction + action tokens
     "labels": [...]}             # optional, one per input id; -100 ignores a token

In the decoder's sequence a sample is its kept images' tokens (one placeholder per patch, in the
listed order), then its input_ids: the prefix layout of pi0-style models (views, instruction,
actions). A sample is never split: its images and text stay in one row.

View pruning drops named camera views before packing (ViewPruning: for every sample, per dataset,
or per sample through a sample's "drop_views"); a sample's length is its text tokens plus the image
tokens it keeps, so the planner stays a pure function of lengths:

    pruning = ViewPruning(drop={"overhead"})
    mplan = plan_multimodal(samples, capacity=4096, pruning=pruning)
    batch = varpack.multimodal_batch.build_multimodal_batch(mplan, samples, rows=(0, 8))
"""
from __future__ import annotations

import logging
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np

from .packing import Plan, plan

__all__ = ["ImageSpec", "MultimodalPlan", "ViewPruning", "image_specs", "kept_images", "plan_multimodal",
           "sample_tokens"]

log = logging.getLogger("varpack.multimodal")


@dataclass(frozen=True)
class ImageSpec:
    """One image of a sample: its camera view, its patch grid (rows x cols = its tokens), and its
    pixels if the sample carries them ([H, W, C], H = rows * patch, W = cols * patch)."""
    view: str
    rows: int
    cols: int
    patch: int | None = None
    pixels: np.ndarray | None = field(default=None, compare=False, repr=False)

    @property
    def patches(self) -> int:
        return self.rows * self.cols


def _patch_grid(height: int, width: int, patch: int, where: str) -> tuple[int, int]:
    if patch <= 0:
        raise ValueError(f"{where}: patch={patch}; give the patch size in pixels (> 0)")
    if height <= 0 or width <= 0 or height % patch or width % patch:
        raise ValueError(f"{where}: a {height}x{width} image is not a whole number of {patch}x{patch} "
                         f"patches; resize it to multiples of {patch} pixels before packing")
    return height // patch, width // patch


def _image_spec(image: Any, where: str) -> ImageSpec:
    if not isinstance(image, Mapping):
        raise ValueError(f"{where}: an image must be a mapping with \"view\" and \"patches\", "
                         f"\"height\"/\"width\"/\"patch\" or \"pixels\"/\"patch\"; got {type(image).__name__}")
    view = str(image.get("view", ""))
    if not view:
        raise ValueError(f"{where}: the image has no \"view\" (the camera's name, e.g. \"wrist\")")
    if image.get("pixels") is not None:
        pixels = np.asarray(image["pixels"])
        if pixels.ndim != 3:
            raise ValueError(f"{where}: pixels must be [height, width, channels], got shape {pixels.shape}")
        patch = operator.index(image.get("patch", 0))
        rows, cols = _patch_grid(pixels.shape[0], pixels.shape[1], patch, where)
        return ImageSpec(view, rows, cols, patch, pixels)
    if "height" in image or "width" in image:
        patch = operator.index(image.get("patch", 0))
        rows, cols = _patch_grid(operator.index(image.get("height", 0)), operator.index(image.get("width", 0)),
                                 patch, where)
        return ImageSpec(view, rows, cols, patch)
    if "patches" in image:
        patches = operator.index(image["patches"])
        if patches < 0:
            raise ValueError(f"{where}: patches={patches}; an image has >= 0 patches")
        return ImageSpec(view, 1, patches)  # a 1 x n grid: the count alone says nothing of the shape
    raise ValueError(f"{where}: the image (view {view!r}) gives neither \"patches\" nor \"height\"/\"width\"/"
                     "\"patch\" nor \"pixels\"/\"patch\"")


def image_specs(sample: Any, index: int) -> list[ImageSpec]:
    """The images of sample `index`, parsed and checked (errors name the sample and the image)."""
    images = sample.get("images", ()) if isinstance(sample, Mapping) else ()
    if images is None:
        return []
    return [_image_spec(image, f"sample {index}, image {i}") for i, image in enumerate(images)]


def _text_length(sample: Any, index: int) -> int:
    ids = sample["input_ids"] if isinstance(sample, Mapping) else sample
    try:
        return len(ids)
    except TypeError:
        raise ValueError(f"sample {index}: expected a mapping with \"input_ids\" (and optionally "
                         f"\"images\"), got {type(sample).__name__}") from None


class ViewPruning:
    """Which camera views to drop before packing.

    drop:        views dropped from every sample.
    per_dataset: {dataset name: views} dropped from the samples whose `dataset_key` names that
                 dataset (e.g. a task family that never needs the overhead camera).
    A sample's own "drop_views" list adds to both. A callable `rule(sample, index) -> views` may
    replace all of this for anything else.
    """

    def __init__(self, drop: Iterable[str] = (), per_dataset: Mapping[str, Iterable[str]] | None = None,
                 dataset_key: str = "dataset", rule: Callable[[Any, int], Iterable[str]] | None = None):
        self.drop = frozenset(drop)
        self.per_dataset = {name: frozenset(views) for name, views in (per_dataset or {}).items()}
        self.dataset_key = dataset_key
        self.rule = rule

    def dropped_views(self, sample: Any, index: int) -> frozenset:
        if self.rule is not None:
            return frozenset(self.rule(sample, index))
        views = set(self.drop)
        if isinstance(sample, Mapping):
            views |= self.per_dataset.get(sample.get(self.dataset_key), frozenset())
            views |= set(sample.get("drop_views", ()) or ())
        return frozenset(views)

    def __repr__(self) -> str:
        return f"ViewPruning(drop={sorted(self.drop)}, per_dataset={self.per_dataset})"


def kept_images(sample: Any, index: int, pruning: ViewPruning | None) -> list[tuple[int, ImageSpec]]:
    """(position in the sample's image list, image) for every image the pruning keeps."""
    specs = image_specs(sample, index)
    dropped = pruning.dropped_views(sample, index) if pruning is not None else frozenset()
    return [(i, spec) for i, spec in enumerate(specs) if spec.view not in dropped]


def sample_tokens(sample: Any, index: int, pruning: ViewPruning | None = None) -> tuple[int, int]:
    """(image tokens kept, text tokens) of one sample: its decoder length is their sum."""
    images = sum(spec.patches for _, spec in kept_images(sample, index, pruning))
    return images, _text_length(sample, index)


@dataclass
class MultimodalPlan:
    """A plan of rows (varpack.Plan over the decoder lengths) with the per-sample token counts it
    was made from. dropped: the samples left out because they do not fit a row (overlong="drop")."""
    plan: Plan
    image_tokens: np.ndarray   # int64 [samples], kept image tokens
    text_tokens: np.ndarray    # int64 [samples]
    pruning: ViewPruning | None
    dropped: list

    @property
    def lengths(self) -> np.ndarray:
        return self.image_tokens + self.text_tokens

    @property
    def num_rows(self) -> int:
        return self.plan.num_rows


def plan_multimodal(samples: Sequence, capacity: int, pruning: ViewPruning | None = None,
                    algorithm: str = "bfd", overlong: str = "error", seed: int = 0,
                    shuffle: bool = False, batch_size: int = 8) -> MultimodalPlan:
    """Plans rows of `capacity` decoder tokens; a sample's length is its kept image tokens plus its
    text tokens, and it is never split. overlong: "error" (default) or "drop" (the sample gets
    no row, is listed in `dropped` and logged)."""
    if overlong not in ("error", "drop"):
        raise ValueError(f"overlong={overlong!r}: a multimodal sample is never split or truncated "
                         "(its images and text stay together); choose \"error\" or \"drop\"")
    counts = np.array([sample_tokens(s, i, pruning) for i, s in enumerate(samples)],
                      dtype=np.int64).reshape(-1, 2)
    image_tokens, text_tokens = counts[:, 0].copy(), counts[:, 1].copy()
    lengths = image_tokens + text_tokens
    dropped = [int(i) for i in np.flatnonzero(lengths > capacity)]
    for i in dropped:
        message = (f"sample {i} has {lengths[i]} tokens ({image_tokens[i]} image + {text_tokens[i]} "
                   f"text) after view pruning, more than a row's capacity of {capacity}")
        if overlong == "error":
            raise ValueError(message + "; raise the capacity, prune more views, use smaller images, "
                             "or pass overlong=\"drop\" to leave it out")
        log.warning("%s: dropped", message)
    planned = lengths.copy()
    planned[dropped] = 0  # a zero-length sample gets no piece
    image_tokens[dropped] = 0
    text_tokens[dropped] = 0
    return MultimodalPlan(plan(planned, capacity, algorithm=algorithm, overlong="error", seed=seed,
                               shuffle=shuffle, batch_size=batch_size),
                          image_tokens, text_tokens, pruning, dropped)
