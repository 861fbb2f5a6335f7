"""`SimpleMPNN`: a small plain-PyTorch message-passing potential, the bring-your-own example.

Nothing in it knows about ranks. It follows the four halo rules of the README's "Bring your
own model": per-atom energies over all local atoms, rebound in-place scatters, sentinel edges
filtered in `adapt_input`, and pair vectors x[j] - x[i] + shifts taken to their minimum
image (so a batch without shift vectors works too; with them, per-atom virials are defined).
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import nn

from nvdd_plugins.config import StrategyKind
from nvdd_plugins.data import Batch
from nvdd_plugins.geometry import complete_cell, minimum_image, perpendicular_widths
from nvdd_plugins.models.base import (
    BaseModelMixin,
    ModelConfig,
    ModelInputs,
    NeighborConfig,
    host_checks_allowed,
)
from nvdd_plugins.models.seeding import seeded_weights
from nvdd_plugins.spec import SPEC_MPNN_HALO, MLIPSpec, for_strategy

__all__ = ["SimpleMPNN"]


class _Interaction(nn.Module):
    """One message-passing layer: filter-weighted messages from senders, residual update."""

    def __init__(self, hidden: int, n_radial: int, use_index_add: bool) -> None:
        super().__init__()
        self.message = nn.Linear(hidden, hidden)
        self.filter = nn.Linear(n_radial, hidden)
        self.update = nn.Linear(2 * hidden, hidden)
        self.use_index_add = use_index_add

    def forward(
        self,
        h: torch.Tensor,
        radial: torch.Tensor,
        envelope: torch.Tensor,
        receivers: torch.Tensor,
        senders: torch.Tensor,
    ) -> torch.Tensor:
        weight = self.filter(radial) * envelope.unsqueeze(-1)
        messages = nn.functional.silu(self.message(h[senders])) * weight
        aggregated = h.new_zeros(h.shape)
        if self.use_index_add:
            aggregated = aggregated.index_add_(0, receivers, messages)
        else:
            index = receivers.unsqueeze(-1).expand_as(messages)
            aggregated = aggregated.scatter_add_(0, index, messages)
        return h + nn.functional.silu(self.update(torch.cat([h, aggregated], dim=-1)))


class SimpleMPNN(nn.Module, BaseModelMixin):
    """Invariant message-passing network with autograd forces.

    Args:
        cutoff: radial cutoff, Å (smooth cosine envelope multiplies every message, exactly
            zero at and beyond the cutoff).
        hidden: feature width.
        n_layers: message-passing layers (>= 1; alternating index_add_ / scatter_add_).
        n_radial: Gaussian radial basis functions.
        max_atomic_number: largest species supported.
        seed: weights are drawn from this seed (random-weight model for tests/examples).
    """

    def __init__(
        self,
        cutoff: float = 5.0,
        hidden: int = 16,
        n_layers: int = 3,
        n_radial: int = 8,
        max_atomic_number: int = 100,
        seed: int = 0,
    ) -> None:
        super().__init__()
        for name, value in (("n_layers", n_layers), ("hidden", hidden), ("n_radial", n_radial)):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        with seeded_weights(seed):
            self.embedding = nn.Embedding(max_atomic_number + 1, hidden)
            self.layers = nn.ModuleList(
                _Interaction(hidden, n_radial, use_index_add=(k % 2 == 0)) for k in range(n_layers)
            )
            self.readout = nn.Sequential(nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, 1))
            self.atomic_energy = nn.Embedding(max_atomic_number + 1, 1)
        self.register_buffer("centers", torch.linspace(0.0, cutoff, n_radial))
        self.width = cutoff / n_radial
        self.model_config = ModelConfig.by_autograd(
            NeighborConfig(cutoff=float(cutoff), accepts_skin_pairs=True)
        )

    def _check_cells(self, cell: torch.Tensor, pbc: torch.Tensor) -> None:
        for g in range(cell.shape[0]):
            periodic = pbc[g]
            if bool(periodic.any()):
                widths = perpendicular_widths(complete_cell(cell[g], periodic))[periodic]
                if bool((widths <= 2 * self.cutoff).any()):
                    raise ValueError(
                        "SimpleMPNN uses minimum-image displacements: every periodic "
                        f"perpendicular width must exceed 2 x cutoff = {2 * self.cutoff} Å, "
                        f"got {widths.tolist()}"
                    )

    def supported_species(self) -> tuple[int, ...]:
        """Atomic numbers 1 to max_atomic_number."""
        return tuple(range(1, self.embedding.num_embeddings))

    def _check_species(self, numbers: torch.Tensor) -> None:
        largest = self.embedding.num_embeddings - 1
        if numbers.numel() and int(numbers.max()) > largest:
            raise ValueError(
                f"SimpleMPNN(max_atomic_number={largest}) got atomic number "
                f"{int(numbers.max())}: build it with a larger max_atomic_number"
            )

    @staticmethod
    def _displacements(inputs: ModelInputs) -> torch.Tensor:
        """Pair vectors x[j] - x[i] + shifts at their minimum image, system by system."""
        i, j = inputs.edge_index
        rij = inputs.positions[j] - inputs.positions[i] + inputs.shifts
        if inputs.num_graphs == 1:
            return minimum_image(rij, inputs.cell[0], inputs.pbc[0])
        graph = inputs.batch_idx[i]
        result = torch.empty_like(rij)
        for g in range(inputs.num_graphs):
            mask = graph == g
            result[mask] = minimum_image(rij[mask], inputs.cell[g], inputs.pbc[g])
        return result

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        """Per-atom and per-system energies (eV)."""
        inputs = self.adapt_input(batch)
        if host_checks_allowed():
            self._check_cells(inputs.cell, inputs.pbc)
            self._check_species(inputs.atomic_numbers)
        i, j = inputs.edge_index
        rij = self._displacements(inputs)
        distance = rij.norm(dim=-1)
        envelope = 0.5 * (torch.cos(math.pi * distance / self.cutoff) + 1.0)
        envelope = envelope * (distance < self.cutoff)
        radial = torch.exp(-(((distance.unsqueeze(-1) - self.centers) / self.width) ** 2))
        h = self.embedding(inputs.atomic_numbers)
        for layer in self.layers:
            h = layer(h, radial, envelope, receivers=i, senders=j)
        z = inputs.atomic_numbers
        energies = self.readout(h).squeeze(-1) + self.atomic_energy(z).squeeze(-1)
        energy = energies.new_zeros(inputs.num_graphs).index_add_(0, inputs.batch_idx, energies)
        return {"energies": energies, "energy": energy}

    def distribution_spec(self, strategy: StrategyKind | None = None) -> MLIPSpec | None:
        """`SPEC_MPNN_HALO` with this model's layer count and the storage policy of
        `strategy`."""
        return for_strategy(
            dataclasses.replace(SPEC_MPNN_HALO, n_layers=len(self.layers)), strategy
        )
