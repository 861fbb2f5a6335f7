"""`Batch`: one or more atomic systems concatenated along the atom axis."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import ase
import torch

from nvdd_plugins.data.atomic_data import AtomicData, fields_to_atoms
from nvdd_plugins.data.fields import FieldLevel, field_level
from nvdd_plugins.data.store import FieldStore

__all__ = ["Batch"]


class Batch(FieldStore):
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
        if batch_idx is None:
            counts = ptr[1:] - ptr[:-1]
            graphs = torch.arange(len(counts), device=ptr.device)
            batch_idx = torch.repeat_interleave(graphs, counts)
        super().__init__(node, edge, system, ptr.shape[0] - 1, batch_idx.shape[0])
        object.__setattr__(self, "ptr", ptr.long())
        object.__setattr__(self, "batch_idx", batch_idx)

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
            fields = {k: v[lo:hi] for k, v in self.fields(FieldLevel.NODE)}
            fields.update({k: v[g] for k, v in self.fields(FieldLevel.SYSTEM)})
            result.append(fields_to_atoms(fields))
        return result

    def set_edges(self, edge_index: torch.Tensor, **edge_fields: torch.Tensor) -> None:
        """Replace the neighbour list: drops every old per-edge field first."""
        self._levels[FieldLevel.EDGE].clear()
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
        self._levels[FieldLevel.NODE] = dict(node_fields)
        self._levels[FieldLevel.EDGE] = {}
        object.__setattr__(self, "ptr", ptr)
        object.__setattr__(self, "batch_idx", torch.zeros(n, dtype=torch.long, device=ptr.device))
        object.__setattr__(self, "_sizes", (1, n))

    def fields(self, level: FieldLevel | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        """(name, tensor) pairs, optionally of one level only."""
        levels = list(FieldLevel) if level is None else [level]
        return ((name, v) for lv in levels for name, v in self._levels[lv].items())

    def __setattr__(self, name: str, value: object) -> None:
        if name in ("ptr", "batch_idx"):
            raise AttributeError(f"{name} is derived from the systems' sizes and is read-only")
        present = (level for level, fields in self._levels.items() if name in fields)
        level = next(present, field_level(name))
        if level is None:
            raise AttributeError(
                f"unknown field {name!r}: use add_node_property / add_system_property / "
                "add_edge_property to attach a new field"
            )
        self._set(name, value, level, check_values=False)

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
        node = {k: v[index] for k, v in self.fields(FieldLevel.NODE)}
        return Batch(node, {}, dict(self.fields(FieldLevel.SYSTEM)), ptr)

    def select_edges(self, slots: torch.Tensor) -> Batch:
        """A copy with the edges at `slots` (every per-edge field); atoms and systems shared.
        No value is checked, so it runs without a host synchronisation."""
        selected = self.copy()
        edges = dict(self.fields(FieldLevel.EDGE))
        edge_index = edges.pop("edge_index")
        selected.set_edges(edge_index[:, slots], **{k: v[slots] for k, v in edges.items()})
        return selected

    def __repr__(self) -> str:
        names = ", ".join(name for name, _ in self.fields())
        return (
            f"Batch(num_graphs={self.num_graphs}, num_nodes={self.num_nodes}, "
            f"num_edges={self.num_edges}, fields=[{names}])"
        )
