"""`RadiusGraphMPNN`: a message-passing potential that builds its own radius graph in forward.

It ignores the neighbour list it is handed and finds its pairs itself (all pairs closer than
the cutoff under the minimum-image convention, O(N^2)), as models with their own graph code
do. Such a model cannot take the halo layout (periodic self-images and far-away padding rows
would add pairs), so it declares a spec for graph partition only, where every atom of a
rank's view appears once, at its own position.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from nvdd_plugins.config import StrategyKind
from nvdd_plugins.data import Batch
from nvdd_plugins.geometry import minimum_image
from nvdd_plugins.models.base import BaseModelMixin, ModelConfig, NeighborConfig
from nvdd_plugins.models.seeding import seeded_weights
from nvdd_plugins.spec import SPEC_MPNN_GRAPH, MLIPSpec

__all__ = ["RadiusGraphMPNN"]


class RadiusGraphMPNN(nn.Module, BaseModelMixin):
    """Invariant MPNN over a radius graph it builds from positions, cell and pbc (one system
    per batch; every periodic width must exceed twice the cutoff).

    Args:
        cutoff: radius of the graph, Å (cosine envelope, zero at the cutoff).
        hidden: feature width.
        n_layers: message-passing layers (alternating index_add_ / scatter_add_).
        max_atomic_number: largest species supported.
        seed: weights are drawn from this seed.
    """

    def __init__(
        self,
        cutoff: float = 4.5,
        hidden: int = 8,
        n_layers: int = 2,
        max_atomic_number: int = 36,
        seed: int = 0,
    ) -> None:
        super().__init__()
        with seeded_weights(seed):
            self.embedding = nn.Embedding(max_atomic_number + 1, hidden)
            self.filters = nn.ModuleList(nn.Linear(4, hidden) for _ in range(n_layers))
            self.updates = nn.ModuleList(nn.Linear(2 * hidden, hidden) for _ in range(n_layers))
            self.readout = nn.Linear(hidden, 1)
        self.model_config = ModelConfig.by_autograd(NeighborConfig(cutoff=float(cutoff)))

    def radius_graph(
        self, positions: torch.Tensor, cell: torch.Tensor, pbc: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Receivers and senders of every ordered pair closer than the cutoff."""
        with torch.no_grad():
            x = positions.detach()
            vectors = minimum_image((x.unsqueeze(0) - x.unsqueeze(1)).reshape(-1, 3), cell, pbc)
            close = vectors.norm(dim=-1).reshape(len(x), len(x)) < self.cutoff
            close.fill_diagonal_(False)
            return torch.nonzero(close, as_tuple=True)

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        """Per-atom and per-system energies (eV)."""
        if batch.num_graphs != 1:
            raise ValueError("RadiusGraphMPNN evaluates one system per batch")
        x, cell, pbc = batch.positions, batch.cell[0], batch.pbc[0]
        receivers, senders = self.radius_graph(x, cell, pbc)
        vectors = minimum_image(x[senders] - x[receivers], cell, pbc)
        distance = vectors.norm(dim=-1)
        envelope = 0.5 * (torch.cos(math.pi * distance / self.cutoff) + 1.0)
        radial = torch.stack([distance, distance**2, envelope, torch.exp(-distance)], dim=-1)
        h = self.embedding(batch.atomic_numbers)
        for k, (filter_, update) in enumerate(zip(self.filters, self.updates, strict=True)):
            messages = torch.tanh(filter_(radial)) * h[senders] * envelope.unsqueeze(-1)
            aggregated = h.new_zeros(h.shape)
            if k % 2 == 0:
                aggregated = aggregated.index_add_(0, receivers, messages)
            else:
                index = receivers.unsqueeze(-1).expand_as(messages)
                aggregated = aggregated.scatter_add_(0, index, messages)
            h = h + torch.tanh(update(torch.cat([h, aggregated], dim=-1)))
        energies = 0.1 * self.readout(h).squeeze(-1)
        energy = energies.new_zeros(1).index_add_(0, batch.batch_idx, energies)
        return {"energies": energies, "energy": energy}

    def distribution_spec(self, strategy: StrategyKind | None = None) -> MLIPSpec | None:
        """`SPEC_MPNN_GRAPH` for graph partition; None for the halo strategy."""
        return SPEC_MPNN_GRAPH if strategy is StrategyKind.GRAPH_PARTITION else None
