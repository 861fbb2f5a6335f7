"""How many halo exchanges one step makes: positions plus one per message-passing layer in
the forward, the same again in the backward (MACE: one per layer after the first, whose
node features are the species'); none at one rank, where periodic images are shifts, not
ghost rows; for the LJ kernel (forces from the op, no backward) positions plus one refresh of
its three per-atom outputs together. A counting communicator sees every exchange."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from nvdd_plugins import Batch, DomainConfig, DomainParallel
from nvdd_plugins.comm import Communicator, CountingCommunicator, run_simulated
from nvdd_plugins.dynamics import NVE
from nvdd_plugins.models import LennardJonesModel, SimpleMPNN
from tests.helpers.systems import SYSTEMS


def _steady_counts(model, atoms, world_size: int, steps: int = 3) -> list[list[int]]:
    """Exchanges of each step after the first (which builds the decomposition)."""

    def rank(comm: Communicator) -> list[int]:
        counting = CountingCommunicator(comm)
        config = DomainConfig(cutoff=model.cutoff, skin=0.5, mesh=counting)
        dd = DomainParallel(NVE(model, 1.0), config)
        full = None
        if counting.rank == 0:
            full = Batch.from_atoms(atoms)
            full.add_node_property("velocities", torch.zeros_like(full.positions))
        owned = dd.partition(full)
        dd.model(owned, ("energy", "forces"))
        counts = []
        for _ in range(steps):
            counting.exchanges = 0
            dd.model(owned, ("energy", "forces"))
            counts.append(counting.exchanges)
        return counts

    return run_simulated(world_size, rank)


@pytest.mark.parametrize("n_layers", [1, 3])
def test_mpnn_exchanges_per_step(n_layers: int) -> None:
    model = SimpleMPNN(cutoff=4.5, hidden=8, n_layers=n_layers).double()
    atoms = SYSTEMS["bulk"]()
    for counts in _steady_counts(model, atoms, 2):
        assert counts == [2 * (n_layers + 1)] * 3
    assert _steady_counts(model, atoms, 1) == [[0, 0, 0]]


def test_lennard_jones_outputs_refresh_in_one_exchange() -> None:
    """Energies, forces and virials of `nvdd::lennard_jones` (ScatterOutputs each) travel as
    one block: 2 exchanges per step, not 4."""
    model = LennardJonesModel(0.0104, 3.40, 4.5)
    atoms = SYSTEMS["bulk"]()
    for counts in _steady_counts(model, atoms, 2):
        assert counts == [2] * 3


@pytest.mark.mace
@pytest.mark.skipif(importlib.util.find_spec("mace") is None, reason="needs mace-torch")
def test_mace_exchanges_per_step_on_owned_rows() -> None:
    from nvdd_plugins.models import MACEWrapper
    from tests.helpers.mace_models import tiny_mace, with_two_species

    atoms = with_two_species(SYSTEMS["bulk"]())
    for counts in _steady_counts(MACEWrapper(tiny_mace()), atoms, 2):
        # two interaction layers through mace's owned-rows (LAMMPS) path: positions, then
        # node features before the second layer (the marked scatters would make it 6)
        assert counts == [2 * 2] * 3


@pytest.mark.nequip
@pytest.mark.skipif(importlib.util.find_spec("allegro") is None, reason="needs nequip-allegro")
def test_allegro_exchanges_the_minimum_whatever_its_layers() -> None:
    """Allegro (strictly local): positions forward and forces back, 2 per step as for a pair
    potential, at 1 and 3 Allegro layers; 3-layer NequIP (message passing) needs 2 x (3 + 1)."""
    from nvdd_plugins.models import AllegroWrapper, NequIPWrapper
    from tests.helpers.mace_models import with_two_species
    from tests.helpers.nequip_models import tiny_allegro, tiny_nequip

    atoms = with_two_species(SYSTEMS["bulk"]())
    for n_layers in (1, 3):
        for counts in _steady_counts(AllegroWrapper(tiny_allegro(num_layers=n_layers)), atoms, 2):
            assert counts == [2] * 3
    for counts in _steady_counts(NequIPWrapper(tiny_nequip(num_layers=3)), atoms, 2):
        assert counts == [2 * (3 + 1)] * 3
