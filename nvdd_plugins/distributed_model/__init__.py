"""`DistributedModel` (owned atoms that migrate) and `ReplicatedModel` (a system every rank
holds) over `HaloEngine`, which applies a model's spec on one rank's view, whatever its
layout; `ChunkedEvaluator`, one system evaluated in spatial chunks one after another."""

from __future__ import annotations

from nvdd_plugins.distributed_model.evaluation.call_rules import (
    CallKind,
    CallRules,
    StaleTargets,
    has_rows,
    is_opaque,
)
from nvdd_plugins.distributed_model.evaluation.derivatives import Leaves
from nvdd_plugins.distributed_model.evaluation.forward_plan import require_compilable
from nvdd_plugins.distributed_model.evaluation.health import (
    NON_FINITE,
    NonFiniteError,
    agreed_status,
    non_finite_error,
    non_finite_kinds,
)
from nvdd_plugins.distributed_model.evaluation.interception import REBIND_RULE, SENTINEL_RULE
from nvdd_plugins.distributed_model.evaluation.shells import ThickShell
from nvdd_plugins.distributed_model.layouts.chunked import ChunkedEvaluator
from nvdd_plugins.distributed_model.layouts.given_rows import PAIR_GRADIENTS, GivenRowsModel
from nvdd_plugins.distributed_model.layouts.model import DistributedModel
from nvdd_plugins.distributed_model.layouts.one_process import OneProcessEvaluator
from nvdd_plugins.distributed_model.layouts.replicated import ReplicatedModel
from nvdd_plugins.distributed_model.rows.given import GivenRows
from nvdd_plugins.distributed_model.rows.view import HaloView
from nvdd_plugins.distributed_model.rows.view_build import Padding, ViewRows, padded_view

__all__ = [
    "NON_FINITE",
    "PAIR_GRADIENTS",
    "REBIND_RULE",
    "SENTINEL_RULE",
    "CallKind",
    "CallRules",
    "ChunkedEvaluator",
    "DistributedModel",
    "GivenRows",
    "GivenRowsModel",
    "HaloView",
    "Leaves",
    "NonFiniteError",
    "OneProcessEvaluator",
    "Padding",
    "ReplicatedModel",
    "StaleTargets",
    "ThickShell",
    "ViewRows",
    "agreed_status",
    "has_rows",
    "is_opaque",
    "non_finite_error",
    "non_finite_kinds",
    "padded_view",
    "require_compilable",
]
