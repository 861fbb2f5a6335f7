"""Shipped specs a wrapper can return from `distribution_spec`, and the output kinds of an
energy model."""

from __future__ import annotations

from nvdd_plugins.spec.kinds import OutputKind
from nvdd_plugins.spec.mlip_spec import DistributionSpec, MLIPSpec
from nvdd_plugins.spec.policies import HaloStoragePolicy

__all__ = ["ENERGY_KINDS", "SPEC_MPNN_HALO"]

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
