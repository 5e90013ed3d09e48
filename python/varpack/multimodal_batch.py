"""Batches for a vision-language(-action) model from multimodal samples (varpack.multimodal): the
vision encoder's batch, the decoder's batch, and the index that scatters each visual token into
the decoder's sequence at its placeholder.

Two layouts, the same tokens:

  build_multimodal_batch   varlen on both towers: every kept image is its own sequence of patches
                           (vision_cu_seqlens: an image attends only to itself) and the decoder
                           rows are packed (cu_seqlens, position_ids restarting per sample).
  build_padded_multimodal  one decoder row per sample and one image per slot, padded to the
                           batch's own longest (dynamic padding) or to given fixed widths; the
                           vision tower needs vision_mask (patch padding), the causal decoder none.

Both emit image_token_index (where, in the decoder's flattened tokens, each visual token goes) and
vision_token_index (where, in the vision tower's flattened output, that token comes from):

    decoder_in.view(-1, d)[batch["image_token_index"]] = vision_out.view(-1, d)[batch["vision_token_index"]]

Image placeholders carry `image_token_id` and label -100. Decoder tokens are laid out and labelled
by the C++ batch builder (varpack.build_batch): labels aligned with input_ids, -100 at each
sample's first token, so a shifted next-token loss never crosses samples.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .collator import pad_rows
from .multimodal import ImageSpec, MultimodalPlan, ViewPruning, kept_images
from .packing import build_batch, plan

__all__ = ["build_multimodal_batch", "build_padded_multimodal", "patchify"]

IGNORE = -100


def patchify(pixels: np.ndarray, patch: int) -> np.ndarray:
    """[H, W, C] pixels -> [(H/p) * (W/p), p * p * C] patches in row-major grid order."""
    h, w, c = pixels.shape
    grid = pixels.reshape(h // patch, patch, w // patch, patch, c).transpose(0, 2, 1, 3, 4)
    return grid.reshape((h // patch) * (w // patch), patch * patch * c)


class _DecoderSamples:
    """The samples as the decoder sees them, built lazily for the C++ batch builder: image
    placeholders (label -100) followed by the sample's input_ids and labels."""

    def __init__(self, samples: Sequence, image_tokens: Sequence[int], image_token_id: int,
                 names: Sequence[int] | None = None):
        self.samples = samples
        self.image_tokens = image_tokens
        self.image_token_id = image_token_id
        self.names = names  # the sample numbers errors give, if not the positions here

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> dict:
        sample = self.samples[index]
        ids = np.asarray(sample["input_ids"], dtype=np.int64)
        labels = sample.get("labels")
        labels = ids if labels is None else np.asarray(labels, dtype=np.int64)
        if len(labels) != len(ids):
            name = index if self.names is None else self.names[index]
            raise ValueError(f"sample {name}: {len(labels)} labels for {len(ids)} input_ids")
        n = int(self.image_tokens[index])
        return {"input_ids": np.concatenate([np.full(n, self.image_token_id, np.int64), ids]),
                "labels": np.concatenate([np.full(n, IGNORE, np.int64), labels])}


