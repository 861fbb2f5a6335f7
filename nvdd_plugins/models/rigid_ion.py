"""`RigidIonModel`: fixed point charges with Ewald or PME electrostatics plus a
Born-Mayer-Huggins short-range repulsion (e.g. molten or crystalline NaCl), LAMMPS's
`pair_style born/coul/long` with `kspace_style ewald` or `pppm`.

Everything within the cutoff is a pair sum onto atoms (refreshed in the halo like any
aggregation); the reciprocal-space part is a global sum, distributed by `rigid_ion_spec`
(docs/long_range.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import astuple, dataclass
from itertools import combinations_with_replacement

import torch
from torch import nn

from nvdd_plugins.config import StrategyKind
from nvdd_plugins.data import Batch
from nvdd_plugins.models.base import (
    BaseModelMixin,
    ModelConfig,
    NeighborConfig,
    host_checks_allowed,
)
from nvdd_plugins.models.ewald import (
    COULOMB_CONSTANT,
    Ewald,
    real_space_pair_energies,
    require_one_periodic_system,
    self_energies,
)
from nvdd_plugins.models.pme import PME
from nvdd_plugins.models.species import require_species, species_lookup
from nvdd_plugins.spec import (
    ENERGY_KINDS,
    GLOBAL_SUM_ADAPTERS,
    DistributionSpec,
    MLIPSpec,
    OutputKind,
    for_strategy,
)

__all__ = [
    "NACL_CHARGES",
    "TOSI_FUMI_NACL",
    "BornMayerHuggins",
    "RigidIonModel",
    "rigid_ion_spec",
]


@dataclass(frozen=True)
class BornMayerHuggins:
    """Pair energy a exp((sigma - r) / rho) - c / r^6 + d / r^8 (eV with r in Å): LAMMPS
    `pair_style born` coefficients `A rho sigma C D` in metal units."""

    a: float
    rho: float
    sigma: float
    c: float
    d: float = 0.0


NACL_CHARGES = {11: 1.0, 17: -1.0}
"""Formal charges of Na and Cl (e)."""

TOSI_FUMI_NACL = {
    (11, 11): BornMayerHuggins(0.263704, 0.317, 2.340, 1.048574, -0.499321),
    (11, 17): BornMayerHuggins(0.210963, 0.317, 2.755, 6.990490, -8.675698),
    (17, 17): BornMayerHuggins(0.158222, 0.317, 3.170, 72.401505, -145.427161),
}
"""Tosi and Fumi's (1964) NaCl pairs in LAMMPS `born` form: a = b c_ij (b = 0.338e-19 J,
c = 1.25, 1, 0.75), sigma = sigma_i + sigma_j (1.170 and 1.585 Å), rho = 0.317 Å, c and d
from 1e-79 J m^6 and 1e-99 J m^8 (d < 0: the form adds d / r^8)."""


def _born(
    a: torch.Tensor,
    rho: torch.Tensor,
    sigma: torch.Tensor,
    c: torch.Tensor,
    d: torch.Tensor,
    r: torch.Tensor,
) -> torch.Tensor:
    """`BornMayerHuggins` energies (eV) at distances `r` (Å), coefficients as tensors."""
    return a * torch.exp((sigma - r) / rho) - c / r**6 + d / r**8


def rigid_ion_spec(strategy: StrategyKind | None = None) -> MLIPSpec:
    """The spec of a model with a reciprocal-space sum: `GLOBAL_SUM_ADAPTERS` (owned atoms'
    structure factors or charge mesh, all-reduced), per-atom "charges"; no `n_layers` (the
    reciprocal sum reaches every atom: no ghost shell serves without the all-reduce)."""
    distribution = DistributionSpec(custom_ops=GLOBAL_SUM_ADAPTERS)
    kinds = {**ENERGY_KINDS, "charges": OutputKind.PER_NODE}
    return for_strategy(MLIPSpec(distribution=distribution, output_kinds=kinds), strategy)


class RigidIonModel(nn.Module, BaseModelMixin):
    """Point charges by element with Ewald or PME Coulomb and Born-Mayer-Huggins pairs.

    Args:
        charges: atomic number -> charge (e).
        pairs: (atomic number, atomic number) -> `BornMayerHuggins`, for every pair of
            elements in `charges` (either order).
        cutoff: real-space cutoff of the pairs and the screened Coulomb term, Å.
        electrostatics: `Ewald` or `PME` (their `alpha` screens the real-space term).
        coulomb_constant: 1 / (4 pi epsilon_0) in eV Å / e².
        shift: subtract each Born-Mayer-Huggins pair's energy at the cutoff (LAMMPS's
            `pair_modify shift yes`), so no energy jumps as pairs cross it in MD.

    One fully periodic system per batch. Forces and stress by autograd; per-atom virials
    are not defined (the reciprocal sum is not a sum over pairs).
    """

    def __init__(
        self,
        charges: Mapping[int, float],
        pairs: Mapping[tuple[int, int], BornMayerHuggins],
        cutoff: float,
        electrostatics: Ewald | PME,
        coulomb_constant: float = COULOMB_CONSTANT,
        shift: bool = False,
    ) -> None:
        super().__init__()
        if not isinstance(electrostatics, Ewald | PME):
            raise TypeError(f"electrostatics must be Ewald or PME, got {electrostatics!r}")
        elements = sorted(charges)
        table = torch.zeros(5, len(elements), len(elements), dtype=torch.float64)
        for a, b in combinations_with_replacement(range(len(elements)), 2):
            za, zb = elements[a], elements[b]
            term = pairs.get((za, zb), pairs.get((zb, za)))
            if term is None:
                raise ValueError(f"no Born-Mayer-Huggins term for the element pair ({za}, {zb})")
            table[:, a, b] = table[:, b, a] = torch.tensor(astuple(term), dtype=torch.float64)
        offset = _born(*table, torch.tensor(float(cutoff))) if shift else torch.zeros_like(table[0])
        self.register_buffer("born_table", torch.cat([table, offset[None]]), persistent=False)
        self.electrostatics = electrostatics
        self.coulomb_constant = float(coulomb_constant)
        self.model_config = ModelConfig(
            autograd_outputs=frozenset({"forces", "stress"}),
            autograd_inputs=frozenset({"positions"}),
            neighbor_config=NeighborConfig(cutoff=float(cutoff)),
            edge_energy=False,
        )
        lookup = species_lookup({z: s for s, z in enumerate(elements)}, torch.device("cpu"))
        self.register_buffer("species_index", lookup, persistent=False)
        charge_table = torch.tensor([float(charges[z]) for z in elements], dtype=torch.float64)
        self.register_buffer("charge_table", charge_table, persistent=False)

    @classmethod
    def nacl(cls, cutoff: float, electrostatics: Ewald | PME, shift: bool = False) -> RigidIonModel:
        """Rock-salt NaCl: formal charges and Tosi-Fumi pairs (`TOSI_FUMI_NACL`)."""
        return cls(NACL_CHARGES, TOSI_FUMI_NACL, cutoff, electrostatics, shift=shift)

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        """Per-atom energies (eV), the system's energy and per-atom charges (e)."""
        inputs = self.adapt_input(batch)
        if host_checks_allowed():
            require_species(self.species_index, inputs.atomic_numbers, "rigid-ion")
        require_one_periodic_system(inputs, "RigidIonModel")
        x, n = inputs.positions, inputs.positions.shape[0]
        species = self.species_index[inputs.atomic_numbers]
        charges = self.charge_table.to(x.dtype)[species]
        i, j = inputs.edge_index
        distances = torch.linalg.vector_norm(x[j] - x[i] + inputs.shifts, dim=-1)
        within = distances < self.cutoff
        i, j, distances = i[within], j[within], distances[within]
        alpha = self.electrostatics.alpha
        *born, offset = self.born_table.to(x.dtype)[:, species[i], species[j]]
        pair = self.coulomb_constant * real_space_pair_energies(
            charges[i], charges[j], distances, alpha
        )
        pair = pair + _born(*born, distances) - offset
        energies = x.new_zeros(n).index_add_(0, i, 0.5 * pair)  # half of each ordered pair
        per_atom = self_energies(charges, alpha)
        per_atom = per_atom + self.electrostatics.reciprocal_energies(x, charges, inputs.cell[0])
        energies = energies + self.coulomb_constant * per_atom
        energy = energies.new_zeros(1).index_add_(0, inputs.batch_idx, energies)
        return {"energies": energies, "energy": energy, "charges": charges}

    def distribution_spec(self, strategy: StrategyKind | None = None) -> MLIPSpec | None:
        """`rigid_ion_spec(strategy)`."""
        return rigid_ion_spec(strategy)
