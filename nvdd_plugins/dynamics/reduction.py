"""Global quantities of an integrator, declared as named per-rank partial sums.

An integrator that needs a system-wide number (kinetic energy, degrees of freedom, FIRE's
v·f, a count of unconverged atoms, the kinetic part of the pressure tensor) computes the
partial sum over the atoms of its batch and passes the named partials to
`BaseDynamics.reduce_sums`. That calls the injected `SumReducer`: `local_sums` (the identity:
the batch is the whole system) in one process, one all-reduce of every partial at once under
`DomainParallel`. The result is the same on every rank, so replicated state computed from it
(thermostat variables, the cell, a convergence decision) stays identical everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import torch

from nvdd_plugins.data import Batch

__all__ = ["SumReducer", "kinetic_partials", "local_sums"]


class SumReducer(Protocol):
    """How a dynamics turns per-rank partial sums into global sums (`local_sums` by default).

    Every rank must pass the same names with the same shapes in the same order.
    """

    def __call__(self, partials: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The sum of each named partial over every rank (same names, shapes and dtypes)."""


def local_sums(partials: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The single-process reducer: the partials are already the global sums."""
    return dict(partials)


def kinetic_partials(batch: Batch, tensor: bool = False) -> dict[str, torch.Tensor]:
    """This batch's share of "mv2" (Σ m v², eV: twice the kinetic energy), "atoms" (the
    number of atoms, as a float: 3 × atoms is the thermostatted degrees of freedom) and, with
    `tensor`, "mvv" (Σ m v⊗v, eV: the kinetic part of the pressure tensor times the volume)."""
    weighted = batch.atomic_masses.unsqueeze(-1) * batch.velocities
    mv2 = (weighted * batch.velocities).sum()
    atoms = torch.tensor(float(batch.num_nodes), dtype=mv2.dtype, device=mv2.device)
    partials = {"mv2": mv2, "atoms": atoms}
    if tensor:
        partials["mvv"] = weighted.T @ batch.velocities
    return partials
