"""Shipped specs a wrapper can return from `distribution_spec`, and the output kinds of an
energy model."""

from __future__ import annotations

from dataclasses import replace

from nvdd_plugins.config import StrategyKind
from nvdd_plugins.spec.adapters import OpAdapter
from nvdd_plugins.spec.kinds import OutputKind
from nvdd_plugins.spec.mlip_spec import DistributionSpec, MLIPSpec
from nvdd_plugins.spec.policies import HaloStoragePolicy, policy_for
from nvdd_plugins.spec.transforms import ScatterOutputs

__all__ = ["ENERGY_KINDS", "SPEC_LJ_HALO", "SPEC_MPNN_GRAPH", "SPEC_MPNN_HALO", "for_strategy"]

ENERGY_KINDS: dict[str, OutputKind] = {
    "energies": OutputKind.PER_NODE,
    "energy": OutputKind.PER_GRAPH,
    "forces": OutputKind.PER_NODE,
    "stress": OutputKind.PER_GRAPH,
    "stresses": OutputKind.PER_NODE,
}

SPEC_MPNN_HALO = MLIPSpec(
    distribution=DistributionSpec(policy=HaloStoragePolicy()),
    output_kinds=ENERGY_KINDS,
)
"""Scatter-based message passing with autograd forces: every node-indexed scatter is
halo-refreshed; forces and stress come from the owned partial energy."""

SPEC_LJ_HALO = MLIPSpec(
    distribution=DistributionSpec(
        policy=HaloStoragePolicy(),
        custom_ops=(
            OpAdapter(
                op="nvdd::lennard_jones.default",  # registered by nvdd_plugins.kernels
                output_transforms={0: ScatterOutputs(), 1: ScatterOutputs(), 2: ScatterOutputs()},
            ),
        ),
    ),
    output_kinds=ENERGY_KINDS,
    n_layers=1,
)
"""The shipped Lennard-Jones kernel (`nvdd::lennard_jones`, forces computed inside the op):
its per-atom outputs are complete on owned rows and halo-corrected on ghost rows. Not for a
pair potential written in PyTorch: its forces come from autograd, so it takes
`SPEC_MPNN_HALO`."""


def for_strategy(spec: MLIPSpec, strategy: StrategyKind | None) -> MLIPSpec:
    """`spec` with the storage policy of `strategy` (None: halo). Both layouts refresh ghost
    rows at every aggregation onto atoms, so a model's op-level declarations (adapters,
    marks, output kinds) hold for either."""
    policy = policy_for(strategy)
    if isinstance(spec.distribution.policy, policy):
        return spec
    return replace(spec, distribution=replace(spec.distribution, policy=policy()))


SPEC_MPNN_GRAPH = for_strategy(SPEC_MPNN_HALO, StrategyKind.GRAPH_PARTITION)
"""`SPEC_MPNN_HALO` for graph partition: index-sharded atoms, ghost rows refreshed from
their owners at every aggregation onto atoms."""
