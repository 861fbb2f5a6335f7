"""Which decomposition state a `DomainConfig.strategy` uses."""

from __future__ import annotations

from nvdd_plugins.comm import Communicator
from nvdd_plugins.config import DomainConfig, StrategyKind
from nvdd_plugins.distributed_model.domain import HaloDomain
from nvdd_plugins.distributed_model.graph_partition import GraphDomain

__all__ = ["Domain", "make_domain"]

Domain = HaloDomain | GraphDomain
"""One rank's decomposition state: ownership, ghosts, rebuilds and its current view."""

_DOMAINS: dict[StrategyKind, type[HaloDomain] | type[GraphDomain]] = {
    StrategyKind.HALO: HaloDomain,
    StrategyKind.GRAPH_PARTITION: GraphDomain,
}


def make_domain(comm: Communicator, config: DomainConfig) -> Domain:
    """The decomposition state of `config.strategy` on this rank."""
    return _DOMAINS[config.strategy](comm, config)
