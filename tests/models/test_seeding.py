"""Seeded random-weight models are the same model in every thread (simulated ranks build
theirs concurrently)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch

from nvdd_plugins.models import SimpleMPNN


def _weights() -> list[torch.Tensor]:
    return [p.detach().clone() for p in SimpleMPNN(hidden=32, n_layers=4, seed=7).parameters()]


def test_concurrent_constructions_draw_the_same_weights() -> None:
    with ThreadPoolExecutor(max_workers=8) as pool:
        built = list(pool.map(lambda _: _weights(), range(64)))
    first = built[0]
    assert all(all(torch.equal(a, b) for a, b in zip(first, w, strict=True)) for w in built)


def test_construction_leaves_the_global_generator_alone() -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    SimpleMPNN(seed=7)
    assert torch.equal(torch.rand(3), expected)
