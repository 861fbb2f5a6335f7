"""`DistributionSpec.edge_target_row`: forwards drop the edges into ghost rows when every
aggregation writes onto that row of `edge_index` (compiled ones too, at a fixed capacity); a
wrong claim is refused on every rank."""

from __future__ import annotations

import pytest
import torch

from nvdd_plugins import Batch, DomainConfig, ReplicatedModel
from nvdd_plugins.comm import run_simulated
from nvdd_plugins.models import SimpleMPNN
from nvdd_plugins.spec import SPEC_MPNN_HALO, DistributionSpec, MLIPSpec
from tests.helpers.oracle import errors, reference
from tests.helpers.systems import SYSTEMS, ShiftPairModel


class _CountsEdges:
    """A model declaring `edge_target_row` that records how many edges each forward
    receives (`edge_counts`)."""

    def _declare(self, target_row: int | None) -> None:
        self.edge_counts: list[int] = []
        self._spec = MLIPSpec(
            distribution=DistributionSpec(edge_target_row=target_row),
            output_kinds=SPEC_MPNN_HALO.output_kinds,
        )

    def distribution_spec(self, strategy=None) -> MLIPSpec:
        return self._spec


class _CountingMPNN(_CountsEdges, SimpleMPNN):
    """SimpleMPNN (messages onto `edge_index[0]`), counting its real edges."""

    def __init__(self, target_row: int | None) -> None:
        super().__init__(cutoff=4.5, hidden=16, n_layers=3, seed=7)
        self.double()
        self._declare(target_row)

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        self.edge_counts.append(int(self.adapt_input(batch).edge_index.shape[1]))
        return super().forward(batch)


class _CountingPairs(_CountsEdges, ShiftPairModel):
    """A pair potential (energies onto `edge_index[0]`, shifts rather than minimum images:
    it compiles), counting its edge slots."""

    def __init__(self, target_row: int | None) -> None:
        super().__init__(cutoff=4.5)
        self._declare(target_row)

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        self.edge_counts.append(int(batch.edge_index.shape[1]))
        return super().forward(batch)


def _run(
    target_row: int | None, world_size: int, steps: int = 3, compile_: bool = False
) -> tuple[float, list[int]]:
    """Worst force error over `steps` evaluations and the edge counts of rank 0's forwards
    (compiled: of `_CountingPairs`, else of `_CountingMPNN`'s real edges)."""
    atoms = SYSTEMS["bulk"]()
    counting = _CountingPairs if compile_ else _CountingMPNN
    ref = reference(counting(None), atoms, ("energy", "forces"))

    models = [counting(target_row) for _ in range(world_size)]  # seeded: built serially

    def run(comm):
        model = models[comm.rank]
        config = DomainConfig(cutoff=model.cutoff, mesh=comm, compile=compile_)
        distributed = ReplicatedModel(model, config)
        batch = Batch.from_atoms(atoms)
        results = [distributed(batch) for _ in range(steps)]
        return results, model.edge_counts

    ranks = run_simulated(world_size, run, timeout=60)
    worst = max(errors(r, ref, len(atoms))["forces"] for results, _ in ranks for r in results)
    return worst, ranks[0][1]


@pytest.mark.parametrize("world_size", [2, 3])
def test_edges_into_ghost_rows_are_dropped_and_forces_stay_exact(world_size: int) -> None:
    worst, counts = _run(0, world_size)
    assert worst < 1e-10
    _, every_edge = _run(None, world_size, steps=2)
    # first step: the reference on every edge, then the claimed forward; later steps: fewer
    assert counts[0] == every_edge[0] > counts[1]
    assert counts[2] == counts[3] == counts[1]


def test_compiled_forwards_drop_them_at_a_fixed_capacity(dynamo_only: None) -> None:
    worst, counts = _run(0, 2, steps=4, compile_=True)
    assert worst < 1e-10
    _, every_edge = _run(None, 2, steps=2, compile_=True)
    # the checked forward on every edge slot, the claimed one, then compiled ones
    assert counts[0] == every_edge[0] > counts[1]
    assert counts[1] == counts[2] == counts[3] == counts[4]


def test_at_one_rank_no_edge_is_dropped() -> None:
    worst, counts = _run(0, 1)
    assert worst < 1e-10
    assert len(set(counts)) == 1


def test_a_wrong_edge_target_row_is_refused() -> None:
    with pytest.raises(RuntimeError, match="edge_target_row"):
        _run(1, 2)


def test_edge_target_row_is_validated_and_survives_json() -> None:
    with pytest.raises(ValueError, match="edge_target_row"):
        DistributionSpec(edge_target_row=2)
    spec = DistributionSpec(edge_target_row=1)
    assert DistributionSpec.from_dict(spec.to_dict()) == spec
