"""SevenNet models for tests (a tiny random-weight one, the pretrained ones from sevenn's
wheel) and sevenn's own results for them."""

from __future__ import annotations

import copy
import functools

import torch
from ase import Atoms
from torch import nn

from nvdd_plugins.models.sevennet import SevenNetWrapper, random_sevennet
from tests.helpers.materials import MATERIALS

SPECIES = (18, 29)


def tiny_sevennet(seed: int = 0, dtype: torch.dtype = torch.float64) -> nn.Module:
    """2 convolutions, 4 channels, lmax 1, cutoff 4.5 Å, species Ar (18) and Cu (29) with
    per-species shift and scale."""
    return random_sevennet(SPECIES, shift=[-0.5, -1.5], scale=[1.0, 1.3], seed=seed, dtype=dtype)


def sevennet_reference(
    model: nn.Module, atoms: Atoms, modality: str | None = None
) -> dict[str, torch.Tensor]:
    """Energy, per-atom energies, forces and stress (if the cell has a volume) from sevenn's
    whole model: its graph (`unlabeled_atoms_to_graph`), its forward including its own
    edge-gradient force/stress head, and its calculator's conversion to ASE units.

    `modality`: the fidelity of a multi-fidelity model, as sevenn's calculator takes it.
    `model` is changed (sevenn's calculator sets it up for unbatched data). Its graph is
    kept in the model's dtype, where sevenn's calculator would make it float32, and its
    one-hot embedding is cast to that dtype (sevenn's always makes float32).
    """
    from sevenn import _keys as keys
    from sevenn.atom_graph_data import AtomGraphData
    from sevenn.calculator import SevenNetCalculator
    from sevenn.train.dataload import unlabeled_atoms_to_graph
    from sevenn.util import dtype_correct

    dtype = next(model.parameters()).dtype
    embedding = model.get_submodule("onehot_idx_to_onehot")
    if not isinstance(embedding, _OneHotInDtype):  # a model changed by an earlier call
        model.replace_module("onehot_idx_to_onehot", _OneHotInDtype(embedding, dtype))
    calc = SevenNetCalculator(model, file_type="model_instance", device="cpu", modal=modality)
    graph = unlabeled_atoms_to_graph(atoms, calc.cutoff)
    data = AtomGraphData(**{k: dtype_correct(v, dtype) for k, v in graph.items()})
    if modality is not None:
        data[keys.DATA_MODALITY] = modality
    results = calc.output_to_results(calc.model(data))
    ref = {
        "energy": torch.tensor([results["energy"]], dtype=torch.float64),
        "energies": torch.tensor(results["energies"], dtype=torch.float64),
        "forces": torch.tensor(results["forces"], dtype=torch.float64),
    }
    if atoms.cell.rank == 3:
        stress = torch.tensor(results["stress"], dtype=torch.float64)  # xx yy zz yz xz xy
        voigt = [[0, 5, 4], [5, 1, 3], [4, 3, 2]]
        ref["stress"] = stress[torch.tensor(voigt)].unsqueeze(0)
    return ref


class _OneHotInDtype(nn.Module):
    """sevenn's one-hot embedding, its outputs cast to `dtype` (0 and 1: exact)."""

    def __init__(self, embedding: nn.Module, dtype: torch.dtype) -> None:
        super().__init__()
        self.embedding = embedding
        self.dtype = dtype

    def forward(self, data: dict) -> dict:
        data = self.embedding(data)
        for key in (self.embedding.key_output, self.embedding.key_additional_output):
            data[key] = data[key].to(self.dtype)
        return data


@functools.cache
def pretrained_sevennet(name: str = "7net-0", modality: str | None = None) -> SevenNetWrapper:
    """The pretrained SevenNet `name` from sevenn's wheel, in float64, loaded once a process
    (a checkpoint takes 5-10 s to build)."""
    return SevenNetWrapper.from_pretrained(name, modality, dtype=torch.float64)


@functools.cache
def pretrained_reference(system: str, name: str = "7net-0") -> dict[str, torch.Tensor]:
    """sevenn's own float64 forward of the pretrained `name` on `MATERIALS[system]`."""
    model = copy.deepcopy(pretrained_sevennet(name).model)
    return sevennet_reference(model, MATERIALS[system]())
