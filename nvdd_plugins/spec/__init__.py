"""Declarative distribution specs: what a model declares, never how it is carried out."""

from __future__ import annotations

from nvdd_plugins.spec.adapters import JitAdapter, MethodAdapter, OpAdapter, PythonAdapter
from nvdd_plugins.spec.global_sums import (
    GLOBAL_SUM_ADAPTERS,
    MeshRanks,
    forward_on_ranks,
    mesh_ranks,
    owned_part,
    summed_over_ranks,
)
from nvdd_plugins.spec.kinds import OutputKind
from nvdd_plugins.spec.marks import (
    OwnedRows,
    handling_marks,
    owned_rows,
    refreshing_marks,
    scattered_onto_nodes,
)
from nvdd_plugins.spec.mlip_spec import DistributionSpec, MLIPSpec
from nvdd_plugins.spec.policies import GraphParallelPolicy, HaloStoragePolicy, policy_for
from nvdd_plugins.spec.presets import (
    ENERGY_KINDS,
    SPEC_LJ_HALO,
    SPEC_MPNN_GRAPH,
    SPEC_MPNN_HALO,
    for_strategy,
)
from nvdd_plugins.spec.transforms import (
    AllReduceSum,
    GatherInputs,
    ScatterOutputs,
    SliceOwned,
    Transform,
)

__all__ = [
    "ENERGY_KINDS",
    "GLOBAL_SUM_ADAPTERS",
    "SPEC_LJ_HALO",
    "SPEC_MPNN_GRAPH",
    "SPEC_MPNN_HALO",
    "AllReduceSum",
    "DistributionSpec",
    "GatherInputs",
    "GraphParallelPolicy",
    "HaloStoragePolicy",
    "JitAdapter",
    "MLIPSpec",
    "MeshRanks",
    "MethodAdapter",
    "OpAdapter",
    "OutputKind",
    "OwnedRows",
    "PythonAdapter",
    "ScatterOutputs",
    "SliceOwned",
    "Transform",
    "for_strategy",
    "forward_on_ranks",
    "handling_marks",
    "mesh_ranks",
    "owned_part",
    "owned_rows",
    "policy_for",
    "refreshing_marks",
    "scattered_onto_nodes",
    "summed_over_ranks",
]
