"""Bring your own model: a plain-PyTorch message-passing potential made distributable.

    python examples/distributed/04_byo_pytorch_mpnn.py

The wrapper below knows nothing about ranks. It declares `SPEC_MPNN_HALO` and follows the
four halo rules: per-atom energies over all local atoms, rebound in-place scatters, sentinel
edges filtered (`BaseModelMixin.adapt_input`), minimum-image displacements. The script wraps
it, validates it with `trace_and_validate` (2 simulated ranks against the single-process
run), saves and loads the verified spec, and runs it on 1, 2 and 4 virtual ranks.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import torch
from ase.build import bulk
from torch import nn

from nvdd_plugins import Batch, DomainConfig, ReplicatedModel
from nvdd_plugins.comm import run_simulated
from nvdd_plugins.geometry import minimum_image
from nvdd_plugins.models import BaseModelMixin, ModelConfig, NeighborConfig, evaluate_model
from nvdd_plugins.spec import SPEC_MPNN_HALO, MLIPSpec
from nvdd_plugins.validate import trace_and_validate


class TwoLayerMPNN(nn.Module, BaseModelMixin):
    """Two rounds of distance-weighted messages, then a per-atom energy readout."""

    def __init__(self, cutoff: float = 5.0, width: int = 16) -> None:
        super().__init__()
        self.spec = SPEC_MPNN_HALO  # scatter-based with autograd forces: the shipped preset
        torch.manual_seed(0)
        self.embed = nn.Embedding(100, width)
        self.mix = nn.ModuleList(nn.Linear(width, width) for _ in range(2))
        self.readout = nn.Sequential(nn.Linear(width, width), nn.Tanh(), nn.Linear(width, 1))
        self.model_config = ModelConfig(
            autograd_outputs=frozenset({"forces", "stress"}),
            autograd_inputs=frozenset({"positions"}),
            # messages weigh pairs at r >= cutoff exactly zero: Verlet pairs may come unfiltered
            neighbor_config=NeighborConfig(cutoff=cutoff, accepts_skin_pairs=True),
        )

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        inputs = self.adapt_input(batch)  # rule 3: drops sentinel (padding) edges
        i, j = inputs.edge_index
        rij = inputs.positions[j] - inputs.positions[i]
        rij = minimum_image(rij, inputs.cell[0], inputs.pbc[0])  # rule 4
        r = rij.norm(dim=-1, keepdim=True)
        weight = 0.5 * (torch.cos(math.pi * r / self.cutoff) + 1.0) * (r < self.cutoff)
        h = self.embed(inputs.atomic_numbers)
        for layer in self.mix:
            messages = torch.tanh(layer(h))[j] * weight
            aggregated = torch.zeros_like(h)
            aggregated = aggregated.index_add_(0, i, messages)  # rule 2: rebind the scatter
            h = h + aggregated
        energies = self.readout(h).squeeze(-1)  # rule 1: all local atoms, never pre-sliced
        energy = energies.new_zeros(inputs.num_graphs).index_add_(0, inputs.batch_idx, energies)
        return {"energies": energies, "energy": energy}

    def distribution_spec(self, strategy=None) -> MLIPSpec:
        """The spec in `self.spec` (the preset, or one loaded from a file)."""
        return self.spec


def main() -> None:
    model = TwoLayerMPNN()
    report = trace_and_validate(model, world_size=2)
    print(report)
    assert report.ok, report.next_action
    path = Path(tempfile.mkdtemp()) / "two_layer_mpnn.spec.json"
    report.spec.save(path)
    model.spec = MLIPSpec.load(path)  # production runs load the verified spec
    print(f"spec saved to {path}; MLIPSpec.load gives it back: {model.spec == report.spec}")

    model = model.double()
    atoms = bulk("Cu", "fcc", a=3.61, cubic=True) * (4, 4, 4)
    atoms.rattle(0.05, seed=1)
    properties = ("energy", "forces", "stress")
    reference = evaluate_model(model, Batch.from_atoms(atoms), properties)
    for world_size in (1, 2, 4):

        def rank(comm):
            config = DomainConfig(cutoff=model.cutoff, skin=0.3, mesh=comm)
            return ReplicatedModel(model, config)(Batch.from_atoms(atoms), properties)

        result = run_simulated(world_size, rank)[0]
        errors = {k: float((result[k] - reference[k]).abs().max()) for k in properties}
        print(
            f"{world_size} rank(s): max |difference| "
            + ", ".join(f"{k} {v:.1e}" for k, v in errors.items())
        )
        assert errors["forces"] < 1e-8, errors


if __name__ == "__main__":
    main()
