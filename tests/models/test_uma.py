"""UMAWrapper in one process equals fairchem's own UMA forward (its graph, its autograd
force/stress head) in float64; a checkpoint written from the random model loads back to the
same results; unsupported UMA variants are refused. Distributed runs:
tests/multiprocess/test_gloo_uma.py."""

from __future__ import annotations

import pytest

pytest.importorskip("fairchem.core")

import torch

from nvdd_plugins.models.uma import UMAWrapper
from nvdd_plugins.models.uma_builders import random_uma, save_uma_checkpoint, uma_config
from tests.helpers.mace_models import with_two_species
from tests.helpers.oracle import assert_close, errors, properties_for, reference
from tests.helpers.systems import SYSTEMS
from tests.helpers.uma_models import TASK, tiny_uma, uma_reference

pytestmark = pytest.mark.uma


@pytest.mark.parametrize("system", ["bulk", "slab", "cluster"])
def test_float64_matches_fairchem(system: str) -> None:
    atoms = with_two_species(SYSTEMS[system]())
    model = tiny_uma()
    ref = uma_reference(model, atoms)
    result = reference(UMAWrapper(model, task_name=TASK), atoms, properties_for(atoms))
    assert_close(errors(result, ref, len(atoms)), f"uma/{system}")
    assert float(ref["forces"].abs().max()) > 1e-3  # forces worth comparing
    if "stress" in ref:
        assert float(ref["stress"].abs().max()) > 1e-4


def test_checkpoint_round_trip(tmp_path) -> None:
    """A fairchem inference checkpoint written from the random model gives its results."""
    config = uma_config()
    model = random_uma(config, seed=4)
    path = tmp_path / "uma.pt"
    save_uma_checkpoint(model, config, path)
    loaded = UMAWrapper.from_checkpoint(path, task_name=TASK).to(torch.float64)
    atoms = with_two_species(SYSTEMS["bulk"]())
    properties = properties_for(atoms)
    ref = reference(UMAWrapper(model, task_name=TASK), atoms, properties)
    assert_close(errors(reference(loaded, atoms, properties), ref, len(atoms)), "checkpoint")


def test_unsupported_variants_are_refused() -> None:
    direct = random_uma(uma_config(direct_forces=True))
    with pytest.raises(ValueError, match="direct forces"):
        UMAWrapper(direct, task_name=TASK)
    with pytest.raises(ValueError, match="task_name"):
        UMAWrapper(tiny_uma(), task_name="omol")


@pytest.mark.parametrize(("name", "value"), [("charge", 0.5), ("spin", 1.5)])
def test_a_fractional_charge_or_spin_is_refused(name: str, value: float) -> None:
    """charge=0.5 was kept as 0 without a word: fairchem embeds whole numbers only."""
    with pytest.raises(ValueError, match=f"UMA takes a whole-number {name}"):
        UMAWrapper(tiny_uma(), task_name=TASK, **{name: value})
