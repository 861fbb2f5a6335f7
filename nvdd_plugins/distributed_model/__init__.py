"""`DistributedModel` (owned atoms that migrate) and `ReplicatedModel` (a system every rank
holds) over `HaloEngine`, which applies a model's spec on one rank's view, whatever its
layout."""

from __future__ import annotations

from nvdd_plugins.distributed_model.call_rules import (
    CallKind,
    CallRules,
    StaleTargets,
    has_rows,
    is_opaque,
)
from nvdd_plugins.distributed_model.domain import HaloDomain
from nvdd_plugins.distributed_model.engine import HaloEngine
from nvdd_plugins.distributed_model.given_rows import GivenRowsModel
from nvdd_plugins.distributed_model.graph_partition import GraphDomain
from nvdd_plugins.distributed_model.health import NonFiniteError
from nvdd_plugins.distributed_model.interception import REBIND_RULE, SENTINEL_RULE
from nvdd_plugins.distributed_model.model import DistributedModel, SubdomainModel
from nvdd_plugins.distributed_model.one_process import OneProcessEvaluator
from nvdd_plugins.distributed_model.replicated import ReplicatedModel
from nvdd_plugins.distributed_model.view import HaloView
from nvdd_plugins.distributed_model.view_build import Padding, ViewRows, padded_view

__all__ = [
    "REBIND_RULE",
    "SENTINEL_RULE",
    "CallKind",
    "CallRules",
    "DistributedModel",
    "GivenRowsModel",
    "GraphDomain",
    "HaloDomain",
    "HaloEngine",
    "HaloView",
    "NonFiniteError",
    "OneProcessEvaluator",
    "Padding",
    "ReplicatedModel",
    "StaleTargets",
    "SubdomainModel",
    "ViewRows",
    "has_rows",
    "is_opaque",
    "padded_view",
]
