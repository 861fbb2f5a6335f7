"""Shipped specs a wrapper can return from `distribution_spec`."""

from __future__ import annotations

import torch

import nvdd_plugins.kernels  # noqa: F401  (registers torch.ops.nvdd.lennard_jones)
from nvdd_plugins.spec.adapters import OpAdapter
from nvdd_plugins.spec.kinds import OutputKind
from nvdd_plugins.spec.mlip_spec import DistributionSpec, MLIPSpec
from nvdd_plugins.spec.policies import HaloStoragePolicy
from nvdd_plugins.spec.transforms import ScatterOutputs

__all__ = ["SPEC_LJ_HALO", "SPEC_MPNN_HALO"]

_ENERGY_KINDS = {
    "energies": OutputKind.PER_NODE,
    "energy": OutputKind.PER_GRAPH,
    "forces": OutputKind.PER_NODE,
    "stress": OutputKind.PER_GRAPH,
    "stresses": OutputKind.PER_NODE,
}

SPEC_MPNN_HALO = MLIPSpec(
    distribution=DistributionSpec(policy=HaloStoragePolicy()),
    output_kinds=_ENERGY_KINDS,
)
"""Scatter-based message passing with autograd forces: every node-indexed scatter is
halo-refreshed; forces and stress come from the owned partial energy."""

SPEC_LJ_HALO = MLIPSpec(
    distribution=DistributionSpec(
        policy=HaloStoragePolicy(),
        custom_ops=(
            OpAdapter(
                op=torch.ops.nvdd.lennard_jones.default,
                output_transforms={0: ScatterOutputs(), 1: ScatterOutputs(), 2: ScatterOutputs()},
            ),
        ),
    ),
    output_kinds=_ENERGY_KINDS,
    n_layers=1,
)
"""The shipped Lennard-Jones kernel (`nvdd::lennard_jones`, forces computed inside the op):
its per-atom outputs are complete on owned rows and halo-corrected on ghost rows."""
