"""`DFTD3Model`: Grimme's DFT-D3 dispersion with Becke-Johnson (rational) damping, two-body,
as an nvdd model wrapper on the edge list.

The reference C6 coefficients, the coordination-number references, the counting and
weighting functions and the damping function are tad-dftd3's (the torch D3 of the dftd3
project: the `d3` extra); the sums over pairs are written here, on nvdd's edges, so that
domain decomposition sees them: the coordination numbers are an `index_add_` onto the
centre atoms (the halo refreshes their ghost rows, so every pair's two coordination numbers
are exact with a ghost shell of one cutoff), then each pair's energy goes half onto each of
its atoms. docs/long_range.md, "Dispersion (DFT-D3)".
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from ase import units
from torch import nn

from nvdd_plugins.config import StrategyKind
from nvdd_plugins.data import Batch
from nvdd_plugins.models.base import (
    BaseModelMixin,
    ModelConfig,
    NeighborConfig,
    host_checks_allowed,
)
from nvdd_plugins.spec import ENERGY_KINDS, DistributionSpec, MLIPSpec, for_strategy

__all__ = ["DFTD3Model", "dftd3_spec"]

D3_CUTOFF = 60.0 * units.Bohr
"""simple-dftd3's default cutoff of the two-body sum, 60 Bohr (Å)."""

D3_CN_CUTOFF = 40.0 * units.Bohr
"""simple-dftd3's default cutoff of the coordination numbers, 40 Bohr (Å)."""


def dftd3_spec(strategy: StrategyKind | None = None) -> MLIPSpec:
    """The spec of `DFTD3Model`: pair sums onto `edge_index[0]`, refreshed in the halo;
    two layers (the coordination numbers, then the pair energies)."""
    distribution = DistributionSpec(edge_target_row=0)
    return for_strategy(
        MLIPSpec(distribution=distribution, output_kinds=ENERGY_KINDS, n_layers=2), strategy
    )


class DFTD3Model(nn.Module, BaseModelMixin):
    """DFT-D3(BJ) two-body dispersion (no three-body term), in eV.

    Args:
        a1, a2, s8: the functional's Becke-Johnson parameters (`a2` in Bohr, as published:
            e.g. PBE a1=0.4289, a2=4.4407, s8=0.7875; wB97M a1=0.5660, a2=3.1280,
            s8=0.3908).
        s6: scaling of the C6 term (1 for most functionals).
        cutoff: the two-body sum's cutoff, Å (simple-dftd3: 60 Bohr, 31.8 Å).
        cn_cutoff: the coordination numbers' cutoff, Å (simple-dftd3: 40 Bohr, 21.2 Å).
        dtype: of the parameters and the computation.

    Forces and stress by autograd. The model's cutoff is the larger of the two.
    """

    def __init__(
        self,
        a1: float,
        a2: float,
        s8: float,
        s6: float = 1.0,
        cutoff: float = D3_CUTOFF,
        cn_cutoff: float = D3_CN_CUTOFF,
        dtype: torch.dtype = torch.float64,
    ) -> None:
        super().__init__()
        import tad_dftd3  # optional dependency: the d3 extra
        from tad_mctc.data.radii import COV_D3

        reference = tad_dftd3.reference.Reference(dtype=dtype)
        self.register_buffer("c6_reference", reference.c6, persistent=False)  # (Z, Z, 7, 7)
        self.register_buffer("cn_reference", reference.cn, persistent=False)  # (Z, 7)
        self.register_buffer("rcov", COV_D3(dtype=dtype), persistent=False)  # Bohr, x 4/3
        self.register_buffer("r4r2", tad_dftd3.data.R4R2(dtype=dtype), persistent=False)
        self.param = {
            name: torch.tensor(v, dtype=dtype)
            for name, v in zip(("a1", "a2", "s6", "s8"), (a1, a2, s6, s8), strict=True)
        }
        self.d3_cutoff, self.cn_cutoff = float(cutoff), float(cn_cutoff)
        neighbors = NeighborConfig(cutoff=max(self.d3_cutoff, self.cn_cutoff))
        self.model_config = ModelConfig.by_autograd(neighbors)

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        """Per-atom dispersion energies (eV) and the per-system energy."""
        import tad_dftd3

        inputs = self.adapt_input(batch)
        numbers = inputs.atomic_numbers.long()
        if host_checks_allowed() and numbers.numel():
            known = self.c6_reference.shape[0] - 1
            if int(numbers.max()) > known or int(numbers.min()) < 1:
                raise ValueError(f"DFT-D3 has parameters for the elements 1 to {known}")
        x = inputs.positions.to(self.rcov.dtype) / units.Bohr
        # every pair is computed and the ones past a cutoff are zeroed (torch.where), not
        # selected: no boolean compaction, which costs more than the arithmetic it saves
        i, j = inputs.edge_index
        z_i, z_j = numbers.index_select(0, i), numbers.index_select(0, j)
        vectors = x.index_select(0, j) - x.index_select(0, i) + inputs.shifts / units.Bohr
        r = torch.linalg.vector_norm(vectors, dim=-1)
        n = x.shape[0]
        counts = tad_dftd3.ncoord.exp_count(r, self.rcov[z_i] + self.rcov[z_j])
        counts = torch.where(r < self.cn_cutoff / units.Bohr, counts, 0.0)
        cn = x.new_zeros(n).index_add_(0, i, counts)  # an aggregation onto atoms
        reference = SimpleNamespace(cn=self.cn_reference)
        weights = tad_dftd3.model.weight_references(
            numbers, cn, reference, tad_dftd3.model.gaussian_weight
        ).to(x.dtype)
        # C6_ij = w_i . C6ref[Z_i, Z_j] . w_j, contracted per atom and partner element first
        # (memory per pair: 7 numbers, not 49)
        elements, kind = torch.unique(numbers, return_inverse=True)
        table = self.c6_reference[elements][:, elements].to(x.dtype)[kind]  # (n, elements, 7, 7)
        partial = torch.einsum("na,ntab->ntb", weights, table).flatten(0, 1)
        at_partner = partial.index_select(0, i * elements.numel() + kind.index_select(0, j))
        c6 = (at_partner * weights.index_select(0, j)).sum(dim=-1)
        qq = 3.0 * self.r4r2[z_i] * self.r4r2[z_j]
        param = {k: v.to(x) for k, v in self.param.items()}
        damping = tad_dftd3.damping.rational_damping
        pair = param["s6"] * damping(6, r, qq, param) + param["s8"] * qq * damping(8, r, qq, param)
        pair = torch.where(r < self.d3_cutoff / units.Bohr, c6 * pair, 0.0)
        energies = x.new_zeros(n).index_add_(0, i, -0.5 * units.Hartree * pair)
        energies = energies.to(inputs.positions.dtype)
        energy = energies.new_zeros(inputs.num_graphs).index_add_(0, inputs.batch_idx, energies)
        return {"energies": energies, "energy": energy}

    def distribution_spec(self, strategy: StrategyKind | None = None) -> MLIPSpec | None:
        """`dftd3_spec(strategy)`."""
        return dftd3_spec(strategy)
