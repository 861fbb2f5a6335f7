"""`GivenRowsModel` for a front end that replays its model calls (the LAMMPS bridge): a call
whose pairs within the cutoff outgrow the edge slots kept for them raises its flag, so the
replay is not kept, and the eager call that grows the capacity changes the graph token, so
the call is captured again."""

from __future__ import annotations

import torch

from nvdd_plugins import Batch
from nvdd_plugins.comm import LocalCommunicator
from nvdd_plugins.distributed_model import GivenRows, GivenRowsModel
from nvdd_plugins.models import ModelConfig, NeighborConfig, without_host_checks
from nvdd_plugins.spec import SPEC_MPNN_HALO, DistributionSpec, MLIPSpec
from tests.helpers.systems import ShiftPairModel, cluster

CUTOFF = 4.5


class _PrunedPairs(ShiftPairModel):
    """A pair potential weighing pairs at r >= cutoff zero, whose Verlet skin is pruned at
    fixed shapes (as MACE's and UMA's is), with its energies onto `edge_index[0]`."""

    def __init__(self) -> None:
        super().__init__(cutoff=CUTOFF)
        neighbors = NeighborConfig(CUTOFF, accepts_skin_pairs=True, prune_skin_pairs=True)
        self.model_config = ModelConfig(
            autograd_outputs=frozenset({"forces"}),
            autograd_inputs=frozenset({"positions"}),
            neighbor_config=neighbors,
        )

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        inputs = self.adapt_input(batch)
        i, j = inputs.edge_index
        r = (inputs.positions[j] - inputs.positions[i] + inputs.shifts).norm(dim=-1)
        pair = torch.exp(-r) * (1 - r / CUTOFF).clamp_min(0) ** 2
        energies = inputs.positions.new_zeros(inputs.positions.shape[0]).index_add_(
            0, i, 0.5 * pair
        )
        energy = energies.new_zeros(inputs.num_graphs).index_add_(0, inputs.batch_idx, energies)
        return {"energies": energies, "energy": energy}

    def distribution_spec(self, strategy=None) -> MLIPSpec:
        distribution = DistributionSpec(edge_target_row=0)
        return MLIPSpec(distribution=distribution, output_kinds=SPEC_MPNN_HALO.output_kinds)


def test_outgrown_edge_slots_flag_the_call_and_change_the_graph_token() -> None:
    atoms = cluster()
    positions = torch.from_numpy(atoms.positions)
    numbers = torch.from_numpy(atoms.numbers)
    cell = torch.eye(3, dtype=torch.float64)[None] * 100
    ids = torch.arange(len(atoms))
    layout = GivenRowsModel(
        _PrunedPairs(), LocalCommunicator(), padding_species=18, skin=0.5, fixed_shapes=True
    )
    rows = GivenRows(len(atoms), positions, numbers, ids, cell)
    layout(rows)  # eager: sizes the capacity
    view, key = layout.domain.view, layout.graph_token(rows)
    assert key is not None and not bool(layout.stale_for(rows))

    # atoms drawn together within half the skin: more pairs within the cutoff, same view
    centre = positions.mean(0)
    closer = centre + (positions - centre) * (
        1 - 0.2 / float((positions - centre).norm(dim=1).max())
    )
    rows = layout.prepare(GivenRows(len(atoms), closer, numbers, ids, cell))
    assert layout.domain.view is view
    slots = layout.engine.runner.edge_slots
    i, j = view.edge_index[:, view.edge_index[1] < view.n_local]
    slots.capacity = int(((closer[i] - closer[j]).norm(dim=1) < CUTOFF).sum()) - 1
    with without_host_checks():  # as a replay runs it: no resizing
        layout.evaluate_fixed(rows)
    assert bool(layout.stale_for(rows)) and layout.graph_token(rows) == key
    grown = layout.evaluate_fixed(rows)  # the eager call the flag asks for
    assert not bool(layout.stale_for(rows)) and layout.graph_token(rows) != key
    plain = GivenRowsModel(_PrunedPairs(), LocalCommunicator(), padding_species=18, skin=0.5)
    at_closer = plain(GivenRows(len(atoms), closer, numbers, ids, cell))
    torch.testing.assert_close(grown["energy"], at_closer["energy"], rtol=1e-13, atol=0)
