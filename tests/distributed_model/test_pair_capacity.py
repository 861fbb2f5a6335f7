"""`PairCapacity`: the slots needed first, in a capacity grown by eager forwards (kept across
views for compiled ones); more of them than it holds raise the overflow flag instead of
being dropped silently."""

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


def test_needed_slots_come_first_and_an_overflow_is_flagged(monkeypatch) -> None:
    batch = _chain(12, 1.0)
    i, j = batch.edge_index
    close = (i - j).abs() <= 2  # pairs at 1 and 2 Å, both directions
    n_close = 2 * (11 + 10)
    slots = PairCapacity()
    kept = slots.kept(batch, close)
    assert n_close <= slots.capacity and kept.num_edges == min(slots.capacity, batch.num_edges)
    a, b = kept.edge_index
    distance = (kept.positions[b] - kept.positions[a]).norm(dim=-1)
    assert bool((distance[:n_close] < 2.5).all()) and bool((distance[n_close:] >= 2.5).all())
    assert not bool(slots.overflow)
    version = slots.version
    slots.capacity = n_close - 3  # as if atoms had come closer since it was sized
    with monkeypatch.context() as captured:  # a captured forward does not resize
        captured.setattr(pair_capacity, "host_checks_allowed", lambda: False)
        kept = slots.kept(batch, close)
    assert bool(slots.overflow) and kept.num_edges == n_close - 3 and slots.version == version
    slots.kept(batch, close)  # an eager forward grows it
    assert slots.capacity >= n_close and slots.version == version + 1
    slots.reset(resize=False)  # a compiled forward's new view: its shape outlives rebuilds
    assert slots.capacity >= n_close and slots.overflow is None
    fewer = slots.kept(batch, (i - j).abs() <= 1)
    assert fewer.num_edges == min(slots.capacity, batch.num_edges)
    slots.reset(resize=True)  # an eager one's: sized anew, and captured anew
    assert slots.capacity is None and slots.version == version + 2
    assert slots.kept(batch, (i - j).abs() <= 1).num_edges < fewer.num_edges


def test_the_slot_count_never_equals_the_row_count() -> None:
    """Per-edge tensors are told from node-indexed ones by their leading size."""
    batch = _chain(12, 1.0)
    slots = PairCapacity()
    slots.capacity = 12  # sized already: 12 needed slots do not grow it
    kept = slots.kept(batch, torch.arange(batch.num_edges) < 12)
    assert kept.num_nodes == 12 and kept.num_edges == 13


def test_an_overflow_is_part_of_the_status_word() -> None:
    """A captured step whose forward needed more edge slots than it kept is dropped: the
    overflow is folded into the step's one status word (`REBUILD`), as a stale view is."""
    from nvdd_plugins.distributed_model import OneProcessEvaluator
    from nvdd_plugins.distributed_model.evaluation.health import REBUILD
    from tests.helpers.systems import hot_bulk, lj_model

    evaluator = OneProcessEvaluator(lj_model(), skin=0.5)
    batch = hot_bulk()
    evaluator(batch)
    engine = evaluator.engine
    assert engine is not None
    slots = engine.engine.runner.edge_slots
    slots.overflow = torch.tensor(False)
    assert not bool(evaluator.stale_for(batch))
    slots.overflow = torch.tensor(True)
    assert bool(evaluator.stale_for(batch))
    assert float(engine.status(engine.owned_rows(batch))) == REBUILD
