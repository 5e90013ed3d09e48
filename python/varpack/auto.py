"""Automatic path choice: run a batch through the padded fixed-length kernel or the varlen kernel,
whichever a cost model fitted on the device predicts faster, and say which in the step's log.

The cost of one kernel path is modelled per computed sequence as overhead + alpha*n + beta*n^2:
alpha covers the per-token work (projections, MLP, memory traffic), beta the attention's quadratic
part. A padded kernel computes every row at its padded width, so its sequences are `rows` copies of
the width; a varlen kernel computes only the real lengths. The two paths get separate models
because their kernels differ in speed per FLOP (cuDNN's padded kernel is about twice as fast per
FLOP as FA2's varlen one on the H200, which is why padding can win at low padding rates).

Usage:
    padded = fit_cost_model([(lengths, seconds), ...])   # measured with the padded kernel
    varlen = fit_cost_model([(lengths, seconds), ...])   # measured with the varlen kernel
    chooser = PathChooser(padded, varlen)
    decision = chooser.choose(batch_lengths, step=step)  # logs "step 7: varlen path (...)"

In training, hand the chooser to the collator, PackingCollator(capacity, chooser=chooser): each
batch comes out packed or padded as predicted faster, and a model with attn_implementation=
"varpack" runs the one through the varlen kernel and the other through the fixed-length kernel.
The choice covers the whole step, not attention alone: padding also costs MLP and projections.

Pure Python + numpy: no extension needed.
"""
from __future__ import annotations

import itertools
import json
import logging
import os
import tempfile
from dataclasses import asdict, dataclass
from typing import Iterable, Sequence

import numpy as np

logger = logging.getLogger("varpack.auto")

PADDED = "padded"
VARLEN = "varlen"


def _length_array(lengths: Iterable[int], what: str) -> np.ndarray:
    array = np.asarray(list(lengths) if not isinstance(lengths, np.ndarray) else lengths,
                       dtype=np.float64).reshape(-1)
    if array.size and (array < 0).any():
        bad = int(np.argmax(array < 0))
        raise ValueError(f"{what}: length {int(array[bad])} at index {bad} is negative; "
                         "lengths count tokens and must be >= 0")
    return array


@dataclass(frozen=True)
class CostModel:
    """Predicted seconds for one call over sequences of lengths n_i:
    overhead + alpha * sum(n_i) + beta * sum(n_i^2)."""

    alpha: float
    beta: float
    overhead: float = 0.0

    def predict(self, lengths: Iterable[int]) -> float:
        n = _length_array(lengths, "CostModel.predict")
        return float(self.overhead + self.alpha * n.sum() + self.beta * np.square(n).sum())

    def predict_padded(self, rows: int, width: int) -> float:
        """A padded kernel computes `rows` sequences of `width` tokens whatever their content."""
        return float(self.overhead + rows * (self.alpha * width + self.beta * float(width) ** 2))

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "CostModel":
        return cls(alpha=float(values["alpha"]), beta=float(values["beta"]),
                   overhead=float(values.get("overhead", 0.0)))

    def save(self, path, **metadata) -> None:
        """Writes the model as JSON ({"alpha", "beta", "overhead"} in seconds, plus `metadata`,
        e.g. the device and the measured points), through a temporary file renamed into place, so
        a failed write leaves no partial file. `varpack stats --cost-model PATH` reads it."""
        path = os.fspath(path)
        clash = set(metadata) & {"alpha", "beta", "overhead"}
        if clash:
            raise ValueError(f"CostModel.save: metadata may not override {sorted(clash)}")
        text = json.dumps({**self.to_dict(), **metadata}, indent=2) + "\n"
        folder = os.path.dirname(os.path.abspath(path))
        handle, temporary = tempfile.mkstemp(prefix=".tmp-", dir=folder)
        try:
            with os.fdopen(handle, "w") as file:
                file.write(text)
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise

    @classmethod
    def load(cls, path) -> "CostModel":
        """Reads a model saved by save() (or by `python -m varpack calibrate`); errors name the
        file and the key at fault."""
        path = os.fspath(path)
        try:
            with open(path) as file:
                values = json.load(file)
        except (OSError, json.JSONDecodeError) as error:
            raise ValueError(f"{path}: cannot read the cost model: {error}") from error
        if not isinstance(values, dict):
            raise ValueError(f"{path}: the cost model must be a JSON object with alpha, beta and overhead")
        for key, required in (("alpha", True), ("beta", True), ("overhead", False)):
            if key not in values:
                if required:
                    raise ValueError(f"{path}: the cost model has no {key!r}; write it with "
                                     "`python -m varpack calibrate` or CostModel.save")
                continue
            value = values[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) or value < 0:
                raise ValueError(f"{path}: {key!r} is {value!r}; it must be a finite number >= 0 (seconds)")
        return cls.from_dict(values)


