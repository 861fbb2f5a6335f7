"""MACEWrapper equals mace-torch's own MACECalculator, single process."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("mace")

from nvdd_plugins import Batch
from nvdd_plugins.models import MACEWrapper, evaluate_model
from tests.helpers.mace_models import (
    mace_calculator_reference,
    tiny_mace,
    with_two_species,
)
from tests.helpers.oracle import assert_close, errors, properties_for
from tests.helpers.systems import SYSTEMS

pytestmark = pytest.mark.mace


@pytest.mark.parametrize("system", sorted(SYSTEMS))
def test_matches_mace_calculator(system: str) -> None:
    model = tiny_mace()
    atoms = with_two_species(SYSTEMS[system]())
    ref = mace_calculator_reference(model, atoms)
    out = evaluate_model(MACEWrapper(model), Batch.from_atoms(atoms), properties_for(atoms))
    assert_close(errors(out, ref, len(atoms)), system)


def test_float32_agrees_with_float64(tmp_path) -> None:
    atoms = with_two_species(SYSTEMS["bulk"]())
    path = tmp_path / "tiny.model"
    torch.save(tiny_mace(), path)
    wide = evaluate_model(MACEWrapper.from_file(path), Batch.from_atoms(atoms))
    narrow_model = MACEWrapper.from_file(path, dtype=torch.float32)
    narrow = evaluate_model(narrow_model, Batch.from_atoms(atoms, dtype=torch.float32))
    assert float((narrow["forces"].double() - wide["forces"]).abs().max()) < 1e-4
    assert narrow["forces"].dtype == torch.float32


def test_unknown_species_raise() -> None:
    atoms = SYSTEMS["bulk"]()
    atoms.numbers[0] = 6
    with pytest.raises(ValueError, match=r"no parameters for C \(6\)"):
        evaluate_model(MACEWrapper(tiny_mace()), Batch.from_atoms(atoms))


def test_spec_marks_mace_scatters_and_survives_a_json_round_trip(tmp_path) -> None:
    from nvdd_plugins.spec import MLIPSpec

    spec = MACEWrapper(tiny_mace()).distribution_spec()
    assert spec.distribution.aggregations_marked
    targets = [adapter.target for adapter in spec.distribution.third_party_helpers]
    assert targets == ["mace.modules.blocks:scatter_sum", "mace.modules.wrapper_ops:scatter_sum"]
    spec.save(tmp_path / "mace.json")
    loaded = MLIPSpec.load(tmp_path / "mace.json")
    assert loaded.to_dict() == spec.to_dict()
