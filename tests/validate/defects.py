"""Model wrappers breaking one distribution rule each, built on `SimpleMPNN` (float64 after
`trace_and_validate`'s conversion), and custom ops an engine cannot see into."""

from __future__ import annotations

import torch
from torch import nn

import tests.torture.zoo  # noqa: F401  (registers torch.ops.torture.edge_scatter)
from nvdd_plugins import Batch
from nvdd_plugins.models import ModelInputs, SimpleMPNN
from nvdd_plugins.models.mpnn import _Interaction
from nvdd_plugins.spec import MLIPSpec, scattered_onto_nodes, summed_over_ranks
from tests.helpers.systems import MPNN_CUTOFF, NotReboundInteraction


@torch.library.custom_op("validate_tests::silu_rows", mutates_args=())
def silu_rows(x: torch.Tensor) -> torch.Tensor:
    """An opaque per-row activation (no aggregation)."""
    return nn.functional.silu(x)


@silu_rows.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _save_input(ctx, inputs, output) -> None:
    ctx.save_for_backward(inputs[0])


def _silu_backward(ctx, grad: torch.Tensor) -> torch.Tensor:
    (x,) = ctx.saved_tensors
    sigmoid = torch.sigmoid(x)
    return grad * sigmoid * (1 + x * (1 - sigmoid))


silu_rows.register_autograd(_silu_backward, setup_context=_save_input)


class _Layer(_Interaction):
    """A SimpleMPNN layer whose aggregation and activation subclasses replace."""

    def aggregate(self, h: torch.Tensor, receivers: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return h.new_zeros(h.shape).index_add_(0, receivers, m)

    def activate(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.silu(x)

    def forward(self, h, radial, envelope, receivers, senders):
        weight = self.filter(radial) * envelope.unsqueeze(-1)
        messages = nn.functional.silu(self.message(h[senders])) * weight
        aggregated = self.aggregate(h, receivers, messages)
        return h + self.activate(self.update(torch.cat([h, aggregated], dim=-1)))


class OpaqueAggregationLayer(_Layer):
    """Aggregates through an opaque custom op (needs ScatterOutputs)."""

    def aggregate(self, h: torch.Tensor, receivers: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return torch.ops.torture.edge_scatter.default(m, receivers, h.shape[0])


class MarkedAggregationLayer(_Layer):
    """Aggregates through the opaque op and marks the result as an aggregation itself."""

    def aggregate(self, h: torch.Tensor, receivers: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return scattered_onto_nodes(
            torch.ops.torture.edge_scatter.default(m, receivers, h.shape[0])
        )


class OpaqueActivationLayer(_Layer):
    """Activates through an opaque per-row custom op (needs a plain OpAdapter)."""

    def activate(self, x: torch.Tensor) -> torch.Tensor:
        return silu_rows(x)


class GlobalSumLayer(_Layer):
    """Feeds a sum over all atoms back into every atom (on a rank: over its rows only)."""

    def forward(self, h, radial, envelope, receivers, senders):
        g = torch.tanh(h).sum(dim=0)
        return super().forward(h, radial, envelope, receivers, senders) + 0.1 * g


class SummedOverRanksLayer(_Layer):
    """The same sum made global: the owned rows' per-system sum, summed over the ranks."""

    def forward(self, h, radial, envelope, receivers, senders):
        system = torch.zeros(h.shape[0], dtype=torch.long, device=h.device)  # one system
        g = summed_over_ranks(h.new_zeros(1, h.shape[1]).index_add_(0, system, torch.tanh(h)))
        return super().forward(h, radial, envelope, receivers, senders) + 0.1 * g[0]


def mpnn(layer: type[nn.Module] | None = None, cls: type[SimpleMPNN] = SimpleMPNN) -> SimpleMPNN:
    """The reference MPNN (float32, as users build it) of class `cls`, with `layer` layers."""
    model = cls(cutoff=MPNN_CUTOFF, hidden=16, n_layers=3, seed=7)
    for interaction in model.layers:
        interaction.__class__ = layer or interaction.__class__
    return model


class WithSpec(SimpleMPNN):
    """SimpleMPNN declaring the spec in `spec` (default its own)."""

    spec: MLIPSpec | None = None

    def distribution_spec(self, strategy=None):
        return self.spec if self.spec is not None else super().distribution_spec(strategy)


class NoSentinelFilter(SimpleMPNN):
    """Uses the neighbour list as it comes, padding edges included; does not take Verlet
    pairs, so pairs beyond the cutoff come as sentinels."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        neighbors = self.model_config.neighbor_config
        self.model_config = type(self.model_config)(
            autograd_outputs=self.model_config.autograd_outputs,
            autograd_inputs=self.model_config.autograd_inputs,
            neighbor_config=type(neighbors)(neighbors.cutoff, accepts_skin_pairs=False),
        )

    def adapt_input(self, batch: Batch) -> ModelInputs:
        filtered = super().adapt_input(batch)
        unfiltered = {"edge_index": batch.edge_index, "shifts": batch.shifts}
        return ModelInputs(**{**vars(filtered), **unfiltered})


class NoMinimumImage(SimpleMPNN):
    """Takes pair vectors as positions[j] - positions[i], ignoring periodic images."""

    @staticmethod
    def _displacements(inputs):
        i, j = inputs.edge_index
        return inputs.positions[j] - inputs.positions[i]


def not_rebound() -> SimpleMPNN:
    """Does not rebind its in-place index_add_ (exact eagerly, wrong under compile=True)."""
    return mpnn(NotReboundInteraction)


class SkinWeightedLayer(_Layer):
    """Weighs its messages without the envelope, so pairs beyond the cutoff count (although
    SimpleMPNN declares accepts_skin_pairs), and checks its features with a sum over the
    atoms that changes no result."""

    def forward(self, h, radial, envelope, receivers, senders):
        if bool(torch.isnan(h.sum())):
            raise FloatingPointError("NaN features")
        return super().forward(h, radial, torch.ones_like(envelope), receivers, senders)


def without_skin_pairs(model: SimpleMPNN) -> SimpleMPNN:
    """`model` declaring the default NeighborConfig(accepts_skin_pairs=False)."""
    neighbors = model.model_config.neighbor_config
    model.model_config = type(model.model_config)(
        autograd_outputs=model.model_config.autograd_outputs,
        autograd_inputs=model.model_config.autograd_inputs,
        neighbor_config=type(neighbors)(neighbors.cutoff),
    )
    return model


class EnergiesOnly(SimpleMPNN):
    """Returns per-atom energies only (the per-system "energy" is optional)."""

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        return {"energies": super().forward(batch)["energies"]}
