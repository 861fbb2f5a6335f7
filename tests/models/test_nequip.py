"""NequIPWrapper and AllegroWrapper in one process equal nequip's own ASE calculator (its
neighbour list, its force/stress head) in float64. Distributed runs:
tests/multiprocess/test_gloo_nequip.py and tests/distributed_model/test_nequip_simulated.py."""

from __future__ import annotations

import pytest

pytest.importorskip("nequip")
pytest.importorskip("allegro")

import torch

from nvdd_plugins import Batch
from nvdd_plugins.models import AllegroWrapper, NequIPWrapper, evaluate_model
from nvdd_plugins.spec import MLIPSpec
from tests.helpers.mace_models import with_two_species
from tests.helpers.nequip_models import BUILDERS, nequip_reference, tiny_allegro, tiny_nequip
from tests.helpers.oracle import assert_close, errors, properties_for, reference
from tests.helpers.systems import SYSTEMS

pytestmark = pytest.mark.nequip

WRAPPER_OF = {"nequip": NequIPWrapper, "allegro": AllegroWrapper}


@pytest.mark.parametrize("kind", ["nequip", "allegro"])
@pytest.mark.parametrize("system", ["bulk", "slab", "cluster"])
def test_float64_matches_nequip_calculator(kind: str, system: str) -> None:
    atoms = with_two_species(SYSTEMS[system]())
    model = BUILDERS[kind]()
    ref = nequip_reference(model, atoms)
    result = reference(WRAPPER_OF[kind](model), atoms, properties_for(atoms))
    assert_close(errors(result, ref, len(atoms)), f"{kind}/{system}")
    if "stress" in ref:
        assert float(ref["stress"].abs().max()) > 1e-4  # a stress worth comparing


def test_building_a_model_keeps_the_callers_dtype_and_random_state(monkeypatch) -> None:
    """nequip's global state (float64 default dtype, every generator seeded) is set up by the
    first build, as if none had run in this process, and undone for the caller."""
    import nequip.utils.global_state

    monkeypatch.setattr(nequip.utils.global_state, "_GLOBAL_STATE_INITIALIZED", False)
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    first = tiny_allegro(seed=3)
    assert torch.get_default_dtype() == torch.float32
    assert torch.equal(torch.rand(3), expected)
    same = tiny_allegro(seed=3)
    assert all(
        torch.equal(a, b) for a, b in zip(first.parameters(), same.parameters(), strict=True)
    )


def test_unknown_species_raise() -> None:
    atoms = SYSTEMS["bulk"]()
    atoms.numbers[0] = 6
    with pytest.raises(ValueError, match=r"no parameters for C \(6\)"):
        evaluate_model(NequIPWrapper(tiny_nequip()), Batch.from_atoms(atoms))


def test_type_names_that_are_not_elements_are_refused_with_what_to_pass() -> None:
    """A bare KeyError: 'Xx' before; now the message says to pass chemical_symbols."""
    model = tiny_nequip()
    with pytest.raises(ValueError, match=r"hold \['Xx'\], not element symbols: pass"):
        NequIPWrapper(model, [model.type_names[0], "Xx"])
    renamed = tiny_nequip()
    renamed.type_names = ["A", "B"][: len(renamed.type_names)]
    with pytest.raises(ValueError, match=r"its type_names .* not element symbols"):
        NequIPWrapper(renamed)
    NequIPWrapper(renamed, list(model.type_names))  # the elements of those types


def test_allegro_wrapper_refuses_a_message_passing_model() -> None:
    with pytest.raises(ValueError, match="use NequIPWrapper"):
        AllegroWrapper(tiny_nequip())


def test_specs(tmp_path) -> None:
    """NequIP: the convolutions' scatter marked, one refresh per convolution; Allegro:
    nothing marked, one cutoff of ghosts whatever its layers."""
    nequip = NequIPWrapper(tiny_nequip(num_layers=3)).distribution_spec()
    assert [h.target for h in nequip.distribution.third_party_helpers] == [
        "nequip.nn._tp_scatter_base:scatter"
    ]
    assert nequip.n_layers == 3 and nequip.distribution.edge_target_row == 0
    allegro = AllegroWrapper(tiny_allegro(num_layers=3)).distribution_spec()
    assert allegro.distribution.third_party_helpers == () and allegro.n_layers == 1
    assert allegro.distribution.aggregations_marked and allegro.distribution.edge_target_row == 0
    for name, spec in (("nequip", nequip), ("allegro", allegro)):
        spec.save(tmp_path / f"{name}.json")
        assert MLIPSpec.load(tmp_path / f"{name}.json").to_dict() == spec.to_dict()
