"""`KineticDynamics`: the base of integrators driven by the global kinetic energy.

A thermostat or barostat needs Σ m v² at the start of a step and again after the second
kick. Velocities change between the two only by the integrator's own updates, and after the
end-of-step thermostat only by a known scale factor, so the end-of-step reduction is carried
over to the next start: one reduction per step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from nvdd_plugins.data import Batch
from nvdd_plugins.dynamics.base import BaseDynamics
from nvdd_plugins.dynamics.reduction import SumReducer, kinetic_partials
from nvdd_plugins.dynamics.stages import Hook
from nvdd_plugins.models import BaseModelMixin

__all__ = ["CarriedKinetic", "KineticDynamics"]


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


class KineticDynamics(BaseDynamics):
    """An integrator of atoms with velocities whose global quantities are the kinetic sums
    (`kinetic_partials`) carried by `self.kinetic`.

    Args: as `BaseDynamics`, and `kinetic_tensor`: also carry Σ m v⊗v.
    """

    required_fields = ("positions", "atomic_numbers", "atomic_masses", "velocities")

    def __init__(
        self,
        model: BaseModelMixin,
        dt: float,
        hooks: Sequence[Hook] = (),
        skin: float = 0.0,
        kinetic_tensor: bool = False,
    ) -> None:
        super().__init__(model, dt, hooks, skin)
        self.kinetic = CarriedKinetic(type(self).__name__, tensor=kinetic_tensor)

    def end_of_step_sums(self, batch: Batch) -> dict[str, torch.Tensor]:
        """The step's one reduction: the kinetic sums of `batch` now, checked against what
        the step started from."""
        sums = self.reduce_sums(self.kinetic.partials(batch))
        self.kinetic.check(sums)
        return sums

    def forget_globals(self) -> None:
        """Reduce the kinetic sums afresh at the next step (call after changing the
        velocities between steps)."""
        self.kinetic.forget()

    def kinetic_energy(self, batch: Batch) -> float:
        """The whole system's kinetic energy, eV (collective under `DomainParallel`)."""
        return 0.5 * float(self.reduce_sums(kinetic_partials(batch))["mv2"])
