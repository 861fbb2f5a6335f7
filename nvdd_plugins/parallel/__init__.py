"""The native distributed API: `DistributedManager` and `DomainParallel`."""

from __future__ import annotations

from nvdd_plugins.parallel.domain_parallel import DomainParallel
from nvdd_plugins.parallel.manager import DistributedManager

__all__ = ["DistributedManager", "DomainParallel"]
