"""Storage policies, transforms and the scatter mark under one import path for model authors."""

from __future__ import annotations

from nvdd_plugins.spec.marks import scattered_onto_nodes
from nvdd_plugins.spec.policies import GraphParallelPolicy, HaloStoragePolicy
from nvdd_plugins.spec.transforms import AllReduceSum, GatherInputs, ScatterOutputs, SliceOwned

__all__ = [
    "AllReduceSum",
    "GatherInputs",
    "GraphParallelPolicy",
    "HaloStoragePolicy",
    "ScatterOutputs",
    "SliceOwned",
    "scattered_onto_nodes",
]
