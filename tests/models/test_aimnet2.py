"""AIMNet2Wrapper in one process equals aimnet's own calculator in float64 (damped shifted
force Coulomb): energy, forces, charges and stress. Its results through DistributedModel are
checked in tests/distributed_model/test_aimnet2_simulated.py."""

from __future__ import annotations

import pytest

pytest.importorskip("aimnet")

import torch

from nvdd_plugins import Batch
from nvdd_plugins.models import PME, AIMNet2Wrapper, Ewald, evaluate_model
from nvdd_plugins.models.aimnet2 import aimnet_electrostatics
from nvdd_plugins.spec import MLIPSpec
from tests.helpers.aimnet_models import (
    LATTICE_CUTOFF,
    PME_AGAINST_AIMNET,
    aimnet_calculator,
    aimnet_reference,
    assert_aimnet_close,
    lattice_case,
    tiny_aimnet2,
    with_species,
)
from tests.helpers.oracle import properties_for
from tests.helpers.systems import SYSTEMS

pytestmark = pytest.mark.aimnet


def compare(wrapper: AIMNet2Wrapper, calc, atoms, charge: float = 0.0, mult: float = 1.0):
    """Max deviations of the wrapper in one process from aimnet's calculator."""
    ref = aimnet_reference(calc, atoms, charge, mult)
    ours = evaluate_model(wrapper, Batch.from_atoms(atoms), properties_for(atoms))
    errs = {k: float((ours[k] - ref[k]).abs().max()) for k in ref}
    errs["energy"] /= len(atoms)
    return errs, ref


@pytest.mark.parametrize(("system", "charge"), [("cluster", 1.0), ("cluster", 0.0), ("bulk", 0.0)])
def test_float64_matches_aimnet_calculator(system: str, charge: float) -> None:
    atoms = with_species(SYSTEMS[system]())
    model = tiny_aimnet2()
    calc = aimnet_calculator(model)
    errs, ref = compare(AIMNet2Wrapper(model, calc.external_coulomb, charge), calc, atoms, charge)
    assert_aimnet_close(errs, system)
    assert abs(float(ref["charges"].sum()) - charge) < 1e-4  # the equilibration acted
    assert float(ref["forces"].abs().max()) > 1e-3
    if "stress" in ref:
        assert float(ref["stress"].abs().max()) > 1e-5


def test_open_shell_model_matches_aimnet_calculator() -> None:
    atoms = with_species(SYSTEMS["cluster"](), seed=1)
    model = tiny_aimnet2(seed=1, num_charge_channels=2)
    calc = aimnet_calculator(model)
    wrapper = AIMNet2Wrapper(model, calc.external_coulomb, charge=-1.0, mult=3.0)
    errs, _ = compare(wrapper, calc, atoms, charge=-1.0, mult=3.0)
    assert_aimnet_close(errs, "open shell")


def test_a_different_total_charge_changes_the_result() -> None:
    """Negative control: the comparison sees the charge constraint."""
    atoms = with_species(SYSTEMS["cluster"]())
    model = tiny_aimnet2()
    calc = aimnet_calculator(model)
    errs, _ = compare(AIMNet2Wrapper(model, calc.external_coulomb, charge=0.0), calc, atoms, 1.0)
    assert errs["charges"] > 1e-3 and errs["forces"] > 1e-6


def test_all_pairs_coulomb_is_refused() -> None:
    calc = aimnet_calculator(tiny_aimnet2())
    calc.external_coulomb.method = "simple"
    with pytest.raises(ValueError, match="not local"):
        AIMNet2Wrapper(calc.model, calc.external_coulomb)


@pytest.mark.parametrize("method", ["ewald", "pme"])
def test_lattice_sums_match_aimnet_calculator(method: str) -> None:
    """Ewald and PME with the same fixed parameters on both sides (alpha, the k-vectors or
    mesh, the real-space cutoff) on a sheared H/C/O crystal. The lattice sum matters: it
    moves the energy by 0.12 eV from damped shifted force."""
    atoms = with_species(SYSTEMS["bulk"]())
    wrapper, ref = lattice_case(method, atoms)
    ours = evaluate_model(wrapper, Batch.from_atoms(atoms), properties_for(atoms))
    errs = {k: float((ours[k] - ref[k]).abs().max()) for k in ref}
    errs["energy"] /= len(atoms)
    assert_aimnet_close(errs, method, PME_AGAINST_AIMNET if method == "pme" else None)
    dsf = aimnet_reference(aimnet_calculator(tiny_aimnet2()), atoms)
    assert abs(float(dsf["energy"] - ref["energy"])) > 0.05
    assert wrapper.cutoff == LATTICE_CUTOFF and not wrapper.model_config.edge_energy


@pytest.mark.parametrize("method", ["ewald", "pme"])
def test_parameters_as_aimnet_estimates_them(method: str) -> None:
    """With `aimnet_electrostatics`'s parameters the wrapper equals aimnet's calculator left
    to its own estimate; with other fixed parameters it does not (negative control)."""
    atoms = with_species(SYSTEMS["bulk"]())
    calc = aimnet_calculator(tiny_aimnet2(), method=method)
    ref = aimnet_reference(calc, atoms)
    estimated = AIMNet2Wrapper.from_calculator(calc, 0.0, 1.0, *aimnet_electrostatics(calc, atoms))
    other = AIMNet2Wrapper.from_calculator(calc, 0.0, 1.0, *_other_parameters(method))
    for wrapper, agrees in ((estimated, True), (other, False)):
        ours = evaluate_model(wrapper, Batch.from_atoms(atoms), ("energy",))
        error = abs(float(ours["energy"] - ref["energy"])) / len(atoms)
        assert (error < PME_AGAINST_AIMNET["energy"]) is agrees, (method, agrees, error)


