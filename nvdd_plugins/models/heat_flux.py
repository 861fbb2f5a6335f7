"""The heat flux of a model whose energy is a sum of per-atom energies U_i: its parts from
per-atom tensors, and the single-process reference for those tensors.

On the unfolded system, where every periodic image j' of an atom j is an atom of its own
(Langer, Knoop, Carbogno, Scheffler, Rupp, Phys. Rev. B 108, L100302 (2023)),

    J = sum_i e_i v_i + sum_i sum_j' (r_i - r_j') (dU_i/dr_j' . v_j),   e_i = U_i + m_i v_i^2 / 2,

i over the atoms, j' over every atom of the unfolded system. The potential part is
sum_j W_j v_j with one tensor per atom,

    W_j = sum_i sum_{j' image of j} (r_i - r_j') (x) dU_i/dr_j'          (eV),

which holds only differences of positions: it depends on the positions alone (not on the
velocities) and is the same in every frame. `unfolded_heat_flux_tensors` computes W
literally: it builds the unfolded system around the cell (every image within `n_layers`
cutoffs, open boundaries), takes dU/dr' of every unfolded atom for the weights 1 and
r_i (x, y, z), and folds the images onto their atoms (docs/heat_flux.md).
"""

from __future__ import annotations

import itertools
import math

import ase.units
import torch

from nvdd_plugins.data import Batch
from nvdd_plugins.geometry import attach_neighbor_list, complete_cell, perpendicular_widths
from nvdd_plugins.models.base import BaseModelMixin

__all__ = [
    "HEAT_FLUX_TENSORS",
    "heat_flux_parts",
    "receptive_layers",
    "unfolded_heat_flux_tensors",
]

HEAT_FLUX_TENSORS = "heat_flux_tensors"
"""The per-atom output (n, 3, 3) W_j, eV: the potential heat flux is sum_j W_j v_j."""


def heat_flux_parts(
    energies: torch.Tensor,
    masses: torch.Tensor,
    velocities: torch.Tensor,
    tensors: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The convective part sum_i (U_i + m_i v_i^2 / 2) v_i and the potential part
    sum_i W_i v_i of the heat flux of these atoms (3,) each, eV Å/fs, from their per-atom
    `energies` (eV), `masses` (amu), `velocities` (ASE's unit, Å sqrt(eV/amu)) and
    heat-flux `tensors` W (n, 3, 3), eV. Sums over a part of a system add up to the system's."""
    v = velocities * ase.units.fs  # Å/fs
    kinetic = 0.5 * masses * (velocities * velocities).sum(-1)  # eV
    convective = ((energies + kinetic).unsqueeze(-1) * v).sum(0)
    potential = torch.einsum("nab,nb->a", tensors, v)
    return convective, potential


def receptive_layers(model: BaseModelMixin) -> int:
    """The cutoffs a per-atom energy of `model` can see (its spec's `n_layers`), or a clear
    error when the model does not declare them."""
    spec = model.distribution_spec()
    if spec is None or spec.n_layers is None:
        raise ValueError(
            f"the heat flux of {type(model).__name__} needs its message-passing layers: "
            "declare MLIPSpec.n_layers in its distribution_spec (1 for a pair potential)"
        )
    return spec.n_layers


def unfolded_heat_flux_tensors(model: BaseModelMixin, batch: Batch, n_layers: int) -> torch.Tensor:
    """W (n, 3, 3), eV, of the one system in `batch` (see the module docstring) for a model
    whose per-atom energy depends only on atoms within `n_layers` cutoffs: the model run on
    the unfolded system (the atoms and their images within that reach, open boundaries)."""
    if batch.num_graphs != 1:
        raise ValueError(f"the heat flux is computed for one system, got {batch.num_graphs}")
    n = batch.num_nodes
    positions, atoms = _unfolded(batch, n_layers * model.cutoff)
    leaf = positions.detach().requires_grad_()
    unfolded = Batch(
        node={"positions": leaf, "atomic_numbers": batch.atomic_numbers[atoms]},
        edge={},
        system={
            "cell": torch.zeros_like(batch.cell),
            "pbc": torch.zeros_like(batch.pbc),
        },
        ptr=torch.tensor([0, leaf.shape[0]], device=leaf.device),
    )
    attach_neighbor_list(unfolded, model.cutoff)
    with torch.enable_grad():
        energies = model(unfolded)["energies"][:n]  # the atoms themselves come first
        sites = positions[:n].detach()
        weighted = [energies.sum(), *(sites[:, axis] @ energies for axis in range(3))]
        grads = [
            torch.autograd.grad(w, leaf, retain_graph=k < 3, allow_unused=True)[0]
            for k, w in enumerate(weighted)
        ]
    grads = [torch.zeros_like(leaf) if g is None else g for g in grads]
    # sum_i (r_i - r_j') (x) dU_i/dr_j' = d(sum_i r_i U_i)/dr_j' - r_j' (x) dU/dr_j'
    per_image = torch.stack(grads[1:], dim=1) - positions.unsqueeze(2) * grads[0].unsqueeze(1)
    return per_image.new_zeros(n, 3, 3).index_add_(0, atoms, per_image)


def _unfolded(batch: Batch, reach: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions of the atoms and of every periodic image within `reach` (Å) of the box
    their fractional coordinates span, and the atom each row is an image of; the atoms
    themselves first."""
    positions = batch.positions.detach()
    pbc = batch.pbc[0].bool()
    cell = batch.cell[0].detach().to(positions.dtype)
    if not bool(pbc.any()):
        return positions, torch.arange(positions.shape[0], device=positions.device)
    full = complete_cell(cell, pbc)
    frac = torch.linalg.solve(full.T, positions.T).T
    margin = reach / perpendicular_widths(full)
    lo, hi = frac.min(0).values - margin, frac.max(0).values + margin
    counts = [math.ceil(float(margin[a])) + 1 if bool(pbc[a]) else 0 for a in range(3)]
    ranges = [range(-c, c + 1) for c in counts]
    shifts = sorted(itertools.product(*ranges), key=lambda u: sum(map(abs, u)))
    rows, atoms = [], []
    for unit in shifts:  # (0, 0, 0) first: every atom itself
        u = torch.tensor(unit, dtype=positions.dtype, device=positions.device)
        inside = ((frac + u >= lo) & (frac + u <= hi)).all(dim=1)
        index = torch.nonzero(inside if any(unit) else torch.ones_like(inside)).flatten()
        rows.append(positions[index] + u @ cell)
        atoms.append(index)
    return torch.cat(rows), torch.cat(atoms)
