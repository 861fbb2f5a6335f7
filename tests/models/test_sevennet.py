"""SevenNetWrapper in one process equals sevenn's own model: its whole forward with its own
force/stress head in float64, and its ASE calculator as shipped (float32). Its results
through DistributedModel are checked in tests/distributed_model/test_sevennet_simulated.py."""

from __future__ import annotations

import pytest

pytest.importorskip("sevenn")

import torch

from nvdd_plugins import Batch
from nvdd_plugins.models import SevenNetWrapper, evaluate_model
from nvdd_plugins.spec import MLIPSpec
from tests.helpers.mace_models import with_two_species
from tests.helpers.oracle import assert_close, errors, properties_for, reference
from tests.helpers.sevennet_models import sevennet_reference, tiny_sevennet
from tests.helpers.systems import SYSTEMS

pytestmark = pytest.mark.sevenn


@pytest.mark.parametrize("system", ["bulk", "slab", "cluster"])
def test_float64_matches_sevenn_forward(system: str) -> None:
    atoms = with_two_species(SYSTEMS[system]())
    ref = sevennet_reference(tiny_sevennet(), atoms)
    result = reference(SevenNetWrapper(tiny_sevennet()), atoms, properties_for(atoms))
    assert_close(errors(result, ref, len(atoms)), system)
    if "stress" in ref:
        assert float(ref["stress"].abs().max()) > 1e-4  # a stress worth comparing


def test_float32_matches_sevenn_ase_calculator() -> None:
    from sevenn.calculator import SevenNetCalculator

    atoms = with_two_species(SYSTEMS["bulk"]())
    shipped = atoms.copy()
    shipped.calc = SevenNetCalculator(
        tiny_sevennet(dtype=torch.float32), file_type="model_instance", device="cpu"
    )
    wrapper = SevenNetWrapper(tiny_sevennet(dtype=torch.float32))
    ours = evaluate_model(
        wrapper, Batch.from_atoms(atoms, dtype=torch.float32), ("energy", "forces", "stress")
    )
    assert ours["forces"].dtype == torch.float32
    energy = float(ours["energy"].double()[0])
    assert abs(energy - shipped.get_potential_energy()) / len(atoms) < 1e-6
    forces = torch.tensor(shipped.get_forces())
    assert float((ours["forces"].double() - forces).abs().max()) < 1e-4
    stress = ours["stress"][0].double().numpy()
    assert abs(stress - shipped.get_stress(voigt=False)).max() < 1e-5


def test_unknown_species_raise() -> None:
    atoms = SYSTEMS["bulk"]()
    atoms.numbers[0] = 6
    with pytest.raises(ValueError, match=r"no parameters for C \(6\)"):
        evaluate_model(SevenNetWrapper(tiny_sevennet()), Batch.from_atoms(atoms))


def test_spec_marks_message_gather_and_survives_a_json_round_trip(tmp_path) -> None:
    spec = SevenNetWrapper(tiny_sevennet()).distribution_spec()
    distribution = spec.distribution
    assert distribution.aggregations_marked and distribution.edge_target_row == 0
    assert [h.target for h in distribution.third_party_helpers] == [
        "sevenn.nn.convolution:message_gather"
    ]
    assert spec.n_layers == 2
    spec.save(tmp_path / "sevennet.json")
    assert MLIPSpec.load(tmp_path / "sevennet.json").to_dict() == spec.to_dict()


def test_built_eagerly_whatever_e3nn_global_jit_mode() -> None:
    """A nequip model built earlier in the process leaves e3nn's jit mode at "script"; sevenn
    models built afterwards still pickle (LAMMPS model files, spawned ranks)."""
    import pickle

    import e3nn

    mode = e3nn.get_optimization_defaults()["jit_mode"]
    e3nn.set_optimization_defaults(jit_mode="script")
    try:
        pickle.dumps(SevenNetWrapper(tiny_sevennet()))
        assert e3nn.get_optimization_defaults()["jit_mode"] == "script"
    finally:
        e3nn.set_optimization_defaults(jit_mode=mode)
