"""Test systems (ase.Atoms) and model factories shared by the tests."""

from __future__ import annotations

import numpy as np
import torch
from ase import Atoms
from ase.build import bulk
from ase.md.velocitydistribution import thermalize_momenta
from torch import nn

from nvdd_plugins import Batch
from nvdd_plugins.dynamics import NVE, BaseDynamics, NVTLangevin
from nvdd_plugins.models import (
    BaseModelMixin,
    LennardJonesModel,
    ModelConfig,
    NeighborConfig,
    SimpleMPNN,
)
from nvdd_plugins.models.mpnn import _Interaction
from nvdd_plugins.spec import SPEC_MPNN_HALO, for_strategy
from tests.helpers.oracle import on_the_oracle

LJ_EPSILON, LJ_SIGMA, LJ_CUTOFF = 0.0104, 3.4, 6.0
MPNN_CUTOFF = 4.5


def lj_model() -> LennardJonesModel:
    """Argon-like LJ (eV, Å) with the energy shifted at the cutoff (ASE's convention)."""
    return LennardJonesModel(LJ_EPSILON, LJ_SIGMA, LJ_CUTOFF, shift=True)


def mpnn_model() -> SimpleMPNN:
    """The 3-layer reference MPNN in float64."""
    return SimpleMPNN(cutoff=MPNN_CUTOFF, hidden=16, n_layers=3, seed=7).double()


class ShiftPairModel(nn.Module, BaseModelMixin):
    """A plain-PyTorch Morse-like pair potential using the neighbour list's shift vectors
    (not minimum image) with autograd forces and stress: covers the shift path."""

    def __init__(self, cutoff: float = 5.0) -> None:
        super().__init__()
        self.model_config = ModelConfig(
            autograd_outputs=frozenset({"forces", "stress"}),
            autograd_inputs=frozenset({"positions"}),
            neighbor_config=NeighborConfig(cutoff=cutoff),
        )

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        inputs = self.adapt_input(batch)
        i, j = inputs.edge_index
        r = (inputs.positions[j] - inputs.positions[i] + inputs.shifts).norm(dim=-1)
        envelope = (1 - r / self.cutoff) ** 2
        pair = 0.01 * ((1 - torch.exp(-1.2 * (r - 3.8))) ** 2 - 1) * envelope
        energies = inputs.positions.new_zeros(inputs.positions.shape[0]).index_add_(
            0, i, 0.5 * pair
        )
        energy = energies.new_zeros(inputs.num_graphs).index_add_(0, inputs.batch_idx, energies)
        return {"energies": energies, "energy": energy}

    def distribution_spec(self, strategy=None):
        return for_strategy(SPEC_MPNN_HALO, strategy)


class NaNBeyondWall(SimpleMPNN):
    """The reference MPNN with a NaN energy for atoms at x > `wall_x` Å (NaN only on those
    atoms' rows: a NaN whose gradient reached ghost or padding rows would spread to other
    owners through 0 * NaN)."""

    def __init__(self, wall_x: float) -> None:
        super().__init__(cutoff=MPNN_CUTOFF, hidden=8, n_layers=2, seed=3)
        self.double()
        self.wall_x = wall_x

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        out = super().forward(batch)
        beyond = batch.positions[:, 0].detach() > self.wall_x
        energies = out["energies"] + torch.where(beyond, torch.nan, 0.0).to(out["energies"])
        energy = energies.new_zeros(batch.num_graphs).index_add_(0, batch.batch_idx, energies)
        return {"energies": energies, "energy": energy}


class NaNSpreadingBeyondWall(NaNBeyondWall):
    """NaN energies for atoms at x > `wall_x` Å that reach, through autograd, the forces of
    every atom they interact with (on other ranks too, through the halo exchange)."""

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        out = SimpleMPNN.forward(self, batch)
        beyond = batch.positions[:, 0].detach() > self.wall_x
        energies = out["energies"] * torch.where(beyond, torch.nan, 1.0).to(out["energies"])
        energy = energies.new_zeros(batch.num_graphs).index_add_(0, batch.batch_idx, energies)
        return {"energies": energies, "energy": energy}


