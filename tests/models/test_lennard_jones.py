"""LennardJonesModel equals ASE's LennardJones (shifted at the cutoff) to 1e-10."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from ase.calculators.lj import LennardJones

from nvdd_plugins import Batch
from nvdd_plugins.geometry import attach_neighbor_list
from nvdd_plugins.models import LennardJonesModel, asked_for, asking_for, evaluate_model
from tests.helpers.systems import LJ_CUTOFF, LJ_EPSILON, LJ_SIGMA, SYSTEMS, lj_model


@pytest.mark.parametrize("system", sorted(SYSTEMS))
def test_matches_ase(system: str) -> None:
    atoms = SYSTEMS[system]()
    reference = atoms.copy()
    reference.calc = LennardJones(epsilon=LJ_EPSILON, sigma=LJ_SIGMA, rc=LJ_CUTOFF)
    out = evaluate_model(lj_model(), Batch.from_atoms(atoms), ("energy", "forces", "stress"))
    assert abs(float(out["energy"][0]) - reference.get_potential_energy()) < 1e-10
    assert np.abs(out["forces"].numpy() - reference.get_forces()).max() < 1e-10
    assert np.abs(out["energies"].numpy() - reference.get_potential_energies()).max() < 1e-10
    if atoms.cell.rank == 3:
        stress = reference.get_stress(voigt=False)
        assert np.abs(out["stress"][0].numpy() - stress).max() < 1e-10
    assert np.abs(out["forces"].sum(0).numpy()).max() < 1e-10


def test_unshifted_energy_differs_by_the_cutoff_offset() -> None:
    atoms = SYSTEMS["bulk"]()
    batch = Batch.from_atoms(atoms)
    shifted = evaluate_model(lj_model(), batch.clone())
    plain = evaluate_model(LennardJonesModel(LJ_EPSILON, LJ_SIGMA, LJ_CUTOFF), batch.clone())
    assert float(plain["energy"][0]) < float(shifted["energy"][0])
    assert np.allclose(plain["forces"].numpy(), shifted["forces"].numpy(), atol=1e-14)


def test_rejects_bad_parameters() -> None:
    with pytest.raises(ValueError, match="positive"):
        LennardJonesModel(epsilon=-1.0, sigma=3.4, cutoff=8.0)


def test_stress_only_when_asked() -> None:
    """An evaluation that asks for neither stress nor per-atom stresses gets neither (the
    kernel skips the virials) and the same energies and forces; a direct call gets all."""
    batch = Batch.from_atoms(SYSTEMS["bulk"]())
    asked = evaluate_model(lj_model(), batch.clone(), ("energy", "forces", "stress"))
    skipped = evaluate_model(lj_model(), batch.clone(), ("energy", "forces"))
    assert "stress" not in skipped and "stresses" not in skipped
    assert torch.equal(skipped["forces"], asked["forces"])
    assert torch.equal(skipped["energies"], asked["energies"])
    listed = batch.clone()
    attach_neighbor_list(listed, LJ_CUTOFF)
    direct = lj_model()(listed)
    assert torch.equal(direct["stress"].detach(), asked["stress"])


def test_asking_for_nests_and_restores() -> None:
    assert asked_for("stress")  # outside any evaluation everything is asked for
    with asking_for(("energy", "forces")):
        assert not asked_for("stress", "stresses") and asked_for("forces")
        with asking_for(("stresses",)):
            assert asked_for("stress", "stresses")
        assert not asked_for("stresses")
    assert asked_for("stress")


def test_asking_for_is_per_thread() -> None:
    """Simulated ranks are threads: one's request never leaks into another's."""
    seen = []
    with asking_for(("energy",)):
        worker = threading.Thread(target=lambda: seen.append(asked_for("stress")))
        worker.start()
        worker.join()
    assert seen == [True]
