"""Shipped hooks: a neighbour-list hook, a thermo logger and a trajectory writer."""

from __future__ import annotations

import sys
from os import PathLike
from typing import TextIO

import ase.io
import ase.units
from ase.calculators.singlepoint import SinglePointCalculator
from ase.io import Trajectory
from ase.io.formats import filetype

from nvdd_plugins.dynamics.stages import DynamicsStage, HookContext
from nvdd_plugins.geometry import VerletNeighborList

__all__ = ["NeighborListHook", "ThermoLogger", "TrajectoryWriter", "temperature"]


def temperature(kinetic_energy: float, n_atoms: int) -> float:
    """Instantaneous temperature (K) from the kinetic energy (eV) of `n_atoms` atoms."""
    return 2.0 * kinetic_energy / (3.0 * max(n_atoms, 1) * ase.units.kB)


class NeighborListHook:
    """Keep the model-cutoff neighbour list on the batch (`edge_index`, `shifts`,
    `unit_shifts`) from a Verlet list at cutoff + skin, for the model and for other hooks.

    Attach it to the integrator. An evaluator that keeps its own list (its compute view
    already carries it) is left as it is.
    """

    stage = DynamicsStage.BEFORE_COMPUTE
    frequency = 1

    def __init__(self, cutoff: float, skin: float = 0.0) -> None:
        self.neighbors = VerletNeighborList(cutoff, skin)

    def __call__(self, ctx: HookContext, stage: DynamicsStage) -> None:
        """Refresh the list on `ctx.batch`."""
        if ctx.dynamics.evaluator.uses_batch_neighbors:
            self.neighbors.attach(ctx.batch)


class ThermoLogger:
    """Print step, time (fs), potential/kinetic/total energy (eV) and temperature (K) of the
    batch it is given (the whole system); with `cell`, also the volume (Å³) and the pressure
    (GPa, ideal-gas part included; needs the model's stress). Like ASE's `MDLogger`, the
    first row is the initial state (step 0), then every `frequency` steps."""

    stage = DynamicsStage.AFTER_STEP
    at_start = True

    def __init__(
        self, frequency: int = 10, stream: TextIO | None = None, cell: bool = False
    ) -> None:
        self.frequency = int(frequency)
        self.stream = stream
        self.cell = bool(cell)
        self._header_done = False

    def __call__(self, ctx: HookContext, stage: DynamicsStage) -> None:
        """Print one line (and the header before the first)."""
        stream = self.stream or sys.stdout
        batch = ctx.batch
        if not self._header_done:
            extra = f" {'V[A^3]':>11} {'P[GPa]':>9}" if self.cell else ""
            print(
                f"{'step':>8} {'time[fs]':>10} {'Epot[eV]':>14} {'Ekin[eV]':>12} "
                f"{'Etot[eV]':>14} {'T[K]':>9}{extra}",
                file=stream,
            )
            self._header_done = True
        kinetic = float(0.5 * (batch.atomic_masses * (batch.velocities**2).sum(-1)).sum())
        potential = float(batch.energy.sum())
        time_fs = ctx.step * ctx.dynamics.dt
        extra = ""
        if self.cell:
            volume = float(batch.cell[0].det().abs())
            virial = -float(batch.stress[0].trace()) / 3
            pressure = (virial + 2 * kinetic / (3 * volume)) / ase.units.GPa
            extra = f" {volume:11.2f} {pressure:9.4f}"
        print(
            f"{ctx.step:8d} {time_fs:10.2f} {potential:14.6f} {kinetic:12.6f} "
            f"{potential + kinetic:14.6f} {temperature(kinetic, batch.num_nodes):9.2f}{extra}",
            file=stream,
            flush=True,
        )


class TrajectoryWriter:
    """Append frames (positions, velocities, energy, forces) to an ASE-readable file
    (`.traj`, `.xyz`/`.extxyz`, ...), from the batch it is given (the whole system). Like an
    ASE trajectory attached to a dynamics, the first frame is the initial state (step 0),
    then one every `frequency` steps."""

    stage = DynamicsStage.AFTER_STEP
    at_start = True

    def __init__(self, path: str | PathLike[str], frequency: int = 10) -> None:
        self.path = path
        self.frequency = int(frequency)
        self._first = True

    def __call__(self, ctx: HookContext, stage: DynamicsStage) -> None:
        """Write the batch's systems as one or more frames."""
        batch = ctx.batch
        frames = batch.to_atoms()
        for g, atoms in enumerate(frames):
            lo, hi = int(batch.ptr[g]), int(batch.ptr[g + 1])
            atoms.calc = SinglePointCalculator(
                atoms,
                energy=float(batch.energy[g]),
                forces=batch.forces[lo:hi].detach().cpu().numpy(),
            )
        # Under mpirun ASE's defaults would make both writes a collective over its MPI world
        # that the other ranks never join (a RANK_ZERO hook runs on rank 0 only).
        if filetype(self.path, read=False) == "traj":  # ase.io.write(append=True) keeps frame 1
            with Trajectory(self.path, "w" if self._first else "a", master=True) as out:
                for atoms in frames:
                    out.write(atoms)
        else:
            ase.io.write(self.path, frames, append=not self._first, parallel=False)
        self._first = False
