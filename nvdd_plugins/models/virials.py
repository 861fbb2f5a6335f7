"""Per-atom virials of a model whose energy depends on positions through its edge vectors.

A zero leaf added to the edge shifts makes every edge vector r_e = x[j] - x[i] + shifts[e]
differentiable on its own: the gradient of the energy with respect to the leaf is
g_e = dE/dr_e. Edge e = (i, j) gives half of g_e (x) r_e to each of its two atoms, so atom
i's share of dE/dstrain is

    S_i = 1/2 sum over the edges e touching i of g_e (x) r_e      (eV)

and sum_i S_i is dE/dstrain, the global virial with the stress sign (the LAMMPS virial of
atom i is -S_i transposed). The per-atom stress is S_i / volume, ASE's `get_stresses()`
convention, and for Lennard-Jones the same split as the kernel's and ASE's `LennardJones`.
"""

from __future__ import annotations

import torch

from nvdd_plugins.errors import raised_on_every_rank
from nvdd_plugins.models.base import BaseModelMixin

__all__ = ["atom_strain_shares", "new_pair_leaf", "pair_gradients_of", "per_atom_stresses"]


def new_pair_leaf(n_edges: int, like: torch.Tensor) -> torch.Tensor:
    """A zero (n_edges, 3) leaf to add to the edge shifts (its gradient is dE/dr per edge)."""
    return torch.zeros(n_edges, 3, dtype=like.dtype, device=like.device, requires_grad=True)


def pair_gradients_of(
    gradient: torch.Tensor | None, leaf: torch.Tensor, model: BaseModelMixin
) -> torch.Tensor:
    """The gradient with respect to the pair leaf, or a clear error when the model does not
    build its edge vectors from the batch's shifts or has a term of the positions themselves
    (no per-edge derivative exists then)."""
    if not model.model_config.edge_energy:  # the model's own property: alike on every rank
        raise raised_on_every_rank(
            ValueError(
                f"{type(model).__name__} has an energy term of the atoms' positions (a "
                "reciprocal-space sum), not of pair vectors alone: per-atom virials and pair "
                "forces are not defined for it"
            )
        )
    if gradient is not None:
        return gradient
    if leaf.shape[0]:
        raise ValueError(
            f"per-atom virials need edge vectors x[j] - x[i] + shifts[e] built from the "
            f"batch's shifts; {type(model).__name__} does not use them"
        )
    return torch.zeros_like(leaf)


def atom_strain_shares(
    edge_index: torch.Tensor, vectors: torch.Tensor, pair_gradients: torch.Tensor, n_rows: int
) -> torch.Tensor:
    """(n_rows, 3, 3) S_i = 1/2 sum_{e touching i} g_e (x) r_e in eV, from `edge_index`
    (2, E) rows (i, j), edge `vectors` r_e and `pair_gradients` g_e = dE/dr_e (E, 3).
    Edges holding an index >= n_rows (padding) are skipped."""
    valid = (edge_index < n_rows).all(dim=0)
    i, j = edge_index[:, valid]
    half = 0.5 * pair_gradients[valid].unsqueeze(2) * vectors[valid].unsqueeze(1)
    shares = vectors.new_zeros(n_rows, 3, 3)
    return shares.index_add_(0, i, half).index_add_(0, j, half)


def per_atom_stresses(
    shares: torch.Tensor, cell: torch.Tensor, batch_idx: torch.Tensor
) -> torch.Tensor:
    """Per-atom stresses (eV/Å³) from strain shares (n, 3, 3) and the systems' cells
    (n_systems, 3, 3); NaN for a system without a cell volume (as `LennardJonesModel`)."""
    volume = torch.linalg.det(cell.detach()).abs()
    volume = torch.where(volume > 0, volume, torch.nan)
    return shares / volume[batch_idx].view(-1, 1, 1)
