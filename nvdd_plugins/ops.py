"""Storage policies and transforms, as the seed imports them (`nvdd_plugins.ops`)."""

from __future__ import annotations

from nvdd_plugins.spec.policies import GraphParallelPolicy, HaloStoragePolicy
from nvdd_plugins.spec.transforms import AllReduceSum, GatherInputs, ScatterOutputs, SliceOwned

__all__ = [
    "AllReduceSum",
    "GatherInputs",
    "GraphParallelPolicy",
    "HaloStoragePolicy",
    "ScatterOutputs",
    "SliceOwned",
]
