"""Bring your own model with a custom op: a graph transformer whose attention runs in one
opaque kernel, validated, fixed with the adapter validation suggests, and run.

    python examples/distributed/05_byo_graph_transformer.py

The kernel (`torch.ops.byo_graph_transformer.attend`, a stand-in for a fused Triton/Warp
kernel) aggregates messages over each atom's edges, and nvdd cannot see into it: with the
shipped `SPEC_MPNN_HALO` the ghost rows of its result stay wrong and the second layer reads
them. `trace_and_validate` finds this, tries an `OpAdapter` with `ScatterOutputs` and
reports it as the line to add; with it the model validates, and 20 NVE steps on 2 virtual
ranks follow the single-process trajectory.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import torch
from ase.build import bulk
from ase.md.velocitydistribution import thermalize_momenta
from torch import nn

from nvdd_plugins import Batch, DomainConfig, DomainParallel
from nvdd_plugins.comm import run_simulated
from nvdd_plugins.dynamics import NVE
from nvdd_plugins.geometry import minimum_image
from nvdd_plugins.models import BaseModelMixin, ModelConfig, NeighborConfig
from nvdd_plugins.ops import HaloStoragePolicy, ScatterOutputs
from nvdd_plugins.spec import SPEC_MPNN_HALO, DistributionSpec, MLIPSpec, OpAdapter
from nvdd_plugins.validate import trace_and_validate


def _attend(
    weights: torch.Tensor, values: torch.Tensor, receivers: torch.Tensor, n_nodes: int
) -> torch.Tensor:
    numerator = values.new_zeros(n_nodes, values.shape[1])
    numerator = numerator.index_add(0, receivers, weights[:, None] * values)
    denominator = weights.new_ones(n_nodes).index_add(0, receivers, weights)
    return numerator / denominator[:, None]


@torch.library.custom_op("byo_graph_transformer::attend", mutates_args=())
def attend(
    weights: torch.Tensor, values: torch.Tensor, receivers: torch.Tensor, n_nodes: int
) -> torch.Tensor:
    """Row k: sum of w_e v_e over the edges e into atom k, over 1 + sum of their w_e."""
    return _attend(weights, values, receivers, n_nodes)


@attend.register_fake
def _(weights, values, receivers, n_nodes):
    return values.new_empty(n_nodes, values.shape[1])


def _save(ctx, inputs, output) -> None:
    weights, values, receivers, n_nodes = inputs
    ctx.save_for_backward(weights, values, receivers)
    ctx.n_nodes = n_nodes


def _backward(ctx, grad: torch.Tensor):
    weights, values, receivers = ctx.saved_tensors
    with torch.enable_grad():
        w, v = weights.detach().requires_grad_(), values.detach().requires_grad_()
        dw, dv = torch.autograd.grad(_attend(w, v, receivers, ctx.n_nodes), (w, v), grad)
    return dw, dv, None, None


attend.register_autograd(_backward, setup_context=_save)


class GraphTransformer(nn.Module, BaseModelMixin):
    """Two attention layers over the neighbour graph, then a per-atom energy readout.

    Attention weights exp(tanh(q_i . k_j)) times a cosine envelope vanish at the cutoff, so
    the energy is smooth and pairs beyond the cutoff weigh exactly zero.
    """

    def __init__(self, spec: MLIPSpec, cutoff: float = 5.0, width: int = 16) -> None:
        super().__init__()
        self.spec = spec
        torch.manual_seed(0)
        self.embed = nn.Embedding(100, width)
        self.query = nn.ModuleList(nn.Linear(width, width) for _ in range(2))
        self.key = nn.ModuleList(nn.Linear(width, width) for _ in range(2))
        self.value = nn.ModuleList(nn.Linear(width, width) for _ in range(2))
        self.readout = nn.Sequential(nn.Linear(width, width), nn.Tanh(), nn.Linear(width, 1))
        self.model_config = ModelConfig(
            autograd_outputs=frozenset({"forces", "stress"}),
            autograd_inputs=frozenset({"positions"}),
            neighbor_config=NeighborConfig(cutoff=cutoff, accepts_skin_pairs=True),
        )

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        inputs = self.adapt_input(batch)
        i, j = inputs.edge_index
        rij = minimum_image(
            inputs.positions[j] - inputs.positions[i], inputs.cell[0], inputs.pbc[0]
        )
        r = rij.norm(dim=-1)
        envelope = 0.5 * (torch.cos(math.pi * r / self.cutoff) + 1.0) * (r < self.cutoff)
        h = self.embed(inputs.atomic_numbers)
        scale = 1.0 / math.sqrt(h.shape[1])
        for query, key, value in zip(self.query, self.key, self.value, strict=True):
            logits = (query(h)[i] * key(h)[j]).sum(-1) * scale
            weights = torch.exp(torch.tanh(logits)) * envelope
            messages = value(h)[j] * torch.exp(-0.5 * r)[:, None]
            h = h + torch.tanh(attend(weights, messages, i, h.shape[0]))
        energies = self.readout(h).squeeze(-1)
        energy = energies.new_zeros(inputs.num_graphs).index_add_(0, inputs.batch_idx, energies)
        return {"energies": energies, "energy": energy}

    def distribution_spec(self, strategy=None) -> MLIPSpec:
        """The spec in `self.spec`."""
        return self.spec


# The spec after adding the line trace_and_validate suggests.
SPEC_WITH_ADAPTER = MLIPSpec(
    distribution=DistributionSpec(
        policy=HaloStoragePolicy(),
        custom_ops=(
            OpAdapter(
                op=torch.ops.byo_graph_transformer.attend.default,
                output_transforms={0: ScatterOutputs()},
            ),
        ),
    ),
    output_kinds=SPEC_MPNN_HALO.output_kinds,
)


def trajectory(model: GraphTransformer, world_size: int, steps: int) -> torch.Tensor:
    """Positions after `steps` NVE steps of 1 fs on `world_size` virtual ranks."""
    atoms = bulk("Cu", "fcc", a=3.61, cubic=True) * (4, 4, 4)
    thermalize_momenta(atoms, temperature_K=300, rng=np.random.default_rng(0))

    def rank(comm):
        config = DomainConfig(cutoff=model.cutoff, skin=0.5, mesh=comm)
        dd = DomainParallel(NVE(model, 1.0), config)
        dd.partition(Batch.from_atoms(atoms) if comm.rank == 0 else None)
        dd.run(n_steps=steps)
        return dd.gather(dd.batch).positions

    return run_simulated(world_size, rank)[0]


def main() -> None:
    model = GraphTransformer(SPEC_MPNN_HALO)
    report = trace_and_validate(model)
    print(report, end="\n\n")
    assert not report.ok and "ScatterOutputs()" in report.next_action

    model.spec = SPEC_WITH_ADAPTER  # the suggested line, added to the spec
    print(
        f"the spec with the suggested adapter is the one validation verified: "
        f"{model.spec == report.spec}"
    )
    report = trace_and_validate(model)
    print(report, end="\n\n")
    assert report.ok, report.next_action

    path = Path(tempfile.mkdtemp()) / "graph_transformer.spec.json"
    report.spec.save(path)  # the op is saved by name: import this module before loading
    model.spec = MLIPSpec.load(path)
    model = model.double()
    single, two = trajectory(model, 1, 20), trajectory(model, 2, 20)
    difference = float((two - single).abs().max())
    print(f"20 NVE steps on 2 virtual ranks vs 1: max |position difference| {difference:.1e} Å")
    assert difference < 1e-8


if __name__ == "__main__":
    main()
