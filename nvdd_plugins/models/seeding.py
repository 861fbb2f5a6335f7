"""Random-weight models drawn from a seed, safely from several threads at once."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["seeded_weights"]

_LOCK = threading.Lock()


@contextmanager
def seeded_weights(seed: int) -> Iterator[None]:
    """Draw from torch's global CPU generator seeded with `seed`, restoring its state after.

    Constructions under this context are serialised: simulated ranks are threads sharing the
    one global generator, and two of them seeding it at once would give each rank different
    weights (silently different models per rank).
    """
    with _LOCK, torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield
