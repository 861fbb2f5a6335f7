"""Single-process evaluation of a wrapped model: neighbour list, forward, autograd forces/stress.

This is the reference every distributed path is compared with. The strain helpers are
shared with `DistributedModel`, which applies them to its local view.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from nvdd_plugins.data import Batch
from nvdd_plugins.geometry import (
    VerletNeighborList,
    attach_neighbor_list,
    edge_shifts,
    rows_times_3x3,
)
from nvdd_plugins.models.base import BaseModelMixin
from nvdd_plugins.models.virials import (
    atom_strain_shares,
    new_pair_leaf,
    pair_gradients_of,
    per_atom_stresses,
)

__all__ = [
    "ModelEvaluator",
    "apply_strain",
    "edge_vectors",
    "energy_derivatives",
    "evaluate_model",
    "new_strain",
]


def new_strain(num_graphs: int, like: torch.Tensor, requires_grad: bool) -> torch.Tensor:
    """A zero (num_graphs, 3, 3) strain leaf."""
    return torch.zeros(
        num_graphs, 3, 3, dtype=like.dtype, device=like.device, requires_grad=requires_grad
    )


def apply_strain(
    positions: torch.Tensor, cell: torch.Tensor, batch_idx: torch.Tensor, strain: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Deform positions and cells by the symmetric part of `strain` (x -> x (1 + eps))."""
    sym = 0.5 * (strain + strain.transpose(1, 2))
    per_atom = sym[0] if sym.shape[0] == 1 else sym[batch_idx]
    strained_positions = positions + rows_times_3x3(positions, per_atom)
    return strained_positions, cell + rows_times_3x3(cell, sym[:, None])


def energy_derivatives(
    energy: torch.Tensor,
    positions: torch.Tensor,
    strain: torch.Tensor | None,
    cell: torch.Tensor,
    want_forces: bool,
    want_stress: bool,
    pairs: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Forces (-dE/dx, eV/Å) and stress (dE/deps / volume, eV/Å³) from a scalar energy;
    with `pairs` (the leaf added to the edge shifts, `new_pair_leaf`) also
    "pair_gradients", dE/dr per edge (None where the energy does not depend on it)."""
    inputs = []
    if want_forces:
        inputs.append(positions)
    if want_stress:
        if strain is None:
            raise ValueError("stress needs a strain leaf")
        inputs.append(strain)
    if pairs is not None:
        inputs.append(pairs)
    if not inputs:
        return {}
    raw = list(torch.autograd.grad(energy, inputs, allow_unused=True))
    out: dict[str, torch.Tensor | None] = {}
    if pairs is not None:
        out["pair_gradients"] = raw.pop()
    grads = [torch.zeros_like(x) if g is None else g for g, x in zip(raw, inputs, strict=False)]
    if want_forces:
        out["forces"] = -grads[0]
    if want_stress:
        volume = torch.linalg.det(cell.detach()).abs().view(-1, 1, 1)
        if bool((volume == 0).any()):
            raise ValueError("stress needs a cell with non-zero volume (an open cluster has none)")
        out["stress"] = grads[-1] / volume
    return out


def evaluate_model(
    model: BaseModelMixin,
    batch: Batch,
    properties: Iterable[str] = ("energy", "forces"),
) -> dict[str, torch.Tensor]:
    """Evaluate `model` on `batch` in one process.

    Builds the neighbour list at the model's cutoff when the batch has none, derives
    "forces"/"stress" by autograd when the model declares them as autograd outputs (and
    per-atom "stresses" from the edge vectors when asked for, see
    `nvdd_plugins.models.virials`), and returns detached tensors: the model's outputs plus
    the derived ones.
    """
    properties = set(properties)
    config = model.model_config
    if "edge_index" not in batch:
        attach_neighbor_list(batch, model.cutoff)
    want_forces = "forces" in properties and "forces" in config.autograd_outputs
    want_stress = "stress" in properties and "stress" in config.autograd_outputs
    want_stresses = "stresses" in properties and "stress" in config.autograd_outputs
    positions = batch.positions.detach().requires_grad_(want_forces)
    strain = new_strain(batch.num_graphs, positions, want_stress) if want_stress else None
    run = batch.copy()
    if strain is not None:
        run.positions, run.cell = apply_strain(positions, batch.cell, batch.batch_idx, strain)
        if "unit_shifts" in run:
            run.shifts = edge_shifts(run, run.edge_index, run.unit_shifts)
    else:
        run.positions = positions
    pairs = new_pair_leaf(batch.edge_index.shape[1], positions) if want_stresses else None
    if pairs is not None:
        shifts = run.get("shifts")
        run.shifts = pairs if shifts is None else shifts + pairs
    with torch.enable_grad():
        out = model(run)
        derived = energy_derivatives(
            out["energy"].sum(), positions, strain, batch.cell, want_forces, want_stress, pairs
        )
    if pairs is not None:
        gradients = pair_gradients_of(derived.pop("pair_gradients"), pairs, model)
        shares = atom_strain_shares(
            batch.edge_index, edge_vectors(batch), gradients, batch.num_nodes
        )
        derived["stresses"] = per_atom_stresses(shares, batch.cell, batch.batch_idx)
    out.update(derived)
    return {k: v.detach() for k, v in out.items()}


def edge_vectors(batch: Batch) -> torch.Tensor:
    """x[j] - x[i] + shifts of every edge of `batch` (detached; padding edges 0)."""
    edge_index = batch.edge_index
    valid = (edge_index < batch.num_nodes).all(dim=0)
    i, j = torch.where(valid, edge_index, 0).detach()
    x = batch.positions.detach()
    vectors = x[j] - x[i]
    shifts = batch.get("shifts")
    if shifts is not None:
        vectors = vectors + shifts.detach()
    return torch.where(valid.unsqueeze(1), vectors, 0.0)


class ModelEvaluator:
    """Single-process evaluation with a Verlet neighbour list at the model's cutoff.

    A batch that already carries a neighbour list (e.g. from `NeighborListHook`) is used as
    it is.

    Args:
        model: the model wrapper.
        skin: Verlet skin, Å.
    """

    uses_batch_neighbors = True

    def __init__(self, model: BaseModelMixin, skin: float = 0.0) -> None:
        self.model = model
        config = model.model_config.neighbor_config
        skin_pairs_wanted = (
            config is not None and config.accepts_skin_pairs and not config.prune_skin_pairs
        )
        self.neighbors = VerletNeighborList(model.cutoff, skin, filter_pairs=not skin_pairs_wanted)

    def __call__(
        self, batch: Batch, properties: Iterable[str] = ("energy", "forces")
    ) -> dict[str, torch.Tensor]:
        """Evaluate `batch`; returns detached outputs as `evaluate_model` does."""
        if "edge_index" in batch:
            return evaluate_model(self.model, batch, properties)
        run = batch.copy()
        self.neighbors.attach(run)
        return evaluate_model(self.model, run, properties)

    def compute_view(self, batch: Batch) -> Batch:
        """`batch` itself, on which compute-stage hooks may leave a neighbour list."""
        return batch
