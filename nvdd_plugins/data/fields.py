"""Field registry: which tensors are per-atom, per-edge or per-system, and their shapes."""

from __future__ import annotations

from enum import StrEnum

import torch

__all__ = ["KNOWN_FIELDS", "FieldLevel", "as_tensor", "field_level"]


class FieldLevel(StrEnum):
    """How a field is indexed: by atom (node), by edge, or by system (graph)."""

    NODE = "node"
    EDGE = "edge"
    SYSTEM = "system"


# name -> (level, trailing shape, is floating point). Units follow ASE: Å, eV, amu, eV/Å³,
# velocities in ASE's internal unit Å·sqrt(eV/amu).
KNOWN_FIELDS: dict[str, tuple[FieldLevel, tuple[int, ...], bool]] = {
    "positions": (FieldLevel.NODE, (3,), True),
    "atomic_numbers": (FieldLevel.NODE, (), False),
    "atomic_masses": (FieldLevel.NODE, (), True),
    "velocities": (FieldLevel.NODE, (3,), True),
    "forces": (FieldLevel.NODE, (3,), True),
    "charges": (FieldLevel.NODE, (), True),
    "energies": (FieldLevel.NODE, (), True),
    "stresses": (FieldLevel.NODE, (3, 3), True),
    "global_ids": (FieldLevel.NODE, (), False),
    "cell": (FieldLevel.SYSTEM, (3, 3), True),
    "pbc": (FieldLevel.SYSTEM, (3,), False),
    "energy": (FieldLevel.SYSTEM, (), True),
    "stress": (FieldLevel.SYSTEM, (3, 3), True),
    "edge_index": (FieldLevel.EDGE, (), False),
    "shifts": (FieldLevel.EDGE, (3,), True),
    "unit_shifts": (FieldLevel.EDGE, (3,), False),
}


def field_level(name: str) -> FieldLevel | None:
    """Level of a known field, or None for a user-defined one."""
    entry = KNOWN_FIELDS.get(name)
    return entry[0] if entry else None


def as_tensor(value: object, name: str) -> torch.Tensor:
    """Convert array-likes (numpy, lists, tensors) to a tensor; floats keep their precision."""
    if isinstance(value, torch.Tensor):
        return value
    try:
        return torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError) as err:
        raise TypeError(f"{name}: cannot convert {type(value).__name__} to a tensor") from err
