"""Storage policies: how node data is laid out across ranks (declarative only)."""

from __future__ import annotations

from dataclasses import dataclass

from nvdd_plugins.config import StrategyKind

__all__ = [
    "GraphParallelPolicy",
    "HaloStoragePolicy",
    "StoragePolicy",
    "policy_for",
    "policy_from_name",
]


@dataclass(frozen=True)
class StoragePolicy:
    """Base of the storage policies; `name` is the serialised form."""

    @property
    def name(self) -> str:
        """Stable name used by `MLIPSpec.save`."""
        return type(self).__name__


@dataclass(frozen=True)
class HaloStoragePolicy(StoragePolicy):
    """Spatial halo: each rank stores its owned atoms followed by ghost copies of every atom
    within cutoff + skin of its sub-domain (at their periodic image positions), then padding."""


@dataclass(frozen=True)
class GraphParallelPolicy(StoragePolicy):
    """Graph partition: each rank owns a fixed index shard of the atoms and stores, after its
    owned rows, ghost copies of the atoms its owned atoms' edges reach (each atom at most
    once, at its own position: no periodic images, no padding between real rows)."""


_BY_NAME = {cls.__name__: cls for cls in (HaloStoragePolicy, GraphParallelPolicy)}


def policy_from_name(name: str) -> StoragePolicy:
    """Inverse of `StoragePolicy.name`."""
    try:
        return _BY_NAME[name]()
    except KeyError:
        raise ValueError(f"unknown storage policy {name!r}; known: {sorted(_BY_NAME)}") from None


def policy_for(strategy: StrategyKind | None) -> type[StoragePolicy]:
    """The storage policy a spec needs under `strategy` (None: halo)."""
    if StrategyKind(strategy or StrategyKind.HALO) is StrategyKind.GRAPH_PARTITION:
        return GraphParallelPolicy
    return HaloStoragePolicy
