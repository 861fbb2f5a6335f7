"""Handle mode: LAMMPS's owned + ghost rows through `GivenRowsModel`, with a per-layer halo
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
from nvdd_plugins.comm import HaloPlan, MPICommunicator
from nvdd_plugins.distributed_model import GivenRowsModel
from nvdd_plugins.models import BaseModelMixin

__all__ = ["HaloBridge"]


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
        self.comm = MPICommunicator(lmp.get_mpi_comm())
        self.layout = GivenRowsModel(model, self.comm, padding_species)
        self._plan: HaloPlan | None = None
        self._ids_layout: tuple[int, np.ndarray] | None = None

    def evaluate(self, rows: LocalRows, pair_forces: bool = False) -> RowResults:
        """Energies and forces of every row, and with `pair_forces` the force of every
        listed pair (collective: all ranks call it each step)."""
        atoms = read_atoms(self.lmp, rows.nlocal, rows.ntotal)
        plan = self._plan_for(rows.nlocal, atoms.ids)
        edges, _ = rows.edges(ghost_pairs=False)
        positions = torch.from_numpy(atoms.positions).to(self.dtype)
        numbers, ids = torch.from_numpy(rows.numbers), torch.from_numpy(atoms.ids)
        view = self.layout.view(plan, positions, numbers, ids, torch.from_numpy(edges))
        cell = torch.from_numpy(atoms.cell).to(self.dtype).unsqueeze(0)
        out = self.layout(view, positions, cell, pair_gradients=pair_forces)
        gradients = out.get("pair_gradients")
        if gradients is not None:
            gradients = gradients[: edges.shape[1]].to(torch.float64).numpy()
            gradients = rows.pair_forces(gradients, ghost_pairs=False)
        return RowResults(
            energies=out["energies"].to(torch.float64).numpy(),
            forces=out["forces"].to(torch.float64).numpy(),
            pair_forces=gradients,
        )

    def _plan_for(self, nlocal: int, ids: np.ndarray) -> HaloPlan:
        """The cached plan, rebuilt on every rank when any rank's id layout changed (LAMMPS
        re-neighboured or sorted atoms): an owner's new row order invalidates its peers'
        plans too, and building a plan is collective."""
        layout = self._ids_layout
        changed = layout is None or layout[0] != nlocal or not np.array_equal(layout[1], ids)
        flag = self.comm.all_reduce(torch.tensor([int(changed)]), "max")
        if self._plan is None or bool(flag[0]):
            owned, ghosts = torch.from_numpy(ids[:nlocal]), torch.from_numpy(ids[nlocal:])
            self._plan = HaloPlan.from_global_ids(self.comm, owned, ghosts)
            self._ids_layout = (nlocal, ids)
        return self._plan
