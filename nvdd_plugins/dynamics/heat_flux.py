"""`HeatFluxLogger`: the heat flux J(t) of the whole system along a trajectory, for
Green–Kubo thermal conductivities (docs/heat_flux.md).

At the end of each step the hook reads its batch's velocities and the step's per-atom
energies and heat-flux tensors (`HEAT_FLUX_TENSORS`, evaluated at the step's positions
because the hook asks for them: `requires`), so J belongs to one instant: positions,
energies and velocities of the step's end. The partial sums of the batch's atoms are
reduced by the dynamics' `reduce_sums`: the batch itself in one process, one all-reduce of
six numbers per step under `DomainParallel` (attach the hook there with the LOCAL scope,
its default for this hook).
"""

from __future__ import annotations

from typing import TextIO

import torch

from nvdd_plugins.dynamics.stages import DynamicsStage, HookContext
from nvdd_plugins.models import HEAT_FLUX_TENSORS, heat_flux_parts

__all__ = ["HeatFluxLogger"]


class HeatFluxLogger:
    """Record the heat flux of the whole system every `frequency` steps: its convective
    part sum_i e_i v_i and its potential part sum_i W_i v_i (eV Å/fs, not divided by the
    volume), the same on every rank.

    Args:
        frequency: steps between records (1 for Green–Kubo).
        stream: where to print one line per record (time fs, both parts), e.g. on one
            rank only; None: nothing is printed.

    Attributes:
        times: the recorded times, fs.
        convective, potential: the recorded parts, one (3,) tensor per record.
    """

    stage = DynamicsStage.AFTER_STEP
    requires = (HEAT_FLUX_TENSORS,)

    def __init__(self, frequency: int = 1, stream: TextIO | None = None) -> None:
        self.frequency = int(frequency)
        self.stream = stream
        self.times: list[float] = []
        self.convective: list[torch.Tensor] = []
        self.potential: list[torch.Tensor] = []

    def __call__(self, ctx: HookContext, stage: DynamicsStage) -> None:
        """Record the flux of the step that just ended (collective under DomainParallel)."""
        tensors, batch = ctx.results.get(HEAT_FLUX_TENSORS), ctx.batch
        if tensors is None or tensors.shape[0] != batch.num_nodes:
            raise RuntimeError(
                "HeatFluxLogger needs the step's heat-flux tensors of the atoms it is given: "
                "attach it to the dynamics or its DomainParallel (which ask the model for "
                "them), and do not give it DomainParallel scope RANK_ZERO or GLOBAL (its "
                "batch is then the gathered system, the results this rank's)"
            )
        convective, potential = heat_flux_parts(
            ctx.results["energies"], batch.atomic_masses, batch.velocities, tensors
        )
        sums = ctx.dynamics.reduce_sums({"convective": convective, "potential": potential})
        time_fs = ctx.step * ctx.dynamics.dt
        self.times.append(time_fs)
        self.convective.append(sums["convective"].detach().cpu())
        self.potential.append(sums["potential"].detach().cpu())
        if self.stream is not None:
            values = " ".join(f"{float(x): .8e}" for x in (*sums["convective"], *sums["potential"]))
            print(f"{time_fs:.3f} {values}", file=self.stream, flush=True)

    def series(self) -> dict[str, torch.Tensor]:
        """The records so far: "time" (T,) fs and "convective", "potential", "total"
        (T, 3) eV Å/fs."""
        convective = torch.stack(self.convective) if self.convective else torch.zeros(0, 3)
        potential = torch.stack(self.potential) if self.potential else torch.zeros(0, 3)
        times = torch.tensor(self.times, dtype=torch.float64)
        return {
            "time": times,
            "convective": convective,
            "potential": potential,
            "total": convective + potential,
        }
