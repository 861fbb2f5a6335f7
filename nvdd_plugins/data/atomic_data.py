"""`AtomicData`: one atomic system (positions, species, masses, cell, pbc and extras)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import ase
import numpy as np
import torch

from nvdd_plugins.data.fields import KNOWN_FIELDS, FieldLevel, as_tensor, field_level

__all__ = ["AtomicData", "fields_to_atoms", "validate_field"]


def validate_field(
    name: str, value: torch.Tensor, level: FieldLevel, count: int, check_values: bool = True
) -> torch.Tensor:
    """Check a field's shape (leading size `count`) and values; return it normalised.

    `check_values=False` skips the value checks (NaN, bounds), which sync a GPU; shapes are
    always checked. Raises ValueError naming the field on a wrong shape or bad values.
    """
    spec = KNOWN_FIELDS.get(name)
    if spec is None:
        if value.dim() == 0 or value.shape[0] != count:
            raise ValueError(
                f"{name}: a {level.value}-level field needs leading size {count}, "
                f"got shape {tuple(value.shape)}"
            )
        return value
    if name == "edge_index":
        if value.dim() != 2 or value.shape[0] != 2:
            raise ValueError(f"edge_index must have shape (2, n_edges), got {tuple(value.shape)}")
        return value.long()
    if spec.level is FieldLevel.SYSTEM and tuple(value.shape) == spec.trailing:
        value = value.unsqueeze(0)  # one system given without its leading axis
    expected = (count, *spec.trailing)
    if tuple(value.shape) != expected:
        raise ValueError(
            f"{name} must have shape {expected} ({level.value}-level field), "
            f"got {tuple(value.shape)}"
        )
    if spec.kind == "bool":
        return value.bool()
    if spec.kind == "int":
        value = value.long()
    elif not value.is_floating_point():
        value = value.to(torch.get_default_dtype())
    if not check_values:
        return value
    if spec.kind == "float" and not bool(torch.isfinite(value).all()):
        raise ValueError(f"{name} contains NaN or infinite values")
    if spec.sign is not None:
        wrong = value <= 0 if spec.sign == "positive" else value < 0
        if bool(wrong.any()):
            raise ValueError(f"{name} must be {spec.sign}")
    return value


class AtomicData:
    """One atomic system.

    Args:
        positions: (n_atoms, 3) Cartesian positions in Å.
        atomic_numbers: (n_atoms,) integer species.
        atomic_masses: (n_atoms,) masses in amu (needed by integrators, not by models).
        cell: (3, 3) or (1, 3, 3) lattice vectors as rows, Å (zeros for no cell).
        pbc: (3,) or (1, 3) periodic flags.
        velocities, forces, energy, stress, charges: optional extras (ASE units;
            velocities in Å·sqrt(eV/amu), ASE's internal unit).
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
        stress: torch.Tensor | None = None,
        charges: torch.Tensor | None = None,
    ) -> None:
        self._node: dict[str, torch.Tensor] = {}
        self._edge: dict[str, torch.Tensor] = {}
        self._system: dict[str, torch.Tensor] = {}
        positions = as_tensor(positions, "positions")
        if positions.dim() != 2 or positions.shape[-1] != 3:
            raise ValueError(
                f"positions must have shape (n_atoms, 3), got {tuple(positions.shape)}"
            )
        self._n_atoms = positions.shape[0]
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
            ("charges", charges),
        ):
            if value is not None:
                self.add_node_property(name, value)
        for name, value in (("energy", energy), ("stress", stress)):
            if value is not None:
                self.add_system_property(name, value)

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
        )
        if atoms.has("momenta"):
            data.add_node_property(
                "velocities", torch.as_tensor(atoms.get_velocities(), dtype=dtype)
            )
        if atoms.has("initial_charges"):
            data.add_node_property(
                "charges", torch.as_tensor(atoms.get_initial_charges(), dtype=dtype)
            )
        return data

    def to_atoms(self) -> ase.Atoms:
        """Convert to `ase.Atoms` (positions, numbers, masses, cell, pbc, velocities)."""
        return fields_to_atoms(dict((name, value) for name, _, value in self.fields()))

    # -- properties -------------------------------------------------------------------------
    @property
    def num_nodes(self) -> int:
        """Number of atoms."""
        return self._n_atoms

    @property
    def num_edges(self) -> int:
        """Number of edges (0 when no neighbour list is attached)."""
        edge_index = self._edge.get("edge_index")
        return 0 if edge_index is None else edge_index.shape[1]

    def _store(self, level: FieldLevel) -> dict[str, torch.Tensor]:
        return {FieldLevel.NODE: self._node, FieldLevel.EDGE: self._edge}.get(level, self._system)

    def _add(self, name: str, value: object, level: FieldLevel, count: int) -> None:
        known = field_level(name)
        if known is not None and known is not level:
            raise ValueError(f"{name} is a {known.value}-level field, not {level.value}-level")
        tensor = as_tensor(value, name)
        if tensor.is_floating_point() and "positions" in self._node:
            tensor = tensor.to(self._node["positions"].dtype)
        self._store(level)[name] = validate_field(name, tensor, level, count)

    def add_node_property(self, name: str, value: torch.Tensor) -> None:
        """Attach a per-atom field with leading size n_atoms (e.g. "velocities")."""
        self._add(name, value, FieldLevel.NODE, self._n_atoms)

    def add_edge_property(self, name: str, value: torch.Tensor) -> None:
        """Attach a per-edge field (edge_index is (2, n_edges); others lead with n_edges)."""
        count = value.shape[-1] if name == "edge_index" else self.num_edges
        self._add(name, value, FieldLevel.EDGE, count)

    def add_system_property(self, name: str, value: torch.Tensor | float) -> None:
        """Attach a per-system field (leading size 1, e.g. "energy")."""
        tensor = as_tensor(value, name)
        if name not in KNOWN_FIELDS and (tensor.dim() == 0 or tensor.shape[0] != 1):
            tensor = tensor.unsqueeze(0)
        self._add(name, tensor, FieldLevel.SYSTEM, 1)

    def fields(self) -> Iterator[tuple[str, FieldLevel, torch.Tensor]]:
        """All fields as (name, level, tensor)."""
        for level in FieldLevel:
            for name, value in self._store(level).items():
                yield name, level, value

    def __getattr__(self, name: str) -> torch.Tensor:
        for store in ("_node", "_edge", "_system"):
            fields = self.__dict__.get(store, {})
            if name in fields:
                return fields[name]
        raise AttributeError(f"AtomicData has no field {name!r}")

    def __contains__(self, name: str) -> bool:
        return name in self._node or name in self._edge or name in self._system

    def __repr__(self) -> str:
        names = ", ".join(name for name, _, _ in self.fields())
        return f"AtomicData(n_atoms={self._n_atoms}, fields=[{names}])"


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
