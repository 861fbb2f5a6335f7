"""The user guide's custom-op spec, as a user writes it (output kinds without "energies"),
is accepted and exact; without its adapter the same model is wrong."""

from __future__ import annotations

import math

import pytest
import torch

from nvdd_plugins import Batch, DomainConfig, ReplicatedModel
from nvdd_plugins.comm import run_simulated
from nvdd_plugins.ops import HaloStoragePolicy, ScatterOutputs
from nvdd_plugins.spec import DistributionSpec, MLIPSpec, OpAdapter, OutputKind
from tests.helpers.oracle import errors, reference
from tests.helpers.systems import SYSTEMS, ShiftPairModel


@torch.library.custom_op("mypkg::my_energy_op", mutates_args=())
def my_energy_op(edge_values: torch.Tensor, receivers: torch.Tensor, n: int) -> torch.Tensor:
    """An opaque kernel: per-edge values summed onto their receivers."""
    return edge_values.new_zeros(n).index_add_(0, receivers, edge_values)


@my_energy_op.register_fake
def _(edge_values: torch.Tensor, receivers: torch.Tensor, n: int) -> torch.Tensor:
    return edge_values.new_empty(n)


def _setup(ctx, inputs, output) -> None:
    ctx.save_for_backward(inputs[1])


def _backward(ctx, grad: torch.Tensor):
    (receivers,) = ctx.saved_tensors
    return grad[receivers], None, None


my_energy_op.register_autograd(_backward, setup_context=_setup)


def _build_spec() -> MLIPSpec:
    return MLIPSpec(
        distribution=DistributionSpec(
            policy=HaloStoragePolicy(),  # halo layout
            custom_ops=(  # one OpAdapter per opaque kernel
                OpAdapter(
                    op=torch.ops.mypkg.my_energy_op.default,
                    arg_transforms={},  # inputs already halo-padded
                    output_transforms={0: ScatterOutputs()},  # halo-correct output 0
                ),
            ),
        ),
        output_kinds={"energy": OutputKind.PER_GRAPH, "forces": OutputKind.PER_NODE},
    )


class DensityModel(ShiftPairModel):
    """Two passes through the opaque kernel: a pair density per atom, then energies from the
    neighbours' densities (so ghost densities must be complete)."""

    def __init__(self, spec: MLIPSpec, cutoff: float = 4.5) -> None:
        super().__init__(cutoff)
        self.spec = spec

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        inputs = self.adapt_input(batch)
        i, j = inputs.edge_index
        n = inputs.positions.shape[0]
        rij = inputs.positions[j] - inputs.positions[i] + inputs.shifts
        r = rij.norm(dim=-1)
        smooth = 0.5 * (torch.cos(math.pi * r / self.cutoff) + 1.0) * (r < self.cutoff)
        density = my_energy_op(torch.exp(-r) * smooth, i, n)
        pair = torch.tanh(density[j]) * torch.exp(-0.5 * r) * smooth
        energies = my_energy_op(pair, i, n) - density.sqrt()
        energy = energies.new_zeros(inputs.num_graphs).index_add_(0, inputs.batch_idx, energies)
        return {"energies": energies, "energy": energy}

    def distribution_spec(self, strategy=None) -> MLIPSpec:
        return self.spec


def _worst(spec: MLIPSpec, world_size: int) -> dict[str, float]:
    model = DensityModel(spec).double()
    atoms = SYSTEMS["bulk"]()
    ref = reference(model, atoms, ("energy", "forces", "stress"))

    def run(comm):
        distributed = ReplicatedModel(model, DomainConfig(cutoff=model.cutoff, mesh=comm))
        return distributed(Batch.from_atoms(atoms), ("energy", "forces", "stress"))

    results = run_simulated(world_size, run, timeout=60)
    worst: dict[str, float] = {}
    for result in results:
        for name, value in errors(result, ref, len(atoms)).items():
            worst[name] = max(worst.get(name, 0.0), value)
    return worst


@pytest.mark.parametrize("world_size", [2, 3])
def test_the_guide_custom_op_spec_is_exact(world_size: int) -> None:
    worst = _worst(_build_spec(), world_size)
    assert worst["energy"] < 1e-10 and worst["forces"] < 1e-10 and worst["stress"] < 1e-10


def test_without_its_adapter_the_model_is_wrong() -> None:
    spec = MLIPSpec(output_kinds={"energy": OutputKind.PER_GRAPH})  # forces: PER_NODE unlisted
    assert _worst(spec, 2)["forces"] > 1e-4
