"""Shared set-up for the Python tests.

They test the installed package (`pip install --no-build-isolation --no-deps .`, as
scripts/setup.sh does): run pytest from the repository root, where python/ is not on sys.path.
"""

import numpy as np
import pytest
import torch


@pytest.fixture
def rng():
    """A seeded generator: every test sees the same random inputs on every run."""
    return np.random.default_rng(20261130)


@pytest.fixture(autouse=True)
def _seed_torch():
    torch.manual_seed(20261130)