class PreSlicedMPNN(SimpleMPNN):
    """The reference MPNN returning the per-atom energies of the first half of its atoms
    only (a rule break: energies must cover every local atom)."""

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        out = super().forward(batch)
        out["energies"] = out["energies"][: batch.num_nodes // 2]
        return out


def _jiggle(atoms: Atoms, seed: int, scale: float = 0.15) -> Atoms:
    rng = np.random.default_rng(seed)
    atoms.positions += rng.normal(scale=scale, size=atoms.positions.shape)
    return atoms


def triclinic_bulk(seed: int = 0) -> Atoms:
    """108 atoms of fcc Ar in a sheared periodic box (~17 Å)."""
    atoms = bulk("Ar", "fcc", a=5.26, cubic=True) * (3, 3, 3)
    shear = np.array([[1.0, 0.06, 0.0], [0.0, 1.0, 0.04], [0.05, 0.0, 1.0]])
    atoms.set_cell(atoms.cell.array @ shear, scale_atoms=True)
    return _jiggle(atoms, seed)


def slab(seed: int = 1) -> Atoms:
    """A periodic-in-plane slab with 14 Å of vacuum along z (pbc z off)."""
    atoms = bulk("Ar", "fcc", a=5.26, cubic=True) * (3, 3, 2)
    atoms.center(vacuum=7.0, axis=2)
    atoms.pbc = (True, True, False)
    return _jiggle(atoms, seed, 0.1)


def cluster(seed: int = 2) -> Atoms:
    """An open cluster without a cell."""
    atoms = bulk("Ar", "fcc", a=5.26, cubic=True) * (2, 2, 2)
    atoms = _jiggle(atoms, seed, 0.2)
    atoms.set_cell(np.zeros((3, 3)))
    atoms.pbc = False
    return atoms


def small_box(seed: int = 3) -> Atoms:
    """A periodic box barely wider than twice the MPNN cutoff: ghosts are self-images."""
    atoms = bulk("Ar", "fcc", a=5.26, cubic=True) * (2, 2, 2)
    atoms.set_cell(atoms.cell.array * (9.3 / 10.52), scale_atoms=True)
    return _jiggle(atoms, seed, 0.1)


def single_atom() -> Atoms:
    """One atom in a periodic box: at several ranks every other sub-domain is empty."""
    return Atoms("Ar", positions=[[1.0, 1.0, 1.0]], cell=[20.0, 20.0, 20.0], pbc=True)


def corner_cluster(seed: int = 0) -> Atoms:
    """Eight atoms in one corner of a large open box: one sub-domain holds them all, so its
    rank only sends ghosts and its neighbours only receive them."""
    positions = np.random.default_rng(seed).uniform(0.0, 4.0, (8, 3)) + 1.0
    return Atoms("Ar8", positions=positions, cell=[30.0, 30.0, 30.0], pbc=False)


SPARSE_SYSTEMS = {"single_atom": single_atom, "corner": corner_cluster, "slab": slab}

SYSTEMS = {
    "bulk": triclinic_bulk,
    "slab": slab,
    "cluster": cluster,
    "small_box": small_box,
}


MD_DT_FS, MD_SKIN = 4.0, 0.5  # the shared trajectory tests' time step and Verlet skin


def md_integrator(name: str, model: BaseModelMixin) -> BaseDynamics:
    """NVE ("nve") or NVTLangevin at 600 K ("langevin") with the shared step and skin, on
    the single-process oracle (`on_the_oracle`; `DomainParallel` puts in its own engine)."""
    if name == "nve":
        return on_the_oracle(NVE(model, MD_DT_FS, skin=MD_SKIN))
    langevin = NVTLangevin(model, MD_DT_FS, temperature=600.0, friction=0.02, seed=11, skin=MD_SKIN)
    return on_the_oracle(langevin)


def hot_bulk(atoms: Atoms | None = None) -> Batch:
    """`atoms` (default: `triclinic_bulk`) with 600 K Maxwell-Boltzmann velocities (atoms
    migrate and cross periodic faces within a few dozen steps)."""
    atoms = triclinic_bulk() if atoms is None else atoms.copy()
    thermalize_momenta(atoms, temperature_K=600, rng=np.random.default_rng(5))
    return Batch.from_atoms(atoms)


def drifting_cluster(drift: float = 0.05) -> Batch:
    """`cluster` in a periodic 30 Å box, every atom moving `drift` Å/fs along x: the owned
    atoms per rank grow unequal as it crosses sub-domain boundaries."""
    atoms = cluster()
    atoms.set_cell([30.0, 30.0, 30.0])
    atoms.pbc = True
    atoms.positions += 4.0
    velocities = np.zeros((len(atoms), 3))
    velocities[:, 0] = drift * 10.1805  # Å/fs in ASE's time unit
    atoms.set_velocities(velocities)
    return Batch.from_atoms(atoms)


class NotReboundInteraction(_Interaction):
    """A SimpleMPNN layer that does not rebind its in-place `index_add_` (a rule break that is
    exact in eager runs and refused under compile=True)."""

    def forward(self, h, radial, envelope, receivers, senders):
        weight = self.filter(radial) * envelope.unsqueeze(-1)
        messages = nn.functional.silu(self.message(h[senders])) * weight
        aggregated = h.new_zeros(h.shape)
        aggregated.index_add_(0, receivers, messages)  # result not rebound
        return h + nn.functional.silu(self.update(torch.cat([h, aggregated], dim=-1)))
