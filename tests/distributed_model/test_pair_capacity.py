"""`PairCapacity`: the pairs within the cutoff first, in a capacity sized by eager forwards;
more of them than it holds raise the overflow flag instead of being dropped silently."""

from __future__ import annotations

import torch

from nvdd_plugins import Batch
from nvdd_plugins.distributed_model.evaluation import pair_capacity
from nvdd_plugins.distributed_model.evaluation.pair_capacity import PairCapacity


def _chain(n: int, spacing: float) -> Batch:
    """`n` atoms on a line, every ordered pair an edge (distances spacing x |i - j|)."""
    positions = torch.zeros(n, 3, dtype=torch.float64)
    positions[:, 0] = spacing * torch.arange(n)
    i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    off = i != j
    edge_index = torch.stack([i[off], j[off]])
    batch = Batch(
        {"positions": positions, "atomic_numbers": torch.ones(n, dtype=torch.long)},
        {},
        {"cell": torch.eye(3, dtype=torch.float64)[None] * 100, "pbc": torch.zeros(1, 3).bool()},
        ptr=torch.tensor([0, n]),
    )
    batch.set_edges(edge_index, shifts=torch.zeros(edge_index.shape[1], 3, dtype=torch.float64))
    return batch


def test_pairs_within_the_cutoff_come_first_and_an_overflow_is_flagged(monkeypatch) -> None:
    batch = _chain(12, 1.0)
    close = 2 * (11 + 10)  # pairs at 1 and 2 Å, both directions
    pairs = PairCapacity()
    kept = pairs.within(batch, cutoff=2.5)
    assert close <= pairs.capacity == kept.num_edges <= batch.num_edges
    i, j = kept.edge_index
    distance = (kept.positions[j] - kept.positions[i]).norm(dim=-1)
    assert bool((distance[:close] < 2.5).all()) and bool((distance[close:] >= 2.5).all())
    assert not bool(pairs.overflow)
    version = pairs.version
    pairs.capacity = close - 3  # as if atoms had come closer since it was sized
    with monkeypatch.context() as captured:  # a captured forward does not resize
        captured.setattr(pair_capacity, "host_checks_allowed", lambda: False)
        kept = pairs.within(batch, cutoff=2.5)
    assert bool(pairs.overflow) and kept.num_edges == close - 3 and pairs.version == version
    pairs.within(batch, cutoff=2.5)  # an eager forward grows it
    assert pairs.capacity >= close and pairs.version == version + 1
    pairs.reset()
    assert pairs.capacity is None and pairs.overflow is None
