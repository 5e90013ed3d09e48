"""A real variable-length corpus that needs no download: the source files of the running Python's
standard library, as byte-level tokens (0..255 plus a few specials), cut into samples of the lengths
a benchmark profile asks for. Every 20th file is held out for evaluation.

Used by train_packed.py and saving_curve.py; deterministic for a given Python installation.
"""
from __future__ import annotations

import pathlib
import sysconfig
from dataclasses import dataclass

import numpy as np

BOS, EOS, PAD = 256, 257, 258
VOCAB_SIZE = 320  # 256 bytes + specials, rounded up to a multiple of 64 for the output projection


def stdlib_files() -> list[pathlib.Path]:
    root = pathlib.Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py")
                   if "site-packages" not in p.parts and "dist-packages" not in p.parts)
    if not files:
        raise RuntimeError(f"no .py files under {root}: this Python has no standard library "
                           "sources to train on")
    return files


@dataclass(frozen=True)
class Profile:
    """Sample lengths drawn uniformly from [min_length, max_length], packed into rows of capacity."""
    name: str
    min_length: int
    max_length: int
    capacity: int


class Corpus:
    """Token streams (train and held-out) of the standard library's files, each file framed by
    EOS, read once. Samples are consecutive cuts of a stream, starting with BOS."""

    def __init__(self, heldout_every: int = 20, max_files: int | None = None):
        train, heldout = [], []
        files = stdlib_files()[:max_files]
        for index, path in enumerate(files):
            data = np.frombuffer(path.read_bytes(), dtype=np.uint8).astype(np.int32)
            framed = np.concatenate([data, np.array([EOS], dtype=np.int32)])
            (heldout if index % heldout_every == heldout_every - 1 else train).append(framed)
        self.train = np.concatenate(train)
        self.heldout = np.concatenate(heldout) if heldout else self.train[:0]
        self.files = len(files)

    def cut(self, lengths, split: str = "train", starts=None) -> list[np.ndarray]:
        """Samples of the given lengths from the split's stream (wrapping around), starting at
        `starts` (one position per sample), or one after another from 0 when starts is None."""
        stream = self.train if split == "train" else self.heldout
        if len(stream) == 0:
            raise RuntimeError(f"the {split} stream is empty; use more files")
        if starts is None:
            starts = np.cumsum([0] + [n - 1 for n in lengths[:-1]])
        samples = []
        for n, start in zip(lengths, starts):
            indices = (start + np.arange(n - 1)) % len(stream)
            samples.append(np.concatenate([np.array([BOS], dtype=np.int32), stream[indices]]))
        return samples


def draw_steps(corpus: Corpus, profile: Profile, tokens_per_step: int, steps: int,
               seed: int, split: str = "train") -> list[list[np.ndarray]]:
    """`steps` lists of samples, each list holding as many whole samples as fit in
    tokens_per_step valid tokens. Every mode of a benchmark trains on these same lists.
    Samples start at random places of the stream: consecutive cuts of the sorted files would
    feed the model one package after another, and a held-out loss that follows whichever
    package is current says nothing about packed vs padded training."""
    if tokens_per_step < profile.max_length:
        raise ValueError(f"tokens_per_step={tokens_per_step} is below the profile's longest sample "
                         f"({profile.max_length}); a step must hold at least one sample")
    rng = np.random.default_rng(seed)
    stream = len(corpus.train if split == "train" else corpus.heldout)
    out = []
    for _ in range(steps):
        lengths, total = [], 0
        while True:
            n = int(rng.integers(profile.min_length, profile.max_length + 1))
            if total + n > tokens_per_step:
                break
            lengths.append(n)
            total += n
        out.append(corpus.cut(lengths, split, rng.integers(0, max(1, stream), size=len(lengths))))
    return out
