"""Calibration: the cost of a packed row on the user's model and device, measured and fitted.

A row's forward + backward time is modelled as c + alpha * tokens + beta * sum(len^2) over its
samples (varpack.CostModel: overhead = c). Rows of equal token count but different composition
(one long sample, or many short ones) separate alpha from beta; two row sizes separate c from
alpha. The fit is varpack.auto.fit_cost_model (non-negative least squares), and the result is the
cost model the planner's statistics, balance_rows and BalancedPackedDataset take:

    model = ...                                   # any causal LM taking varpack's packed batch
    result = varpack.calibrate.calibrate(model, capacity=16384)
    result.save("calibration.json")               # varpack stats --cost-model calibration.json
    varpack.balance_rows(plan, ranks, k, cost_model=result.cost_model)

or from the shell, with a factory that builds the model:

    python -m varpack calibrate --model my_pkg.models:build --capacity 16384 --out calibration.json

The model is called as model(input_ids, labels, position_ids, cu_seq_lens_q/k, max_length_q/k)
(the keys of varpack.PackingCollator, what a Hugging Face model with attn_implementation="varpack"
takes) and its .loss is backpropagated; pass a function instead of a model to run any other step.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from .auto import CostModel, fit_cost_model
from .packing import build_batch, plan

__all__ = ["Calibration", "calibrate", "row_compositions"]

log = logging.getLogger("varpack.calibrate")


def row_compositions(capacity: int, min_length: int = 16) -> list[list[int]]:
    """Rows to time: half and full capacity, each as 1, 2, 4, 16 and 64 equal samples (those whose
    samples are at least min_length tokens). Equal token counts with different sum(len^2)
    separate alpha from beta; the two sizes separate the per-row constant."""
    rows = []
    for total in (capacity // 2, capacity):
        for count in (1, 2, 4, 16, 64):
            length = total // count
            if length >= min_length:
                rows.append([length] * count)
    if len({sum(r) for r in rows}) < 2 or len(rows) < 3:
        raise ValueError(f"calibrate: capacity={capacity} is too small to time rows of different "
                         f"composition (need samples of at least {min_length} tokens); use a larger one")
    return rows


@dataclass
class Calibration:
    """The fitted cost model and the measurements it was fitted to: points[i] = (sample lengths of
    the row, median seconds of its forward + backward)."""
    cost_model: CostModel
    points: list = field(default_factory=list)
    device: str = ""

    def save(self, path) -> None:
        """JSON (CostModel.save): alpha, beta, overhead, plus the device and the points."""
        self.cost_model.save(path, device=self.device,
                             points=[{"lengths": list(map(int, lengths)), "seconds": seconds}
                                     for lengths, seconds in self.points])

    def residuals(self) -> list[float]:
        """Relative error of the fit at each point."""
        return [self.cost_model.predict(lengths) / seconds - 1.0 for lengths, seconds in self.points]


def _packed_row(lengths: list[int], capacity: int, vocab_size: int, device: torch.device,
                rng: np.random.Generator) -> dict:
    samples = [rng.integers(0, vocab_size, size=n).astype(np.int32) for n in lengths]
    built = build_batch(plan(lengths, capacity, algorithm="bfd"), samples)
    batch = {"input_ids": built["input_ids"][None], "labels": built["labels"][None],
             "position_ids": built["position_ids"][None], "cu_seq_lens_q": built["cu_seqlens"],
             "cu_seq_lens_k": built["cu_seqlens"]}
    batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
    batch["max_length_q"] = batch["max_length_k"] = int(built["max_seqlen"])
    return batch


def _model_step(model: torch.nn.Module, autocast: torch.dtype | None) -> Callable[[dict], None]:
    device_type = next(model.parameters()).device.type

    def step(batch: dict) -> None:
        with torch.autocast(device_type, dtype=autocast or torch.float32, enabled=autocast is not None):
            loss = model(**batch).loss
        loss.backward()

    return step


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def calibrate(model_or_step, capacity: int, *, vocab_size: int | None = None, device=None,
              autocast: torch.dtype | None = None, repeats: int = 3, warmup: int = 1,
              compositions: list[list[int]] | None = None, seed: int = 0) -> Calibration:
    """Times forward + backward of packed rows of different composition (row_compositions, or
    `compositions`) and fits c + alpha * tokens + beta * sum(len^2) to the medians.

    model_or_step: a torch module (called on the packed batch; its .loss is backpropagated), or a
                   function taking the batch dict and running one step.
    vocab_size:    token ids are drawn in [0, vocab_size); default: model.config.vocab_size.
    device:        where the batch goes; default: the model's device (CPU for a function).
    autocast:      e.g. torch.bfloat16 to run under autocast (as training would).
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"calibrate: repeats={repeats} must be >= 1 and warmup={warmup} >= 0")
    rows = compositions or row_compositions(capacity)
    for lengths in rows:
        if sum(lengths) > capacity:
            raise ValueError(f"calibrate: a row of {len(lengths)} samples holds {sum(lengths)} tokens, "
                             f"more than capacity={capacity}")
    if isinstance(model_or_step, torch.nn.Module):
        module = model_or_step
        device = torch.device(device) if device is not None else next(module.parameters()).device
        if vocab_size is None:
            vocab_size = getattr(getattr(module, "config", None), "vocab_size", None)
            if vocab_size is None:
                raise ValueError("calibrate: the model has no config.vocab_size; pass vocab_size")
        step = _model_step(module, autocast)
    else:
        module, step = None, model_or_step
        device = torch.device(device or "cpu")
        vocab_size = vocab_size or 256
    rng = np.random.default_rng(seed)
    points = []
    for index, lengths in enumerate(rows):
        batch = _packed_row(lengths, capacity, vocab_size, device, rng)
        for _ in range(warmup):
            step(batch)
        times = []
        for _ in range(repeats):
            _sync(device)
            start = time.perf_counter()
            step(batch)
            _sync(device)
            times.append(time.perf_counter() - start)
        seconds = float(np.median(times))
        points.append((lengths, seconds))
        log.info("calibration row %d/%d: %d x %d tokens: %.2f ms", index + 1, len(rows), len(lengths),
                 lengths[0], seconds * 1e3)
        if module is not None:
            module.zero_grad(set_to_none=True)
    cost_model = fit_cost_model(points)
    if cost_model.alpha == 0 and cost_model.beta == 0:
        log.warning("calibration: the row times do not grow with the tokens (fit: a constant %.3f ms per "
                    "row); noise or a fixed cost dominates: time larger rows (--capacity) or more "
                    "repeats", cost_model.overhead * 1e3)
    log.info("cost per row: %.3f ms + %.4g us/token + %.4g ps/token^2", cost_model.overhead * 1e3,
             cost_model.alpha * 1e6, cost_model.beta * 1e12)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    return Calibration(cost_model, points, name)
