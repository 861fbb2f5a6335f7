"""Field registry: which tensors are per-atom, per-edge or per-system, their shapes, and the
check a written field passes."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import torch

__all__ = [
    "KNOWN_FIELDS",
    "FieldLevel",
    "FieldSpec",
    "as_tensor",
    "field_level",
    "validate_field",
]


class FieldLevel(StrEnum):
    """How a field is indexed: by atom (node), by edge, or by system (graph)."""

    NODE = "node"
    EDGE = "edge"
    SYSTEM = "system"


@dataclass(frozen=True)
class FieldSpec:
    """What a known field holds.

    Attributes:
        level: node, edge or system.
        trailing: shape after the leading (count) axis.
        kind: "float" (default float dtype unless floating already; must be finite), "int"
            (int64) or "bool".
        sign: "positive" or "non-negative" when the values must be (None: any).
    """

    level: FieldLevel
    trailing: tuple[int, ...]
    kind: str
    sign: str | None = None


# Units follow ASE: Å, eV, amu, eV/Å³, velocities in ASE's internal unit Å·sqrt(eV/amu).
KNOWN_FIELDS: dict[str, FieldSpec] = {
    "positions": FieldSpec(FieldLevel.NODE, (3,), "float"),
    "atomic_numbers": FieldSpec(FieldLevel.NODE, (), "int", sign="non-negative"),
    "atomic_masses": FieldSpec(FieldLevel.NODE, (), "float", sign="positive"),
    "velocities": FieldSpec(FieldLevel.NODE, (3,), "float"),
    "forces": FieldSpec(FieldLevel.NODE, (3,), "float"),
    "charges": FieldSpec(FieldLevel.NODE, (), "float"),
    "energies": FieldSpec(FieldLevel.NODE, (), "float"),
    "stresses": FieldSpec(FieldLevel.NODE, (3, 3), "float"),
    "global_ids": FieldSpec(FieldLevel.NODE, (), "int"),
    "cell": FieldSpec(FieldLevel.SYSTEM, (3, 3), "float"),
    "pbc": FieldSpec(FieldLevel.SYSTEM, (3,), "bool"),
    "energy": FieldSpec(FieldLevel.SYSTEM, (), "float"),
    "stress": FieldSpec(FieldLevel.SYSTEM, (3, 3), "float"),
    "edge_index": FieldSpec(FieldLevel.EDGE, (), "int"),  # stored as (2, n_edges)
    "shifts": FieldSpec(FieldLevel.EDGE, (3,), "float"),
    "unit_shifts": FieldSpec(FieldLevel.EDGE, (3,), "int"),
}


def field_level(name: str) -> FieldLevel | None:
    """Level of a known field, or None for a user-defined one."""
    entry = KNOWN_FIELDS.get(name)
    return entry.level if entry else None


def as_tensor(value: object, name: str) -> torch.Tensor:
    """Convert array-likes (numpy, lists, tensors) to a tensor; floats keep their precision."""
    if isinstance(value, torch.Tensor):
        return value
    try:
        return torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError) as err:
        raise TypeError(f"{name}: cannot convert {type(value).__name__} to a tensor") from err


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
    if spec.level is FieldLevel.SYSTEM and not spec.trailing and tuple(value.shape) == (count, 1):
        value = value.reshape(count)  # a scalar per system as a column (nvalchemi's energy)
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
