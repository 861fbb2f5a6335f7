"""`LennardJonesModel`: single-species Lennard-Jones on the opaque `nvdd::lennard_jones` op."""

from __future__ import annotations

import math

import torch
from torch import nn

import nvdd_plugins.kernels  # noqa: F401  (registers torch.ops.nvdd.lennard_jones)
from nvdd_plugins.config import StrategyKind
from nvdd_plugins.data import Batch
from nvdd_plugins.models.base import BaseModelMixin, ModelConfig, NeighborConfig
from nvdd_plugins.models.requested import asked_for
from nvdd_plugins.spec import SPEC_LJ_HALO, MLIPSpec, for_strategy

__all__ = ["SPEC_LJ_HALO", "LennardJonesModel"]


class LennardJonesModel(nn.Module, BaseModelMixin):
    """Lennard-Jones, 4 epsilon ((sigma/r)^12 - (sigma/r)^6), for r < cutoff.

    Args:
        epsilon: well depth, eV.
        sigma: zero-crossing distance, Å.
        cutoff: interaction cutoff, Å.
        shift: subtract the pair energy at the cutoff, as ASE's `LennardJones(rc=cutoff)`
            and LAMMPS `lj/cut` with `pair_modify shift yes` do.

    Forces and stress come straight from the kernel (no autograd), so under domain
    decomposition it declares `SPEC_LJ_HALO`.
    """

    def __init__(self, epsilon: float, sigma: float, cutoff: float, shift: bool = False) -> None:
        super().__init__()
        if not all(math.isfinite(v) and v > 0 for v in (epsilon, sigma)):
            raise ValueError(
                f"epsilon (eV) and sigma (Å) must be finite and positive, got {epsilon!r} "
                f"and {sigma!r}"
            )
        self.epsilon, self.sigma, self.shift = float(epsilon), float(sigma), bool(shift)
        self.model_config = ModelConfig(
            neighbor_config=NeighborConfig(cutoff=float(cutoff), accepts_skin_pairs=True),
        )

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        """Energies (eV), forces (eV/Å) and, unless the evaluation asks for neither
        (`nvdd_plugins.models.asked_for`), stress and per-atom stresses (eV/Å³; NaN for a
        system without a cell volume)."""
        inputs = self.adapt_input(batch)
        with_virials = asked_for("stress", "stresses")
        energies, forces, virials = torch.ops.nvdd.lennard_jones(
            inputs.positions,
            inputs.edge_index,
            inputs.shifts,
            self.epsilon,
            self.sigma,
            self.cutoff,
            self.shift,
            with_virials,
        )
        per_graph = inputs.positions.new_zeros(inputs.num_graphs)
        out = {
            "energies": energies,
            "energy": per_graph.index_add_(0, inputs.batch_idx, energies),
            "forces": forces,
        }
        if not with_virials:
            return out
        volume = torch.linalg.det(inputs.cell).abs()
        volume = torch.where(volume > 0, volume, torch.nan)  # no stress without a cell volume
        virial = virials.new_zeros(inputs.num_graphs, 3, 3).index_add_(0, inputs.batch_idx, virials)
        out["stress"] = virial / volume.view(-1, 1, 1)
        out["stresses"] = virials / volume[inputs.batch_idx].view(-1, 1, 1)
        return out

    def distribution_spec(self, strategy: StrategyKind | None = None) -> MLIPSpec | None:
        """`SPEC_LJ_HALO`, with the storage policy of `strategy`."""
        return for_strategy(SPEC_LJ_HALO, strategy)
