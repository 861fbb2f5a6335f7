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

import math
from collections.abc import Mapping
from typing import Protocol

import torch

from nvdd_plugins.data import Batch

__all__ = ["CarriedKinetic", "SumReducer", "kinetic_partials", "local_sums"]


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


class CarriedKinetic:
    """Kinetic sums carried from the end of one step to the start of the next, so a
    thermostat reduces once per step instead of twice.

    `start` returns the kinetic sums ("mv2", "atoms", with `tensor` "mvv") of the velocities
    at the start of a step, reducing only on the first step or after `forget`; the
    end-of-step reduction must include `partials()` ("mv2_start", this rank's share of what
    `start` returned) and go to `check`: when velocities were changed between steps outside
    the integrator (a hook, a restart) the two disagree and every rank raises instead of
    running on a stale value.
    """

    def __init__(self, owner: str, tensor: bool = False) -> None:
        self.owner = owner
        self.tensor = tensor
        self.sums: dict[str, torch.Tensor] | None = None
        self._expected = 0.0
        self._start: torch.Tensor | None = None

    def start(self, batch: Batch, reduce: SumReducer) -> dict[str, torch.Tensor]:
        """The global kinetic sums of `batch`'s velocities now."""
        partials = kinetic_partials(batch, self.tensor)
        self._start = partials["mv2"]
        if self.sums is None:
            self.sums = reduce(partials)
        self._expected = float(self.sums["mv2"])
        return dict(self.sums)

    def partials(self, batch: Batch) -> dict[str, torch.Tensor]:
        """This rank's kinetic partials of `batch` now, and its "mv2_start"."""
        if self._start is None:
            raise RuntimeError(f"{self.owner}: start() must run before the end of a step")
        return {**kinetic_partials(batch, self.tensor), "mv2_start": self._start}

    def check(self, reduced: dict[str, torch.Tensor]) -> None:
        """Raise if the reduced "mv2_start" differs from what the step started from."""
        fresh = float(reduced["mv2_start"])
        if not math.isclose(fresh, self._expected, rel_tol=1e-9, abs_tol=1e-300):
            raise RuntimeError(
                f"{self.owner}: the velocities changed between steps outside the integrator "
                f"(Σ m v² {fresh!r} eV, carried {self._expected!r} eV); call "
                "forget_globals() on the integrator after changing them"
            )

    def carry(self, reduced: dict[str, torch.Tensor], scale: float) -> None:
        """Keep the end-of-step sums, for velocities since scaled by `scale`."""
        kept = ("mv2", "atoms", "mvv")
        self.sums = {
            k: v * scale**2 if k != "atoms" else v for k, v in reduced.items() if k in kept
        }

    def forget(self) -> None:
        """Reduce afresh at the next start."""
        self.sums = None
