"""`VariableCellFIRE`: FIRE over atoms and cell, as ASE's `FIRE(UnitCellFilter(atoms))`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ase.units
import torch

from nvdd_plugins.data import Batch
from nvdd_plugins.dynamics.fire import FIRE, FIRE_MOVES, FIRESettings
from nvdd_plugins.dynamics.keywords import moved_keywords
from nvdd_plugins.dynamics.stages import Hook
from nvdd_plugins.models import BaseModelMixin

__all__ = ["VariableCellFIRE"]


class VariableCellFIRE(FIRE):
    """Relax positions and cell with FIRE in ASE's `UnitCellFilter` coordinates.

    With F the deformation gradient from the initial cell h0 (h = h0 Fᵀ), the atoms move in
    undeformed coordinates u = x F⁻ᵀ under forces f F, and the cell as three extra rows
    c·F (c = `cell_factor`) under the virial −V(σ + P·1) F⁻ᵀ / c. The cell rows, their
    FIRE velocity and h0 are replicated; their share of v·f, v·v, f·f and of the
    convergence test is added once to the atoms' reduced sums. Converged when every atom's
    and every cell row's generalized force is below `fmax`.

    Args:
        model: the model wrapper (must give stress).
        pressure: target (scalar) pressure, eV/Å³.
        cell_factor: c (default: the number of atoms, as ASE).
        the rest: as `FIRE`.
    """

    compute_properties = ("energy", "forces", "stress")

    @moved_keywords("settings", FIRESettings, FIRE_MOVES)
    def __init__(
        self,
        model: BaseModelMixin,
        dt: float = 0.1 / ase.units.fs,
        fmax: float = 0.05,
        pressure: float = 0.0,
        cell_factor: float | None = None,
        settings: FIRESettings | None = None,
        hooks: Sequence[Hook] = (),
        skin: float = 0.0,
    ) -> None:
        super().__init__(model, dt, fmax, settings, hooks=hooks, skin=skin)
        self.pressure = float(pressure)
        self.cell_factor = None if cell_factor is None else float(cell_factor)
        self.cell0: torch.Tensor | None = None
        self.cell_velocity: torch.Tensor | None = None
        self._cell_force: torch.Tensor | None = None

    def _deformation(self, batch: Batch) -> torch.Tensor:
        """F with h = h0 Fᵀ (h0: the cell at the first step)."""
        cell = batch.cell[0]
        if self.cell0 is None:
            self.cell0 = cell.detach().clone()
            self.cell_velocity = torch.zeros_like(cell)
        return torch.linalg.solve(self.cell0, cell).T

    def forces_of(self, batch: Batch) -> torch.Tensor:
        """f F: the atoms' forces in undeformed coordinates."""
        return batch.forces @ self._deformation(batch)

    def replicated_sums(self, batch: Batch, atoms: float) -> dict[str, float]:
        """The cell rows' share of v·f, v·v, f·f and of the rows with |f| >= fmax."""
        if self.cell_factor is None:
            self.cell_factor = atoms
        deformation = self._deformation(batch)
        cell = batch.cell[0]
        volume = torch.linalg.det(cell).abs()
        eye = torch.eye(3, dtype=cell.dtype, device=cell.device)
        virial = -volume * (batch.stress[0] + self.pressure * eye)
        force = torch.linalg.solve(deformation, virial.T).T / self.cell_factor
        self._cell_force = force
        velocity = self.cell_velocity
        above = torch.linalg.vector_norm(force, dim=-1) >= self.fmax
        return {
            "vf": float((velocity * force).sum()),
            "vv": float(velocity.square().sum()),
            "ff": float(force.square().sum()),
            "unconverged": float(above.sum()),
        }

    def move(self, batch: Batch, factor: float, keep: float, push: float) -> None:
        """Advance the cell rows and the undeformed positions, then map both back."""
        deformation = self._deformation(batch)
        self.cell_velocity = keep * self.cell_velocity + push * self._cell_force
        undeformed = torch.linalg.solve(deformation, batch.positions.T).T
        undeformed = undeformed + factor * batch.fire_velocities
        rows = self.cell_factor * deformation + factor * self.cell_velocity
        stretch = (rows / self.cell_factor).T  # the new Fᵀ
        batch.cell = (self.cell0 @ stretch).unsqueeze(0)
        batch.positions = undeformed @ stretch

    def state_dict(self) -> dict[str, Any]:
        """FIRE's state plus h0, the cell velocity and the cell factor."""
        state = super().state_dict()
        if self.cell0 is not None:
            state.update(
                cell0=self.cell0.cpu(),
                cell_velocity=self.cell_velocity.cpu(),
                cell_factor=self.cell_factor,
            )
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what `state_dict` returned."""
        super().load_state_dict(state)
        if "cell0" in state:
            self.cell0 = state["cell0"].clone()
            self.cell_velocity = state["cell_velocity"].clone()
            self.cell_factor = state["cell_factor"]