class _VisionBatch:
    """Accumulates kept images in order: their patch grids, pixels and placeholder positions."""

    def __init__(self):
        self.images: list[ImageSpec] = []
        self.image_sample: list[int] = []
        self.image_index: list[int] = []
        self.placeholder_start: list[int] = []  # decoder flat index of each image's first token

    def add_sample(self, sample: dict, index: int, pruning, decoder_start: int) -> None:
        offset = decoder_start
        for position, spec in kept_images(sample, index, pruning):
            if spec.patches:
                self.images.append(spec)
                self.image_sample.append(index)
                self.image_index.append(position)
                self.placeholder_start.append(offset)
            offset += spec.patches

    def lengths(self) -> np.ndarray:
        return np.array([spec.patches for spec in self.images], dtype=np.int64)

    def image_token_index(self) -> torch.Tensor:
        lengths = self.lengths()
        starts = np.repeat(np.asarray(self.placeholder_start, dtype=np.int64), lengths)
        within = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        return torch.from_numpy(starts + within)

    def grid_positions(self) -> tuple[np.ndarray, np.ndarray]:
        """(row, col) of every patch in the patch grid of its image, in token order."""
        rows = [np.repeat(np.arange(s.rows), s.cols) for s in self.images]
        cols = [np.tile(np.arange(s.cols), s.rows) for s in self.images]
        empty = np.zeros(0, np.int64)
        return (np.concatenate(rows).astype(np.int64) if rows else empty,
                np.concatenate(cols).astype(np.int64) if cols else empty)

    def pixel_patches(self) -> np.ndarray | None:
        """[tokens, p * p * C] float32 if every image carries pixels, None if none does."""
        with_pixels = [spec.pixels is not None for spec in self.images]
        if not any(with_pixels):
            return None
        if not all(with_pixels):
            missing = with_pixels.index(False)
            raise ValueError(f"sample {self.image_sample[missing]}, image {self.image_index[missing]}: "
                             "has no pixels while other images of the batch do; give pixels for all "
                             "images or for none")
        dims = {spec.pixels.shape[2] * spec.patch ** 2 for spec in self.images}
        if len(dims) > 1:
            raise ValueError(f"the batch's images give patches of {sorted(dims)} values each; the vision "
                             "encoder needs one patch size and channel count")
        return np.concatenate([patchify(np.asarray(s.pixels, np.float32), s.patch) for s in self.images])

    def common(self) -> dict:
        out = {"image_sample": torch.tensor(self.image_sample, dtype=torch.int64),
               "image_index": torch.tensor(self.image_index, dtype=torch.int64),
               "image_view": [spec.view for spec in self.images],
               "image_token_index": self.image_token_index()}
        return out


