"""A synthetic vision-language-action task, rendered with numpy (no download): three coloured discs
move on a table; the instruction names one colour; the actions are that disc's next positions.

Each sample has three camera views at resolutions drawn per sample (so patch counts vary):
  wrist     the scene one step ago (t-1), the smallest camera
  base      the scene now (t)
  overhead  the scene now (t) from a larger camera: it shows nothing the base view does not, so a
            task can prune it (its tokens are the most of the three); only the samples of the
            "rig_a" robot have it (a dataset mixture: image counts vary per sample)
The instruction is "<bos> track <colour> [filler words] <sep>" (variable length); the actions are
the target's x and y bins for the next `horizon` steps, two tokens per step. The motion has noise,
so the best achievable loss is above zero.
"""
from __future__ import annotations

import functools
import multiprocessing
import os
from dataclasses import dataclass

import numpy as np

PAD, IMAGE, BOS, SEP, TRACK = 0, 1, 2, 3, 4
COLOURS = {"red": (1.0, 0.1, 0.1), "green": (0.1, 1.0, 0.1), "blue": (0.1, 0.2, 1.0)}
COLOUR_TOKEN = {name: 5 + i for i, name in enumerate(COLOURS)}
FILLER_FIRST, FILLERS = 8, 16            # "please", "now", ...: instruction lengths vary
BINS = 16                                # positions per axis
X_FIRST = FILLER_FIRST + FILLERS         # x bins, then y bins
Y_FIRST = X_FIRST + BINS
VOCAB_SIZE = 64
VIEWS = ("wrist", "base", "overhead")


@dataclass(frozen=True)
class TaskConfig:
    patch: int                   # pixels per patch side
    grid: dict                   # view -> (min, max) patches per image side
    max_filler: int = 12
    horizon: int = 4
    noise: float = 0.02          # std of the per-step motion noise (world units)
    radius: float = 0.09
    overhead_share: float = 0.75  # samples from the rig with the overhead camera

    def max_patches(self, view: str) -> int:
        return self.grid[view][1] ** 2


def render(positions: np.ndarray, height: int, width: int, radius: float) -> np.ndarray:
    """[height, width, 3] float32: the discs at `positions` ([3, 2] in [0, 1]) over a grey table."""
    ys = (np.arange(height, dtype=np.float32) + 0.5) / height
    xs = (np.arange(width, dtype=np.float32) + 0.5) / width
    image = np.full((height, width, 3), 0.3, dtype=np.float32)
    for (x, y), colour in zip(positions, COLOURS.values()):
        inside = (ys[:, None] - y) ** 2 + (xs[None, :] - x) ** 2 < radius ** 2
        image[inside] = colour
    return image


def bins(values: np.ndarray) -> np.ndarray:
    return np.clip((values * BINS).astype(np.int64), 0, BINS - 1)


def make_sample(config: TaskConfig, seed: int) -> dict:
    """Sample `seed`: images with pixels, instruction + action tokens, labels on the actions only."""
    rng = np.random.default_rng(seed)
    start = rng.uniform(0.25, 0.75, size=(3, 2))
    velocity = rng.uniform(-0.06, 0.06, size=(3, 2))
    now = start + velocity
    target = int(rng.integers(3))
    future, position = [], now[target].copy()
    for _ in range(config.horizon):
        position = position + velocity[target] + rng.normal(0, config.noise, size=2)
        future.append(position)
    future = np.array(future)

    rig = "rig_a" if rng.random() < config.overhead_share else "rig_b"
    images = []
    for view, scene in (("wrist", start), ("base", now), ("overhead", now))[:3 if rig == "rig_a" else 2]:
        low, high = config.grid[view]
        rows, cols = (int(v) for v in rng.integers(low, high + 1, size=2))
        pixels = render(scene, rows * config.patch, cols * config.patch, config.radius)
        # float16 halves the memory of a kept dataset and holds this palette's values closely
        images.append({"view": view, "pixels": pixels.astype(np.float16), "patch": config.patch})

    colour = list(COLOURS)[target]
    filler = FILLER_FIRST + rng.integers(FILLERS, size=int(rng.integers(config.max_filler + 1)))
    instruction = [BOS, TRACK, COLOUR_TOKEN[colour], *filler.tolist(), SEP]
    actions = np.stack([X_FIRST + bins(future[:, 0]), Y_FIRST + bins(future[:, 1])], axis=1).reshape(-1)
    input_ids = np.array(instruction + actions.tolist(), dtype=np.int64)
    labels = input_ids.copy()
    labels[:len(instruction)] = -100
    return {"dataset": rig, "images": images, "input_ids": input_ids, "labels": labels}


class TaskDataset:
    """`count` samples rendered once and kept, so every mode trains on the same ones."""

    def __init__(self, config: TaskConfig, count: int, seed: int):
        self.config = config
        seeds = [seed * 1_000_003 + i for i in range(count)]
        if count < 512:
            self.samples = [make_sample(config, s) for s in seeds]
            return
        # Thousands of samples: render on every core (numpy only in the workers, so forking is safe).
        with multiprocessing.get_context("fork").Pool(min(16, os.cpu_count() or 1)) as pool:
            self.samples = pool.map(functools.partial(make_sample, config), seeds, chunksize=64)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> dict:
        return self.samples[index]
