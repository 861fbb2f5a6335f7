"""Decomposition: sub-domains, ownership and ghost selection (no communication here)."""

from __future__ import annotations

from nvdd_plugins.decomposition.balance import (
    Reduce,
    balanced_cuts,
    imbalance,
    in_one_process,
    owned_counts,
    rebalanced,
    row_counts,
)
from nvdd_plugins.decomposition.cuts import StaggeredCuts
from nvdd_plugins.decomposition.frame import DecompositionFrame
from nvdd_plugins.decomposition.grid import choose_rank_grid
from nvdd_plugins.decomposition.index_partitioner import (
    IndexPartitioner,
    index_owners,
    morton_order,
)
from nvdd_plugins.decomposition.occupancy import BinGrid, KeyRuns
from nvdd_plugins.decomposition.partitioner import GhostImages, SpatialPartitioner

__all__ = [
    "BinGrid",
    "DecompositionFrame",
    "GhostImages",
    "IndexPartitioner",
    "KeyRuns",
    "Reduce",
    "SpatialPartitioner",
    "StaggeredCuts",
    "balanced_cuts",
    "choose_rank_grid",
    "imbalance",
    "in_one_process",
    "index_owners",
    "morton_order",
    "owned_counts",
    "rebalanced",
    "row_counts",
]
