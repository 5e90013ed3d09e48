"""DataLoader collation for multimodal samples (varpack.multimodal): the DataLoader's list of
samples becomes one two-tower batch, varlen (varpack.multimodal_batch.build_multimodal_batch) or,
with a varpack.auto.MultimodalPathChooser, whichever of that and dynamic padding
(build_padded_multimodal, padded to the batch's own longest) the fitted cost models predict
faster; the choice is logged and kept in last_decision. A model tells the layouts apart by their
keys: "cu_seqlens" / "vision_cu_seqlens" (varlen) or "vision_mask" (padded).

    collate = MultimodalCollator(capacity=8192, pruning=ViewPruning(drop={"overhead"}), image_token_id=IMAGE)
    loader = DataLoader(dataset, batch_size=64, collate_fn=collate)
"""
from __future__ import annotations

from typing import Sequence

from .multimodal import ViewPruning, kept_images, plan_multimodal
from .multimodal_batch import build_multimodal_batch, build_padded_multimodal

__all__ = ["MultimodalCollator"]


class MultimodalCollator:
    """collate_fn: plans the batch's samples into rows of `capacity` decoder tokens (image tokens
    counted, views pruned by `pruning`, over-length samples an error or dropped by `overlong`) and
    builds the varlen batch, or the padded one where `chooser` predicts it faster (both towers'
    widths rounded up to `padded_multiple`)."""

    def __init__(self, capacity: int, pruning: ViewPruning | None = None, image_token_id: int = 0,
                 pad_token_id: int = 0, algorithm: str = "bfd", overlong: str = "error", chooser=None,
                 padded_multiple: int = 8):
        if capacity <= 0:
            raise ValueError(f"MultimodalCollator: capacity={capacity}; give a positive number of decoder "
                             "tokens per row")
        if padded_multiple <= 0:
            raise ValueError(f"MultimodalCollator: padded_multiple={padded_multiple}; it must be positive")
        self.capacity = capacity
        self.pruning = pruning
        self.image_token_id = image_token_id
        self.pad_token_id = pad_token_id
        self.algorithm = algorithm
        self.overlong = overlong
        self.chooser = chooser
        self.padded_multiple = padded_multiple
        self.last_decision = None
        self.batches = 0

    def __call__(self, features: Sequence) -> dict:
        if len(features) == 0:
            raise ValueError("MultimodalCollator: got an empty batch")
        mplan = plan_multimodal(features, self.capacity, pruning=self.pruning, algorithm=self.algorithm,
                                overlong=self.overlong)
        kept = [i for i in range(len(features)) if mplan.lengths[i] > 0]  # dropped ones have length 0
        if self.chooser is not None and kept:
            from .auto import PADDED

            images = [spec.patches for i in kept for _, spec in kept_images(features[i], i, self.pruning)
                      if spec.patches]
            lengths = [int(mplan.lengths[i]) for i in kept]
            round_up = lambda n: -(-n // self.padded_multiple) * self.padded_multiple  # noqa: E731
            self.last_decision = self.chooser.choose(
                images, lengths, image_width=round_up(max(images)) if images else None,
                width=round_up(max(lengths)), step=self.batches)
            self.batches += 1
            if self.last_decision.path == PADDED:
                return build_padded_multimodal(features, kept, self.pruning, image_token_id=self.image_token_id,
                                               pad_token_id=self.pad_token_id, multiple=self.padded_multiple)
        return build_multimodal_batch(mplan, features, image_token_id=self.image_token_id,
                                      pad_token_id=self.pad_token_id)
