"""Single-process evaluation of a wrapped model: neighbour list, forward, autograd forces/stress.

This is the reference every distributed path is compared with; it keeps its own small
autograd code, apart from the derivative step of the distributed evaluation that it checks.
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
from nvdd_plugins.models.heat_flux import (
    HEAT_FLUX_TENSORS,
    receptive_layers,
    unfolded_heat_flux_tensors,
)
from nvdd_plugins.models.requested import asking_for
from nvdd_plugins.models.virials import (
    atom_strain_shares,
    new_pair_leaf,
    pair_gradients_of,
    per_atom_stresses,
)

__all__ = ["ModelEvaluator", "edge_vectors", "evaluate_model"]


def evaluate_model(
    model: BaseModelMixin,
    batch: Batch,
    properties: Iterable[str] = ("energy", "forces"),
) -> dict[str, torch.Tensor]:
    """Evaluate `model` on `batch` in one process.

    Builds the neighbour list at the model's cutoff when the batch has none, derives
    "forces"/"stress" by autograd when the model declares them as autograd outputs (and
    per-atom "stresses" from the edge vectors when asked for, see
    `nvdd_plugins.models.virials`) and per-atom "heat_flux_tensors" on the unfolded system
    when asked for (`nvdd_plugins.models.heat_flux`), and returns detached tensors: the
    model's outputs plus the derived ones.
    """
    properties = set(properties)
    config = model.model_config
    if "edge_index" not in batch:
        attach_neighbor_list(batch, model.cutoff)
    want_forces = "forces" in properties and "forces" in config.autograd_outputs
    want_stress = "stress" in properties and "stress" in config.autograd_outputs
    want_stresses = "stresses" in properties and "stress" in config.autograd_outputs
    positions = batch.positions.detach().requires_grad_(want_forces)
    strain = positions.new_zeros(batch.num_graphs, 3, 3).requires_grad_()
    run = batch.copy()
    run.positions = positions
    if want_stress:
        sym = 0.5 * (strain + strain.transpose(1, 2))
        per_atom = sym[0] if batch.num_graphs == 1 else sym[batch.batch_idx]
        run.positions = positions + rows_times_3x3(positions, per_atom)
        run.cell = batch.cell + rows_times_3x3(batch.cell, sym[:, None])
        if "unit_shifts" in run:
            run.shifts = edge_shifts(run, run.edge_index, run.unit_shifts)
    pairs = new_pair_leaf(batch.edge_index.shape[1], positions) if want_stresses else None
    if pairs is not None:
        shifts = run.get("shifts")
        run.shifts = pairs if shifts is None else shifts + pairs
    leaves = {"forces": positions, "stress": strain, "pair_gradients": pairs}
    wanted = {"forces": want_forces, "stress": want_stress, "pair_gradients": want_stresses}
    leaves = {name: leaf for name, leaf in leaves.items() if wanted[name]}
    with torch.enable_grad(), asking_for(properties):
        out = _with_energy(model(run), run, type(model).__name__)
        found = []
        if leaves:
            energy = out["energy"].sum()
            found = torch.autograd.grad(energy, list(leaves.values()), allow_unused=True)
    derived = dict(zip(leaves, found, strict=True))
    if want_forces:
        derived["forces"] = _zero_if_none(derived["forces"], positions).neg()
    if want_stress:
        volume = torch.linalg.det(batch.cell.detach()).abs().view(-1, 1, 1)
        if bool((volume == 0).any()):
            raise ValueError("stress needs a cell with non-zero volume (an open cluster has none)")
        derived["stress"] = _zero_if_none(derived["stress"], strain) / volume
    if pairs is not None:
        gradients = pair_gradients_of(derived.pop("pair_gradients"), pairs, model)
        shares = atom_strain_shares(
            batch.edge_index, edge_vectors(batch), gradients, batch.num_nodes
        )
        derived["stresses"] = per_atom_stresses(shares, batch.cell, batch.batch_idx)
    out.update(derived)
    if HEAT_FLUX_TENSORS in properties:
        layers = receptive_layers(model)
        out[HEAT_FLUX_TENSORS] = unfolded_heat_flux_tensors(model, batch, layers)
    return {k: v.detach() for k, v in out.items()}


def _with_energy(out: dict[str, torch.Tensor], batch: Batch, name: str) -> dict[str, torch.Tensor]:
    """`out` with "energy" per system: the model's, or the sum of its per-atom energies (a
    forward may leave "energy" out)."""
    if "energy" in out:
        return out
    if "energies" not in out:
        raise ValueError(
            f'{name}.forward returned {sorted(out)}: it must return per-atom "energies" '
            '(and may return the per-system "energy")'
        )
    energies = out["energies"]
    energy = energies.new_zeros(batch.num_graphs).index_add(0, batch.batch_idx, energies)
    return {**out, "energy": energy}


def _zero_if_none(gradient: torch.Tensor | None, leaf: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(leaf) if gradient is None else gradient


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
        unfiltered = config is not None and config.passes_skin_pairs()
        self.neighbors = VerletNeighborList(model.cutoff, skin, filter_pairs=not unfiltered)

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
