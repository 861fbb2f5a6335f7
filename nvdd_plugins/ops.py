"""Storage policies, transforms and the marks (scatter, sum over ranks) under one import path
for model authors."""

from __future__ import annotations

from nvdd_plugins.spec import (
    AllReduceSum,
    GatherInputs,
    GraphParallelPolicy,
    HaloStoragePolicy,
    ScatterOutputs,
    SliceOwned,
    scattered_onto_nodes,
    summed_over_ranks,
)

__all__ = [
    "AllReduceSum",
    "GatherInputs",
    "GraphParallelPolicy",
    "HaloStoragePolicy",
    "ScatterOutputs",
    "SliceOwned",
    "scattered_onto_nodes",
    "summed_over_ranks",
]