# The reference fit (bench/results/distributed.md) for a 542M-parameter Llama-style decoder on an H200, forward + backward of one
# row per call: 3.38 ms + 7.26 us/token + 351 ps/token^2. A stand-in until `python -m varpack
# calibrate` has measured the user's own model.
ANCHOR_COST_MODEL = CostModel(alpha=7.26e-6, beta=351e-12, overhead=3.38e-3)


def _features(measurements: Sequence[tuple[Iterable[int], float]]) -> tuple[np.ndarray, np.ndarray]:
    rows, times = [], []
    for index, (lengths, seconds) in enumerate(measurements):
        n = _length_array(lengths, f"fit_cost_model: measurement {index}")
        if not np.isfinite(seconds) or seconds < 0:
            raise ValueError(f"fit_cost_model: measurement {index} has time {seconds!r}; "
                             "give measured seconds, finite and >= 0")
        rows.append((n.sum(), np.square(n).sum(), 1.0))
        times.append(float(seconds))
    return np.asarray(rows, dtype=np.float64), np.asarray(times, dtype=np.float64)


def fit_cost_model(measurements: Sequence[tuple[Iterable[int], float]],
                   fit_overhead: bool = True) -> CostModel:
    """Least-squares fit of overhead, alpha and beta to (lengths, seconds) measurements.

    Coefficients are constrained to be >= 0 (a negative cost per token is noise, and would make the
    chooser extrapolate nonsense): the fit solves every subset of the free coefficients and keeps
    the feasible one with the smallest residual, which is exact non-negative least squares for
    three unknowns. Columns are scaled to unit norm first because sum(n^2) is ~1e4 times sum(n).
    """
    if len(measurements) == 0:
        raise ValueError("fit_cost_model: no measurements; time the kernel on a few batches of "
                         "different lengths first")
    features, times = _features(measurements)
    columns = [0, 1, 2] if fit_overhead else [0, 1]
    distinct = np.unique(features[:, :2], axis=0).shape[0]
    if distinct < 2:
        raise ValueError(f"fit_cost_model: the {len(measurements)} measurements cover "
                         f"{distinct} distinct (sum n, sum n^2) point(s); measure batches whose "
                         "lengths differ (short and long sequences) so alpha and beta can be "
                         "told apart")
    scale = np.linalg.norm(features, axis=0)
    scale[scale == 0] = 1.0
    scaled = features / scale

    best, best_residual = np.zeros(3), np.inf
    for size in range(len(columns), 0, -1):
        for subset in itertools.combinations(columns, size):
            coef, *_ = np.linalg.lstsq(scaled[:, subset], times, rcond=None)
            if (coef < 0).any():
                continue
            residual = float(np.square(scaled[:, subset] @ coef - times).sum())
            if residual < best_residual:
                best_residual = residual
                best = np.zeros(3)
                best[list(subset)] = coef
    best = best / scale
    return CostModel(alpha=float(best[0]), beta=float(best[1]), overhead=float(best[2]))


@dataclass(frozen=True)
class Decision:
    path: str                  # PADDED or VARLEN
    predicted_padded_s: float  # the padded kernel over rows x width
    predicted_varlen_s: float  # the varlen kernel over the real lengths
    padding_rate: float        # padded tokens / (rows x width)

    @property
    def predicted_saving(self) -> float:
        """Fraction of the padded time the chosen path saves (0 when padded is chosen)."""
        if self.path == PADDED or self.predicted_padded_s <= 0:
            return 0.0
        return 1.0 - self.predicted_varlen_s / self.predicted_padded_s