def _other_parameters(method: str) -> tuple[Ewald | PME, float]:
    if method == "ewald":
        return Ewald(0.4, 3.0, k_set="box"), 7.0
    return PME(0.4, (24, 24, 24), 5, scheme="nvalchemiops"), 7.0


def test_lattice_sum_parameters_are_checked() -> None:
    ewald = aimnet_calculator(tiny_aimnet2(), method="ewald")
    with pytest.raises(ValueError, match="needs its parameters fixed"):
        AIMNet2Wrapper.from_calculator(ewald)
    with pytest.raises(ValueError, match=r"electrostatics=Ewald\(\.\.\.\)"):
        AIMNet2Wrapper.from_calculator(ewald, 0.0, 1.0, PME(0.4, (24,) * 3, 4), 7.0)
    with pytest.raises(ValueError, match="no Coulomb head uses"):
        AIMNet2Wrapper.from_calculator(aimnet_calculator(tiny_aimnet2()), 0.0, 1.0, Ewald(0.4, 3.0))
    wrapper = AIMNet2Wrapper.from_calculator(ewald, 0.0, 1.0, Ewald(0.4, 3.0, "box"), 7.0)
    with pytest.raises(ValueError, match="periodic along all three axes"):
        evaluate_model(wrapper, Batch.from_atoms(with_species(SYSTEMS["slab"]())), ("energy",))
    with pytest.raises(ValueError, match="set_lrcoulomb_method"):
        aimnet_electrostatics(aimnet_calculator(tiny_aimnet2()), SYSTEMS["bulk"]())


def test_cutoff_covers_the_coulomb_partners() -> None:
    calc = aimnet_calculator(tiny_aimnet2(), dsf_cutoff=9.0)
    assert AIMNet2Wrapper(calc.model, calc.external_coulomb).cutoff == 9.0
    assert AIMNet2Wrapper(calc.model).cutoff == 5.0


def test_spec_all_reduces_the_charge_sums_and_survives_a_json_round_trip(tmp_path) -> None:
    spec = AIMNet2Wrapper(tiny_aimnet2()).distribution_spec()
    distribution = spec.distribution
    assert not distribution.aggregations_marked and distribution.edge_target_row == 0
    assert [h.target for h in distribution.third_party_helpers] == ["aimnet.nbops:mol_sum"]
    assert spec.output_kinds["charges"] == "per_node"
    spec.save(tmp_path / "aimnet2.json")
    assert MLIPSpec.load(tmp_path / "aimnet2.json").to_dict() == spec.to_dict()


def test_float32_model_runs() -> None:
    atoms = with_species(SYSTEMS["cluster"]())
    wrapper = AIMNet2Wrapper(tiny_aimnet2().float())
    out = evaluate_model(wrapper, Batch.from_atoms(atoms, dtype=torch.float32), ("energy",))
    assert out["energies"].dtype == torch.float32


def test_from_calculator_takes_its_model_and_coulomb() -> None:
    calc = aimnet_calculator(tiny_aimnet2())
    wrapper = AIMNet2Wrapper.from_calculator(calc, charge=1.0)
    assert wrapper.model is calc.model and wrapper.coulomb is calc.external_coulomb
    assert wrapper.charge == 1.0 and wrapper.cutoff == 7.5
    calc.external_dftd3 = object()
    with pytest.raises(ValueError, match="DFT-D3"):
        AIMNet2Wrapper.from_calculator(calc)


def test_unknown_species_raise() -> None:
    atoms = with_species(SYSTEMS["cluster"]())
    atoms.numbers[0] = 79
    with pytest.raises(ValueError, match=r"no parameters for Au \(79\)"):
        evaluate_model(AIMNet2Wrapper(tiny_aimnet2()), Batch.from_atoms(atoms))
    model = tiny_aimnet2()
    model.__dict__["_metadata"]["implemented_species"] = [1, 6]
    with pytest.raises(ValueError, match=r"no parameters for O \(8\), Au \(79\)"):
        evaluate_model(AIMNet2Wrapper(model), Batch.from_atoms(atoms))


def test_lammps_refuses_a_lattice_sum_naming_the_alternatives() -> None:
    """ML-IAP hands a model atoms and neighbour pairs only: no reciprocal sum (nor a SumModel
    holding one) can run through `pair_style mliap unified`."""
    pytest.importorskip("lammps")
    from lammps_interface import MLIAPModel
    from nvdd_plugins.models import SumModel

    atoms = with_species(SYSTEMS["bulk"]())
    wrapper, _ = lattice_case("pme", atoms)
    for model in (wrapper, SumModel(wrapper, AIMNet2Wrapper(tiny_aimnet2(seed=1)))):
        with pytest.raises(ValueError, match="reciprocal-space term") as raised:
            MLIAPModel(model, ["H", "C", "O"])
        assert "DomainParallel or the ASE calculator" in str(raised.value)
