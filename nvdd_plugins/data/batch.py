"""`Batch`: one or more atomic systems concatenated along the atom axis."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import ase
import torch

from nvdd_plugins.data.atomic_data import AtomicData, fields_to_atoms, validate_field
from nvdd_plugins.data.fields import FieldLevel, as_tensor, field_level

__all__ = ["Batch"]

_STORES = {FieldLevel.NODE: "_node", FieldLevel.EDGE: "_edge", FieldLevel.SYSTEM: "_system"}


class Batch:
    """Systems concatenated along atoms; edges are offset to batch-global atom indices.

    Fields are read and written as attributes (`batch.positions`, `batch.velocities = v`);
    writing a known field checks its shape. `batch_idx` maps each atom to its system and
    `ptr` holds the per-system atom offsets (length num_graphs + 1); passing a matching
    `batch_idx` saves deriving it from `ptr` (which waits for the GPU).
    """

    def __init__(
        self,
        node: dict[str, torch.Tensor],
        edge: dict[str, torch.Tensor],
        system: dict[str, torch.Tensor],
        ptr: torch.Tensor,
        batch_idx: torch.Tensor | None = None,
    ) -> None:
        object.__setattr__(self, "_node", dict(node))
        object.__setattr__(self, "_edge", dict(edge))
        object.__setattr__(self, "_system", dict(system))
        object.__setattr__(self, "ptr", ptr.long())
        if batch_idx is None:
            counts = ptr[1:] - ptr[:-1]
            graphs = torch.arange(len(counts), device=ptr.device)
            batch_idx = torch.repeat_interleave(graphs, counts)
        object.__setattr__(self, "batch_idx", batch_idx)
        # Sizes as Python ints, so reading them never syncs a GPU or breaks a compiled graph.
        object.__setattr__(self, "_sizes", (ptr.shape[0] - 1, batch_idx.shape[0]))

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def from_data_list(
        cls, data_list: Sequence[AtomicData], device: torch.device | str | None = None
    ) -> Batch:
        """Concatenate systems; every system must carry the same set of fields."""
        if len(data_list) == 0:
            raise ValueError("from_data_list needs at least one AtomicData")
        layouts = [sorted((n, lv) for n, lv, _ in d.fields()) for d in data_list]
        if any(layout != layouts[0] for layout in layouts[1:]):
            raise ValueError("all AtomicData in a batch must carry the same fields")
        counts = torch.tensor([d.num_nodes for d in data_list])
        ptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(counts, 0)])
        stores: dict[FieldLevel, dict[str, torch.Tensor]] = {lv: {} for lv in FieldLevel}
        for name, level, _ in data_list[0].fields():
            parts = [getattr(d, name) for d in data_list]
            if name == "edge_index":
                parts = [p + int(off) for p, off in zip(parts, ptr[:-1], strict=True)]
                stores[level][name] = torch.cat(parts, dim=1)
            else:
                stores[level][name] = torch.cat(parts, dim=0)
        batch = cls(
            stores[FieldLevel.NODE], stores[FieldLevel.EDGE], stores[FieldLevel.SYSTEM], ptr
        )
        return batch.to(device) if device is not None else batch

    @classmethod
    def from_atoms(
        cls,
        atoms: ase.Atoms | Sequence[ase.Atoms],
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float64,
    ) -> Batch:
        """A batch from one `ase.Atoms` or a list of them."""
        atoms_list = [atoms] if isinstance(atoms, ase.Atoms) else list(atoms)
        return cls.from_data_list([AtomicData.from_atoms(a, dtype) for a in atoms_list], device)

    def to_atoms(self) -> list[ase.Atoms]:
        """One `ase.Atoms` per system."""
        result = []
        for g in range(self.num_graphs):
            lo, hi = int(self.ptr[g]), int(self.ptr[g + 1])
            fields = {k: v[lo:hi] for k, v in self._node.items()}
            fields.update({k: v[g] for k, v in self._system.items()})
            result.append(fields_to_atoms(fields))
        return result

    # -- sizes ----------------------------------------------------------------------------
    @property
    def num_graphs(self) -> int:
        """Number of systems."""
        return self._sizes[0]

    @property
    def num_nodes(self) -> int:
        """Total number of atoms."""
        return self._sizes[1]

    @property
    def num_edges(self) -> int:
        """Total number of edges (0 without a neighbour list)."""
        edge_index = self._edge.get("edge_index")
        return 0 if edge_index is None else edge_index.shape[1]

    @property
    def device(self) -> torch.device:
        """Device of the positions."""
        return self._node["positions"].device

    @property
    def dtype(self) -> torch.dtype:
        """Floating dtype of the positions."""
        return self._node["positions"].dtype

    # -- fields ---------------------------------------------------------------------------
    def _count(self, level: FieldLevel) -> int:
        return {
            FieldLevel.NODE: self.num_nodes,
            FieldLevel.EDGE: self.num_edges,
            FieldLevel.SYSTEM: self.num_graphs,
        }[level]

    def _set(self, name: str, value: object, level: FieldLevel, check_values: bool) -> None:
        known = field_level(name)
        if known is not None and known is not level:
            raise ValueError(f"{name} is a {known.value}-level field, not {level.value}-level")
        tensor = as_tensor(value, name)
        count = tensor.shape[-1] if name == "edge_index" else self._count(level)
        tensor = validate_field(name, tensor, level, count, check_values)
        for other in FieldLevel:
            if other is not level:
                getattr(self, _STORES[other]).pop(name, None)
        getattr(self, _STORES[level])[name] = tensor

    def add_node_property(self, name: str, value: torch.Tensor) -> None:
        """Attach or replace a per-atom field (leading size num_nodes)."""
        self._set(name, value, FieldLevel.NODE, check_values=True)

    def add_edge_property(self, name: str, value: torch.Tensor) -> None:
        """Attach or replace a per-edge field (edge_index first, as (2, n_edges))."""
        self._set(name, value, FieldLevel.EDGE, check_values=True)

    def add_system_property(self, name: str, value: torch.Tensor) -> None:
        """Attach or replace a per-system field (leading size num_graphs)."""
        self._set(name, value, FieldLevel.SYSTEM, check_values=True)

    def set_edges(self, edge_index: torch.Tensor, **edge_fields: torch.Tensor) -> None:
        """Replace the neighbour list: drops every old per-edge field first."""
        self._edge.clear()
        self._set("edge_index", edge_index, FieldLevel.EDGE, check_values=False)
        for name, value in edge_fields.items():
            self._set(name, value, FieldLevel.EDGE, check_values=False)

    def set_nodes(self, node_fields: dict[str, torch.Tensor]) -> None:
        """Replace every per-atom field of a single-system batch at once (e.g. after atoms
        migrated between ranks); the neighbour list is dropped."""
        if self.num_graphs != 1:
            raise ValueError("set_nodes works on single-system batches")
        counts = {int(v.shape[0]) for v in node_fields.values()}
        if len(counts) != 1:
            raise ValueError("set_nodes: per-atom fields disagree on the number of atoms")
        n = counts.pop()
        ptr = torch.tensor([0, n], device=self.ptr.device)
        object.__setattr__(self, "_node", dict(node_fields))
        object.__setattr__(self, "_edge", {})
        object.__setattr__(self, "ptr", ptr)
        object.__setattr__(self, "batch_idx", torch.zeros(n, dtype=torch.long, device=ptr.device))
        object.__setattr__(self, "_sizes", (1, n))

    def level_of(self, name: str) -> FieldLevel:
        """Level of a field present in this batch."""
        for level, store in _STORES.items():
            if name in getattr(self, store):
                return level
        raise KeyError(name)

    def fields(self, level: FieldLevel | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        """(name, tensor) pairs, optionally of one level only."""
        levels = [level] if level is not None else list(FieldLevel)
        for lv in levels:
            yield from getattr(self, _STORES[lv]).items()

    def __getattr__(self, name: str) -> torch.Tensor:
        for store in _STORES.values():
            fields = self.__dict__.get(store, {})
            if name in fields:
                return fields[name]
        raise AttributeError(f"Batch has no field {name!r}")

    def __setattr__(self, name: str, value: object) -> None:
        if name in ("ptr", "batch_idx"):
            raise AttributeError(f"{name} is derived from the systems' sizes and is read-only")
        for level, store in _STORES.items():
            if name in self.__dict__[store]:
                self._set(name, value, level, check_values=False)
                return
        level = field_level(name)
        if level is None:
            raise AttributeError(
                f"unknown field {name!r}: use add_node_property / add_system_property / "
                "add_edge_property to attach a new field"
            )
        self._set(name, value, level, check_values=False)

    def __contains__(self, name: str) -> bool:
        return any(name in self.__dict__[store] for store in _STORES.values())

    def get(self, name: str, default: torch.Tensor | None = None) -> torch.Tensor | None:
        """A field, or `default` when absent."""
        return getattr(self, name) if name in self else default

    def pop(self, name: str) -> torch.Tensor:
        """Remove a field and return it."""
        for store in _STORES.values():
            fields = self.__dict__[store]
            if name in fields:
                return fields.pop(name)
        raise KeyError(name)

    # -- transforms -----------------------------------------------------------------------
    def to(
        self, device: torch.device | str | None = None, dtype: torch.dtype | None = None
    ) -> Batch:
        """A copy on `device`; `dtype` applies to floating-point fields only."""

        def move(t: torch.Tensor) -> torch.Tensor:
            target = dtype if (dtype is not None and t.is_floating_point()) else t.dtype
            return t.to(device=device if device is not None else t.device, dtype=target)

        return Batch(
            {k: move(v) for k, v in self._node.items()},
            {k: move(v) for k, v in self._edge.items()},
            {k: move(v) for k, v in self._system.items()},
            self.ptr.to(device) if device is not None else self.ptr,
        )

    def clone(self) -> Batch:
        """A deep copy of every field."""
        return Batch(
            {k: v.clone() for k, v in self._node.items()},
            {k: v.clone() for k, v in self._edge.items()},
            {k: v.clone() for k, v in self._system.items()},
            self.ptr.clone(),
        )

    def select_nodes(self, index: torch.Tensor) -> Batch:
        """A batch of the atoms at `index` (order kept, per-system order required).

        Edges are dropped (rebuild the neighbour list); system fields are kept.
        """
        index = index.to(self.ptr.device)
        graph_of = self.batch_idx[index]
        if index.numel() > 1 and bool((graph_of[1:] < graph_of[:-1]).any()):
            raise ValueError("select_nodes: atoms must stay grouped by system in ascending order")
        counts = torch.bincount(graph_of, minlength=self.num_graphs)
        ptr = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
        node = {k: v[index] for k, v in self._node.items()}
        return Batch(node, {}, dict(self._system), ptr)

    def __repr__(self) -> str:
        names = ", ".join(name for name, _ in self.fields())
        return (
            f"Batch(num_graphs={self.num_graphs}, num_nodes={self.num_nodes}, "
            f"num_edges={self.num_edges}, fields=[{names}])"
        )