class PathChooser:
    """Chooses, per batch, the kernel path with the smaller predicted time and logs the choice."""

    def __init__(self, padded: CostModel, varlen: CostModel, log: logging.Logger | None = None,
                 level: int = logging.INFO):
        self.padded = padded
        self.varlen = varlen
        self.log = log or logger
        self.level = level

    def choose(self, lengths: Iterable[int], rows: int | None = None, width: int | None = None,
               step: int | None = None) -> Decision:
        """`lengths` are the batch's sample lengths. The padded alternative is `rows` rows of
        `width` tokens; by default one row per sample, padded to the longest (dynamic padding).
        Ties go to the padded path: it needs no cu_seqlens and no repacking."""
        n = _length_array(lengths, "PathChooser.choose")
        if n.size == 0:
            raise ValueError("PathChooser.choose: the batch has no samples")
        rows = int(n.size) if rows is None else int(rows)
        width = int(n.max()) if width is None else int(width)
        if rows * width < n.sum():
            raise ValueError(f"PathChooser.choose: {rows} rows of {width} tokens cannot hold the "
                             f"batch's {int(n.sum())} tokens; give the padded layout the batch "
                             "would really use")
        t_padded = self.padded.predict_padded(rows, width)
        t_varlen = self.varlen.predict(n)
        path = VARLEN if t_varlen < t_padded else PADDED
        area = rows * width
        decision = Decision(path, t_padded, t_varlen, (area - float(n.sum())) / area if area else 0.0)
        where = f"step {step}: " if step is not None else ""
        self.log.log(self.level, "%s%s path (predicted varlen %.3f ms, padded %.3f ms, padding %.1f%%)",
                     where, path, t_varlen * 1e3, t_padded * 1e3, 100 * decision.padding_rate)
        return decision


class MultimodalPathChooser:
    """The path choice for a vision-language model: one cost model per (tower, path). The padded
    step runs the vision tower over `image_slots` slots of `image_width` patches and the decoder
    over `rows` rows of `width` tokens; the varlen step runs each tower over its real lengths (one
    sequence per image, one per sample). The step's prediction is the two towers' sum."""

    def __init__(self, vision_padded: CostModel, vision_varlen: CostModel, decoder_padded: CostModel,
                 decoder_varlen: CostModel, log: logging.Logger | None = None, level: int = logging.INFO):
        self.vision = PathChooser(vision_padded, vision_varlen)
        self.decoder = PathChooser(decoder_padded, decoder_varlen)
        self.log = log or logger
        self.level = level

    def choose(self, image_lengths: Iterable[int], sample_lengths: Iterable[int],
               image_slots: int | None = None, image_width: int | None = None,
               rows: int | None = None, width: int | None = None, step: int | None = None) -> Decision:
        """image_lengths: patches of each kept image; sample_lengths: decoder tokens of each sample
        (image + text). The padded shapes default to dynamic padding (one slot per image padded to
        the longest image, one row per sample padded to the longest sample). A batch without
        images costs its decoder alone."""
        images = _length_array(image_lengths, "MultimodalPathChooser.choose: image_lengths")
        samples = _length_array(sample_lengths, "MultimodalPathChooser.choose: sample_lengths")
        if samples.size == 0:
            raise ValueError("MultimodalPathChooser.choose: the batch has no samples")
        decoder = self._quiet(self.decoder, samples, rows, width)
        padded, varlen = decoder.predicted_padded_s, decoder.predicted_varlen_s
        area = float((rows or samples.size) * (width or samples.max()))
        real = float(samples.sum())
        if images.size:
            vision = self._quiet(self.vision, images, image_slots, image_width)
            padded += vision.predicted_padded_s
            varlen += vision.predicted_varlen_s
            area += (image_slots or images.size) * (image_width or images.max())
            real += images.sum()
        path = VARLEN if varlen < padded else PADDED
        decision = Decision(path, padded, varlen, (area - real) / area if area else 0.0)
        where = f"step {step}: " if step is not None else ""
        self.log.log(self.level, "%s%s path for both towers (predicted varlen %.3f ms, padded %.3f ms, "
                     "padding %.1f%%)", where, path, varlen * 1e3, padded * 1e3, 100 * decision.padding_rate)
        return decision

    @staticmethod
    def _quiet(chooser: PathChooser, lengths: np.ndarray, rows, width) -> Decision:
        level, chooser.level = chooser.level, logging.DEBUG  # one log line per step, from choose()
        try:
            return chooser.choose(lengths, rows=rows, width=width)
        finally:
            chooser.level = level
