"""Storage policies, transforms and the scatter mark under one import path for model authors."""

from __future__ import annotations

from nvdd_plugins.spec import (
    AllReduceSum,
    GatherInputs,
    GraphParallelPolicy,
    HaloStoragePolicy,
    ScatterOutputs,
    SliceOwned,
    scattered_onto_nodes,
)

__all__ = [
    "AllReduceSum",
    "GatherInputs",
    "GraphParallelPolicy",
    "HaloStoragePolicy",
    "ScatterOutputs",
    "SliceOwned",
    "scattered_onto_nodes",
]
