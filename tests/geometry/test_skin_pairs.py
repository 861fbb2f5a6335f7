"""Verlet pairs up to cutoff + skin go to a model unfiltered (`accepts_skin_pairs`) only when
every periodic width exceeds 2 × (cutoff + skin): otherwise a minimum-image model folds a skin
pair onto another image of its pair and counts it twice (seen: torture seed 1449, a 9.3 Å
periodic axis, cutoff 4.5 Å, skin 0.5 Å; forces off by 5e-5 eV/Å, also in one process)."""

from __future__ import annotations

import pytest
import torch

from nvdd_plugins import Batch
from nvdd_plugins.comm import run_simulated
from nvdd_plugins.geometry.cell import images_unambiguous
from nvdd_plugins.models import ModelEvaluator, evaluate_model
from tests.helpers.oracle import assert_close, errors, reference, replicated
from tests.torture.cases import draw_case


@pytest.mark.parametrize(
    ("width", "pbc", "expected"),
    [(10.1, (True, False, False), True), (9.3, (True, False, False), False), (9.3, False, True)],
)
def test_images_unambiguous(width: float, pbc, expected: bool) -> None:
    cell = torch.diag(torch.tensor([width, 30.0, 30.0], dtype=torch.float64))
    assert images_unambiguous(cell, pbc, 5.0) is expected


def _narrow_case():
    case = draw_case(1449, ("replicated",))
    return case.model.build(), case.atoms()


def test_single_process_verlet_list_in_a_narrow_cell() -> None:
    model, atoms = _narrow_case()
    exact = evaluate_model(model, Batch.from_atoms(atoms))
    with_skin = ModelEvaluator(model, skin=0.5)(Batch.from_atoms(atoms))
    assert float((with_skin["forces"] - exact["forces"]).abs().max()) < 1e-10


def test_distributed_model_in_a_narrow_cell() -> None:
    model, atoms = _narrow_case()
    ref = reference(model, atoms, ("energy", "forces"))
    for world_size in (1, 2):
        for result in run_simulated(
            world_size, lambda comm: replicated(comm, model, atoms, ("energy", "forces"), skin=0.5)
        ):
            assert_close(errors(result, ref, len(atoms)), f"narrow cell, {world_size} ranks")