def build_multimodal_batch(mplan: MultimodalPlan, samples: Sequence, rows=None, image_token_id: int = 0,
                           pad_to_multiple: int = 1, pad_token_id: int = 0) -> dict:
    """The varlen batch of `rows` of `mplan` (None: all; a slice or (first, last)).

    Decoder (T tokens, S segments): input_ids, labels, position_ids int64 [T]; cu_seqlens int32
    [S + 1]; max_seqlen int; segment_sample, row_offsets and the loss weights as build_batch
    gives them.
    Vision (N visual tokens, I images): vision_cu_seqlens int32 [I + 1]; vision_max_seqlen int;
    patch_rows, patch_cols int64 [N] (each patch's place in its image's grid); pixel_patches float32
    [N, p * p * C] when the samples carry pixels; image_sample, image_index int64 [I] (which sample,
    which of its images), image_view [I] names; image_token_index int64 [N] (decoder position of
    each visual token), vision_token_index = arange(N).
    """
    if not isinstance(mplan, MultimodalPlan):
        raise TypeError(f"mplan must be a varpack.multimodal.MultimodalPlan (from plan_multimodal), "
                        f"got {type(mplan).__name__}")
    decoder = _DecoderSamples(samples, mplan.image_tokens, image_token_id)
    out = build_batch(mplan.plan, decoder, rows=rows, pad_to_multiple=pad_to_multiple,
                      pad_token_id=pad_token_id)
    vision = _VisionBatch()
    starts = out["cu_seqlens"][:-1].tolist()
    for segment, sample in enumerate(out["segment_sample"].tolist()):
        if sample >= 0:  # -1: a padding segment
            vision.add_sample(samples[sample], sample, mplan.pruning, starts[segment])
    lengths = vision.lengths()
    cu = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=cu[1:])
    out["vision_cu_seqlens"] = torch.from_numpy(cu)
    out["vision_max_seqlen"] = int(lengths.max()) if len(lengths) else 0
    patch_rows, patch_cols = vision.grid_positions()
    out["patch_rows"], out["patch_cols"] = torch.from_numpy(patch_rows), torch.from_numpy(patch_cols)
    pixels = vision.pixel_patches()
    if pixels is not None:
        out["pixel_patches"] = torch.from_numpy(pixels)
    out.update(vision.common())
    out["vision_token_index"] = torch.arange(int(lengths.sum()), dtype=torch.int64)
    return out


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def build_padded_multimodal(samples: Sequence, indices: Sequence[int], pruning: ViewPruning | None = None,
                            image_token_id: int = 0, pad_token_id: int = 0, width: int | None = None,
                            image_width: int | None = None, image_slots: int | None = None,
                            multiple: int = 8) -> dict:
    """One decoder row per sample of `indices`, one vision slot per kept image, right-padded.

    width / image_width: the decoder row and image slot widths; None pads to the batch's own longest
    rounded up to `multiple` (dynamic padding), a number is a fixed shape (e.g. the dataset's
    longest, for fixed-shape padding). image_slots: None gives one slot per image of the batch,
    a number pads the slot count up to it (e.g. batch size x the dataset's most images per sample).

    Decoder: input_ids, labels (-100 on padding and images), position_ids int64 [B, width].
    Vision: vision_mask bool [slots, image_width] (True on real patches), patch_rows, patch_cols
    int64 [slots, image_width], pixel_patches float32 [slots, image_width, p * p * C] if the samples
    carry pixels. image_token_index / vision_token_index index the flattened decoder / vision
    tokens (see the module notes).
    """
    indices = [int(i) for i in indices]
    if not indices:
        raise ValueError("build_padded_multimodal: no samples; give at least one sample index")
    chosen = [samples[i] for i in indices]
    image_tokens = [sum(spec.patches for _, spec in kept_images(s, i, pruning)) for s, i in zip(chosen, indices)]
    decoder = _DecoderSamples(chosen, image_tokens, image_token_id, names=indices)
    lengths = [image_tokens[j] + len(s["input_ids"]) for j, s in enumerate(chosen)]
    if 0 in lengths:  # the "none" plan gives an empty sample no row, which would shift the rest
        raise ValueError(f"sample {indices[lengths.index(0)]} has no tokens; leave it out of the batch")
    longest = max(lengths)
    width = _round_up(longest, multiple) if width is None else int(width)
    if longest > width:
        worst = indices[int(np.argmax(lengths))]
        raise ValueError(f"sample {worst} has {longest} decoder tokens after view pruning, more than the "
                         f"padded width {width}")
    built = build_batch(plan(lengths, width, algorithm="none"), decoder, pad_token_id=pad_token_id)
    offsets = built["row_offsets"]
    out = {"input_ids": pad_rows(built["input_ids"], offsets, width, pad_token_id),
           "labels": pad_rows(built["labels"], offsets, width, IGNORE),
           "position_ids": torch.arange(width, dtype=torch.int64).expand(len(indices), width).clone()}

    vision = _VisionBatch()
    for row, (sample, index) in enumerate(zip(chosen, indices)):
        vision.add_sample(sample, index, pruning, row * width)
    patch_lengths = vision.lengths()
    most = int(patch_lengths.max()) if len(patch_lengths) else 1
    image_width = _round_up(most, multiple) if image_width is None else int(image_width)
    slots = len(patch_lengths) if image_slots is None else int(image_slots)
    if most > image_width or len(patch_lengths) > slots:
        raise ValueError(f"the batch has {len(patch_lengths)} images of up to {most} patches; they do not "
                         f"fit {slots} slots of {image_width} patches")
    slot_offsets = torch.zeros(slots + 1, dtype=torch.int64)
    slot_offsets[1:len(patch_lengths) + 1] = torch.from_numpy(np.cumsum(patch_lengths))
    slot_offsets[len(patch_lengths) + 1:] = int(patch_lengths.sum())
    patch_rows, patch_cols = vision.grid_positions()
    out["patch_rows"] = pad_rows(torch.from_numpy(patch_rows), slot_offsets, image_width, 0)
    out["patch_cols"] = pad_rows(torch.from_numpy(patch_cols), slot_offsets, image_width, 0)
    out["vision_mask"] = pad_rows(torch.ones(len(patch_rows), dtype=torch.bool), slot_offsets, image_width, False)
    pixels = vision.pixel_patches()
    if pixels is not None:
        flat = torch.from_numpy(pixels)
        padded = torch.zeros(slots * image_width, flat.shape[1], dtype=flat.dtype)
        padded[out["vision_mask"].view(-1)] = flat
        out["pixel_patches"] = padded.view(slots, image_width, flat.shape[1])
    out.update(vision.common())
    out["vision_token_index"] = torch.nonzero(out["vision_mask"].view(-1)).view(-1)
    return out
