"""`AtomicData`: one atomic system (positions, species, masses, cell, pbc and extras)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import ase
import numpy as np
import torch

from nvdd_plugins.data.fields import KNOWN_FIELDS, FieldLevel, as_tensor
from nvdd_plugins.data.store import FieldStore

__all__ = ["AtomicData", "fields_to_atoms"]


class AtomicData(FieldStore):
    """One atomic system.

    Args:
        positions: (n_atoms, 3) Cartesian positions in Å.
        atomic_numbers: (n_atoms,) integer species.
        atomic_masses: (n_atoms,) masses in amu (needed by integrators, not by models).
        cell: (3, 3) or (1, 3, 3) lattice vectors as rows, Å (zeros for no cell).
        pbc: (3,) or (1, 3) periodic flags.
        velocities, forces, energy: optional extras (ASE units; velocities in
            Å·sqrt(eV/amu), ASE's internal unit). Other fields ("stress", "charges", ...)
            are attached with `add_node_property` / `add_system_property`.
    """

    def __init__(
        self,
        positions: torch.Tensor,
        atomic_numbers: torch.Tensor,
        atomic_masses: torch.Tensor | None = None,
        cell: torch.Tensor | None = None,
        pbc: torch.Tensor | Sequence[bool] | None = None,
        *,
        velocities: torch.Tensor | None = None,
        forces: torch.Tensor | None = None,
        energy: torch.Tensor | float | None = None,
    ) -> None:
        positions = as_tensor(positions, "positions")
        if positions.dim() != 2 or positions.shape[-1] != 3:
            raise ValueError(
                f"positions must have shape (n_atoms, 3), got {tuple(positions.shape)}"
            )
        super().__init__({}, {}, {}, num_graphs=1, num_nodes=positions.shape[0])
        dtype = positions.dtype if positions.is_floating_point() else torch.get_default_dtype()
        self.add_node_property("positions", positions.to(dtype))
        self.add_node_property("atomic_numbers", as_tensor(atomic_numbers, "atomic_numbers"))
        cell_t = torch.zeros(3, 3, dtype=dtype) if cell is None else as_tensor(cell, "cell")
        self.add_system_property("cell", cell_t.to(dtype=dtype, device=positions.device))
        pbc_t = torch.zeros(3, dtype=torch.bool) if pbc is None else as_tensor(pbc, "pbc")
        self.add_system_property("pbc", pbc_t.to(positions.device))
        for name, value in (
            ("atomic_masses", atomic_masses),
            ("velocities", velocities),
            ("forces", forces),
        ):
            if value is not None:
                self.add_node_property(name, value)
        if energy is not None:
            self.add_system_property("energy", energy)

    @classmethod
    def from_atoms(cls, atoms: ase.Atoms, dtype: torch.dtype = torch.float64) -> AtomicData:
        """Build from `ase.Atoms`: positions, numbers, masses, cell, pbc, and velocities,
        charges when the Atoms carry them (velocities stay in ASE's internal unit)."""
        data = cls(
            positions=torch.as_tensor(atoms.get_positions(), dtype=dtype),
            atomic_numbers=torch.as_tensor(atoms.get_atomic_numbers(), dtype=torch.long),
            atomic_masses=torch.as_tensor(atoms.get_masses(), dtype=dtype),
            cell=torch.as_tensor(np.asarray(atoms.get_cell()), dtype=dtype),
            pbc=torch.as_tensor(atoms.get_pbc()),
            velocities=atoms.get_velocities() if atoms.has("momenta") else None,
        )
        if atoms.has("initial_charges"):
            data.add_node_property("charges", atoms.get_initial_charges())
        return data

    def to_atoms(self) -> ase.Atoms:
        """Convert to `ase.Atoms` (positions, numbers, masses, cell, pbc, velocities)."""
        return fields_to_atoms(dict((name, value) for name, _, value in self.fields()))

    def _normalised(self, name: str, tensor: torch.Tensor, level: FieldLevel) -> torch.Tensor:
        """Floating fields take the positions' dtype; a user-defined system field may be
        given without its leading axis."""
        unknown_system = level is FieldLevel.SYSTEM and name not in KNOWN_FIELDS
        if unknown_system and (tensor.dim() == 0 or tensor.shape[0] != 1):
            tensor = tensor.unsqueeze(0)
        if tensor.is_floating_point() and "positions" in self:
            tensor = tensor.to(self.dtype)
        return tensor

    def fields(self) -> Iterator[tuple[str, FieldLevel, torch.Tensor]]:
        """All fields as (name, level, tensor)."""
        return ((n, lv, v) for lv, fields in self._levels.items() for n, v in fields.items())

    def __repr__(self) -> str:
        names = ", ".join(name for name, _, _ in self.fields())
        return f"AtomicData(n_atoms={self.num_nodes}, fields=[{names}])"


def fields_to_atoms(fields: dict[str, torch.Tensor]) -> ase.Atoms:
    """`ase.Atoms` from one system's fields (cell (1,3,3) or (3,3), pbc (1,3) or (3,))."""

    def host(name: str) -> np.ndarray:
        return fields[name].detach().cpu().numpy()

    atoms = ase.Atoms(
        numbers=host("atomic_numbers"),
        positions=host("positions"),
        cell=host("cell").reshape(3, 3),
        pbc=host("pbc").reshape(3),
    )
    if "atomic_masses" in fields:
        atoms.set_masses(host("atomic_masses"))
    if "velocities" in fields:
        atoms.set_velocities(host("velocities"))
    if "charges" in fields:
        atoms.set_initial_charges(host("charges"))
    return atoms
