"""`NPT` and `NPH`: Martyna–Tobias–Klein dynamics with a moving cell, as ASE's MTK.

`NPT` is ASE's `IsotropicMTKNPT` (isotropic) or `MTKNPT` (anisotropic: all nine cell
components), parameters in fs instead of ASE time; `NPH` is the same with neither the
particle nor the barostat thermostat. One reduction per step (Σ m v², the atom count and,
anisotropic, Σ m v⊗v after the second kick); the stress comes from the model (all-reduced
by the evaluator under `DomainParallel`). The cell is replicated: each rank writes the same
`batch.cell`, and the distributed evaluator follows it (a cell change rebuilds sub-domains
and ghosts, migrating atoms to their new owners).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ase.units
import torch

from nvdd_plugins.data import Batch
from nvdd_plugins.dynamics.barostat import (
    CellBarostat,
    FlexibleCell,
    IsotropicCell,
    barostat_chain,
)
from nvdd_plugins.dynamics.chain import NoseHooverChain
from nvdd_plugins.dynamics.integrators import _acceleration
from nvdd_plugins.dynamics.keywords import moved_keywords, require_value_of
from nvdd_plugins.dynamics.kinetic import KineticDynamics
from nvdd_plugins.dynamics.stages import Hook
from nvdd_plugins.models import BaseModelMixin

__all__ = ["NPH", "NPT", "MTKParameters"]


@dataclass(frozen=True)
class MTKParameters:
    """The time scales and chains of ASE's MTK dynamics (its names, times in fs).

    Attributes:
        tdamp: thermostat time scale, fs (typically 100 × dt).
        pdamp: barostat time scale, fs (typically 1000 × dt; sets the barostat mass).
        tchain, pchain: thermostat / barostat chain lengths.
        tloop, ploop: their sub-steps per half step.
    """

    tdamp: float
    pdamp: float
    tchain: int = 3
    pchain: int = 3
    tloop: int = 1
    ploop: int = 1


_MTK_NAMES = ("tdamp", "pdamp", "tchain", "pchain", "tloop", "ploop")
# earlier releases' keywords of NPT, as written in MTKParameters(...)
_MTK_MOVES = {name: f"{name}=..." for name in _MTK_NAMES}
_MTK_EXAMPLE = "MTKParameters(tdamp=100 * dt, pdamp=1000 * dt)"


class NPT(KineticDynamics):
    """Constant pressure and temperature: MTK barostat + Nosé–Hoover chains (ASE's
    `IsotropicMTKNPT`, or `MTKNPT` with `anisotropic=True`).

    Args:
        model: the model wrapper (must give stress).
        dt: time step, fs.
        temperature: target temperature, K (also sets the barostat mass).
        pressure: target pressure, eV/Å³ (ASE's `pressure_au`; 1 GPa = `ase.units.GPa`).
        mtk: the thermostat and barostat time scales and chains (`MTKParameters`).
        anisotropic: all nine cell components move (else the cell scales uniformly).
    """

    compute_properties = ("energy", "forces", "stress")
    thermostatted = True

    @moved_keywords("mtk", MTKParameters, _MTK_MOVES)
    def __init__(
        self,
        model: BaseModelMixin,
        dt: float,
        temperature: float,
        pressure: float,
        mtk: MTKParameters,
        anisotropic: bool = False,
        hooks: Sequence[Hook] = (),
        skin: float = 0.0,
    ) -> None:
        require_value_of(mtk, MTKParameters, type(self).__name__, "mtk", _MTK_EXAMPLE)
        super().__init__(model, dt, hooks, skin, kinetic_tensor=anisotropic)
        if temperature < 0 or not mtk.pdamp > 0 or (self.thermostatted and not mtk.tdamp > 0):
            raise ValueError("need temperature >= 0 K and tdamp, pdamp > 0 fs")
        if min(mtk.tchain, mtk.pchain, mtk.tloop, mtk.ploop) < 1:
            raise ValueError("chain lengths and loops must be >= 1")
        self.temperature = float(temperature)
        self.pressure = float(pressure)
        self.mtk = mtk
        self.anisotropic = bool(anisotropic)
        self.barostat: CellBarostat | None = None
        self.thermostat: NoseHooverChain | None = None
        self.barostat_chain: NoseHooverChain | None = None

    def check_fields(self, batch: Batch) -> None:
        """Also: one system with a cell of non-zero volume."""
        super().check_fields(batch)
        if batch.num_graphs != 1 or float(torch.linalg.det(batch.cell[0]).abs()) == 0.0:
            raise ValueError(f"{type(self).__name__} needs one system with a 3-D cell")

    def _setup(self, cell: torch.Tensor, atoms: float) -> CellBarostat:
        """Build the cell variables (from `cell`) and chains at the first step (they need
        the global atom count)."""
        if self.barostat is None:
            kt = ase.units.kB * self.temperature
            mtk = self.mtk
            pdamp = mtk.pdamp * ase.units.fs
            kind = FlexibleCell if self.anisotropic else IsotropicCell
            self.barostat = kind(cell, atoms, kt, pdamp, self.pressure)
            if self.thermostatted:
                tdamp = mtk.tdamp * ase.units.fs
                dof = 3.0 * atoms
                self.thermostat = NoseHooverChain.with_damping(
                    dof, kt, tdamp, mtk.tchain, dof, mtk.tloop
                )
                self.barostat_chain = barostat_chain(
                    self.barostat, kt, pdamp, mtk.pchain, mtk.ploop
                )
        return self.barostat

    def _chains(self, sums: dict[str, torch.Tensor], delta: float, barostat_first: bool) -> float:
        """The barostat chain and the particle chain over `delta` (ASE's order); returns
        the velocity scale factor and scales the kinetic sums in place."""
        if self.thermostat is None:
            return 1.0
        if barostat_first:
            self._barostat_chain(delta)
        scale = self.thermostat.half_step(float(sums["mv2"]), delta)
        for name in ("mv2", "mvv"):
            if name in sums:
                sums[name] = sums[name] * scale**2
        if not barostat_first:
            self._barostat_chain(delta)
        return scale

    def _barostat_chain(self, delta: float) -> None:
        cell = self.barostat
        cell.scale_momentum(self.barostat_chain.half_step(cell.twice_kinetic(), delta))

    def pre_update(self, batch: Batch) -> None:
        """Chains, cell kick, particle kick, particle and cell drift (first half of ASE's
        MTK step)."""
        dt = self.dt_internal
        sums = self.kinetic.start(batch, self.reduce_sums)
        atoms = float(sums["atoms"])
        cell = self._setup(batch.cell[0], atoms)
        velocities = batch.velocities * self._chains(sums, 0.5 * dt, barostat_first=True)
        cell.kick(0.5 * dt, batch.stress[0], sums)
        velocities = cell.kick_velocities(velocities, _acceleration(batch), 0.5 * dt, atoms)
        batch.velocities = velocities
        batch.positions = cell.drift_positions(batch.positions, velocities, dt)
        cell.drift_cell(dt)
        batch.cell = cell.cell().unsqueeze(0).to(batch.cell)

    def post_update(self, batch: Batch) -> None:
        """Particle kick, (one reduction) cell kick, chains."""
        dt, cell = self.dt_internal, self.barostat
        atoms = float(self.kinetic.sums["atoms"])
        velocities = cell.kick_velocities(batch.velocities, _acceleration(batch), 0.5 * dt, atoms)
        batch.velocities = velocities
        sums = self.end_of_step_sums(batch)
        cell.kick(0.5 * dt, batch.stress[0], sums)
        scale = self._chains(dict(sums), 0.5 * dt, barostat_first=False)
        batch.velocities = velocities * scale
        self.kinetic.carry(sums, scale)

    def conserved_energy(self, batch: Batch) -> float:
        """Potential + kinetic + chain + cell kinetic energy + P·V (eV) of the whole
        system; collective under `DomainParallel` (reduces the kinetic energy)."""
        total = float(batch.energy.sum()) + self.kinetic_energy(batch)
        volume = float(torch.linalg.det(batch.cell[0]).abs())
        if self.barostat is not None:
            total += self.barostat.energy()
        for chain in (self.thermostat, self.barostat_chain):
            total += 0.0 if chain is None else chain.energy()
        return total + self.pressure * volume

    def state_dict(self) -> dict[str, Any]:
        """Step count, atom count, cell variables and chains."""
        state = super().state_dict()
        if self.barostat is not None:
            state["atoms"] = self.barostat.atoms
            state["barostat"] = self.barostat.state_dict()
            for name in ("thermostat", "barostat_chain"):
                chain = getattr(self, name)
                if chain is not None:
                    state[name] = chain.state_dict()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what `state_dict` returned (the cell itself is the batch's); the kinetic
        sums are reduced afresh."""
        super().load_state_dict(state)
        self.barostat = self.thermostat = self.barostat_chain = None
        self.forget_globals()
        if "barostat" not in state:
            return
        saved = state["barostat"]
        cell = saved["h"] if self.anisotropic else saved["cell0"]
        self._setup(cell, float(state["atoms"])).load_state_dict(saved)
        for name in ("thermostat", "barostat_chain"):
            if name in state:
                getattr(self, name).load_state_dict(state[name])


class NPH(NPT):
    """Constant pressure and enthalpy: the MTK barostat of `NPT` without thermostats.

    Args:
        model: the model wrapper (must give stress).
        dt: time step, fs.
        pressure: target pressure, eV/Å³.
        pdamp: barostat time scale, fs.
        temperature: sets the barostat mass W only (as in `NPT`), K.
        anisotropic: all nine cell components move (else the cell scales uniformly).
    """

    thermostatted = False

    def __init__(
        self,
        model: BaseModelMixin,
        dt: float,
        pressure: float,
        pdamp: float,
        temperature: float,
        anisotropic: bool = False,
        hooks: Sequence[Hook] = (),
        skin: float = 0.0,
    ) -> None:
        super().__init__(
            model,
            dt,
            temperature,
            pressure,
            MTKParameters(tdamp=0.0, pdamp=pdamp),
            anisotropic=anisotropic,
            hooks=hooks,
            skin=skin,
        )
