"""`FieldStore`: node, edge and system fields by name, validated on write; the one
implementation behind `AtomicData` and `Batch`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Self

import torch

from nvdd_plugins.data.fields import FieldLevel, as_tensor, field_level, validate_field

__all__ = ["FieldStore"]


class FieldStore:
    """Fields of one or more systems, read as attributes (`store.positions`).

    Every tensor attribute besides the fields (a batch's `ptr`, `batch_idx`) travels with
    the fields through `to`, `copy` and `clone`.
    """

    def __init__(
        self,
        node: dict[str, torch.Tensor],
        edge: dict[str, torch.Tensor],
        system: dict[str, torch.Tensor],
        num_graphs: int,
        num_nodes: int,
    ) -> None:
        levels = dict(zip(FieldLevel, (dict(node), dict(edge), dict(system)), strict=True))
        object.__setattr__(self, "_levels", levels)
        # Sizes as Python ints, so reading them never syncs a GPU or breaks a compiled graph.
        object.__setattr__(self, "_sizes", (num_graphs, num_nodes))

    @property
    def num_graphs(self) -> int:
        """Number of systems."""
        return self._sizes[0]

    @property
    def num_nodes(self) -> int:
        """Number of atoms (over all systems)."""
        return self._sizes[1]

    @property
    def num_edges(self) -> int:
        """Number of edges (0 when no neighbour list is attached)."""
        edge_index = self._levels[FieldLevel.EDGE].get("edge_index")
        return 0 if edge_index is None else edge_index.shape[1]

    @property
    def device(self) -> torch.device:
        """Device of the positions."""
        return self._levels[FieldLevel.NODE]["positions"].device

    @property
    def dtype(self) -> torch.dtype:
        """Floating dtype of the positions."""
        return self._levels[FieldLevel.NODE]["positions"].dtype

    def _normalised(self, name: str, tensor: torch.Tensor, level: FieldLevel) -> torch.Tensor:
        """`tensor` as this store keeps it, before validation (a hook for subclasses)."""
        return tensor

    def _set(self, name: str, value: object, level: FieldLevel, check_values: bool) -> None:
        known = field_level(name)
        if known is not None and known is not level:
            raise ValueError(f"{name} is a {known.value}-level field, not {level.value}-level")
        tensor = self._normalised(name, as_tensor(value, name), level)
        sizes = {FieldLevel.NODE: self.num_nodes, FieldLevel.SYSTEM: self.num_graphs}
        count = tensor.shape[-1] if name == "edge_index" else sizes.get(level, self.num_edges)
        tensor = validate_field(name, tensor, level, count, check_values)
        for other, fields in self._levels.items():
            if other is not level:
                fields.pop(name, None)
        self._levels[level][name] = tensor

    def add_node_property(self, name: str, value: torch.Tensor) -> None:
        """Attach or replace a per-atom field (leading size num_nodes, e.g. "velocities")."""
        self._set(name, value, FieldLevel.NODE, check_values=True)

    def add_edge_property(self, name: str, value: torch.Tensor) -> None:
        """Attach or replace a per-edge field (edge_index first, as (2, n_edges); others
        lead with num_edges)."""
        self._set(name, value, FieldLevel.EDGE, check_values=True)

    def add_system_property(self, name: str, value: torch.Tensor | float) -> None:
        """Attach or replace a per-system field (leading size num_graphs, e.g. "energy")."""
        self._set(name, value, FieldLevel.SYSTEM, check_values=True)

    def level_of(self, name: str) -> FieldLevel:
        """Level of a field present here."""
        for level, fields in self._levels.items():
            if name in fields:
                return level
        raise KeyError(name)

    def get(self, name: str, default: torch.Tensor | None = None) -> torch.Tensor | None:
        """A field, or `default` when absent."""
        return getattr(self, name) if name in self else default

    def pop(self, name: str) -> torch.Tensor:
        """Remove a field and return it."""
        return self._levels[self.level_of(name)].pop(name)

    def __getattr__(self, name: str) -> torch.Tensor:
        for fields in self.__dict__.get("_levels", {}).values():
            if name in fields:
                return fields[name]
        raise AttributeError(f"{type(self).__name__} has no field {name!r}")

    def __contains__(self, name: str) -> bool:
        return any(name in fields for fields in self._levels.values())

    def _mapped(self, move: Callable[[torch.Tensor], torch.Tensor]) -> Self:
        """A new store of the same class, `move` applied to every tensor it holds."""
        result = object.__new__(type(self))
        for key, value in self.__dict__.items():
            if key == "_levels":
                value = {lv: {k: move(v) for k, v in f.items()} for lv, f in value.items()}
            elif isinstance(value, torch.Tensor):
                value = move(value)
            object.__setattr__(result, key, value)
        return result

    def to(
        self, device: torch.device | str | None = None, dtype: torch.dtype | None = None
    ) -> Self:
        """A copy on `device`; `dtype` applies to floating-point fields only (tensors
        already there are shared, as `torch.Tensor.to` does)."""

        def move(t: torch.Tensor) -> torch.Tensor:
            target = dtype if (dtype is not None and t.is_floating_point()) else t.dtype
            return t.to(device=device if device is not None else t.device, dtype=target)

        return self._mapped(move)

    def copy(self) -> Self:
        """A shallow copy: fields can be added, replaced or dropped without touching this
        store, while the tensors themselves are shared."""
        return self._mapped(lambda t: t)

    def clone(self) -> Self:
        """A deep copy of every tensor."""
        return self._mapped(torch.Tensor.clone)
