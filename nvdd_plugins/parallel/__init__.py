"""The native distributed API: `DistributedManager`, `DomainParallel` and `HookScope`."""

from __future__ import annotations

from nvdd_plugins.parallel.domain_parallel import DomainParallel, HookScope
from nvdd_plugins.parallel.manager import DistributedManager
from nvdd_plugins.parallel.pipeline import DistributedPipeline, DomainPipeline, PipelineMesh, Stage

__all__ = [
    "DistributedManager",
    "DistributedPipeline",
    "DomainParallel",
    "DomainPipeline",
    "HookScope",
    "PipelineMesh",
    "Stage",
]
