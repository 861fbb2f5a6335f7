"""Handle mode: LAMMPS's owned + ghost rows through `DistributedModel`, with a per-layer halo
exchange over a ghost -> owner plan built from LAMMPS atom ids and LAMMPS's communicator.

A ghost shell of one cutoff (LAMMPS's default) is then exact for any number of
message-passing layers.
"""

from __future__ import annotations

import numpy as np
import torch
from lammps import lammps

from lammps_interface.handle import read_atoms
from lammps_interface.rows import LocalRows, RowResults
from nvdd_plugins import DomainConfig
from nvdd_plugins.comm import HaloPlan, MPICommunicator
from nvdd_plugins.distributed_model import Capacity, HaloEngine, HaloView, assemble_view
from nvdd_plugins.models import BaseModelMixin

__all__ = ["HaloBridge", "evaluate_local_rows"]


def evaluate_local_rows(
    engine: HaloEngine,
    view: HaloView,
    positions: torch.Tensor,
    cell: torch.Tensor,
    pbc: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """Energy and forces with every local row's position given (owned, then ghosts at their
    image positions), as LAMMPS lays them out (collective).

    Per-atom outputs cover all local rows: "forces" on a ghost row is the contribution that
    must be added to its owner (LAMMPS's reverse communication does that), so the rows also
    give the virial as sum(x * f). Forces come from autograd of the owned partial energy, so
    the model's energies must be differentiable.
    """
    if positions.shape[0] != view.n_local:
        raise ValueError(f"expected {view.n_local} local positions, got {positions.shape[0]}")
    leaf = positions.detach().requires_grad_(True)
    with torch.enable_grad():
        rows = torch.cat([leaf, view.padding_positions.to(leaf.dtype)])
    results = engine.evaluate(view, leaf, rows, cell, pbc, want_stress=False)
    return results.for_local_rows(view)


class HaloBridge:
    """Evaluate a model on one rank's LAMMPS rows with halo exchanges between ranks.

    Args:
        model: the nvdd model wrapper.
        lmp: the attached LAMMPS instance (ids, positions, box, communicator).
        dtype: dtype the model computes in.
        padding_species: atomic number given to padding rows (must be one the model knows).
    """

    def __init__(
        self, model: BaseModelMixin, lmp: lammps, dtype: torch.dtype, padding_species: int
    ) -> None:
        self.lmp = lmp
        self.dtype = dtype
        self.padding_species = padding_species
        self.cutoff = model.cutoff
        self.comm = MPICommunicator(lmp.get_mpi_comm())
        self.engine = HaloEngine(model, DomainConfig(cutoff=model.cutoff), self.comm)
        self._capacity = Capacity(growth=1.25, exact=True)
        self._plan: HaloPlan | None = None
        self._layout: tuple[int, np.ndarray] | None = None

    def evaluate(self, rows: LocalRows) -> RowResults:
        """Energies and forces of every row (collective: all ranks call it each step)."""
        atoms = read_atoms(self.lmp, rows.nlocal, rows.ntotal)
        plan = self._plan_for(rows.nlocal, atoms.ids)
        edges, _ = rows.edges(ghost_pairs=False)
        positions = torch.from_numpy(atoms.positions).to(self.dtype)
        view = assemble_view(
            plan,
            positions,
            torch.zeros(rows.ntotal, 3, dtype=torch.long),
            torch.from_numpy(rows.numbers),
            torch.from_numpy(atoms.ids),
            torch.from_numpy(edges),
            torch.zeros(edges.shape[1], 3, dtype=torch.long),
            self.padding_species,
            self._capacity.fit,
            self._capacity.fit,
            self.cutoff,
        )
        # Ghosts sit at their image positions and every pair is explicit: no axis wraps.
        out = evaluate_local_rows(
            self.engine,
            view,
            positions,
            torch.from_numpy(atoms.cell).to(self.dtype).unsqueeze(0),
            torch.zeros(1, 3, dtype=torch.bool),
        )
        return RowResults(
            energies=out["energies"].to(torch.float64).numpy(),
            forces=out["forces"].to(torch.float64).numpy(),
        )

    def _plan_for(self, nlocal: int, ids: np.ndarray) -> HaloPlan:
        """The cached plan, rebuilt on every rank when any rank's id layout changed (LAMMPS
        re-neighboured or sorted atoms): an owner's new row order invalidates its peers'
        plans too, and building a plan is collective."""
        layout = self._layout
        changed = layout is None or layout[0] != nlocal or not np.array_equal(layout[1], ids)
        flag = self.comm.all_reduce(torch.tensor([int(changed)]), "max")
        if self._plan is None or bool(flag[0]):
            owned, ghosts = torch.from_numpy(ids[:nlocal]), torch.from_numpy(ids[nlocal:])
            self._plan = HaloPlan.from_global_ids(self.comm, owned, ghosts)
            self._layout = (nlocal, ids)
        return self._plan
