"""Composed models under domain decomposition (simulated ranks): an MLIP plus DFT-D3(BJ)
dispersion, and AIMNet2 with PME plus DFT-D3, each part on its own cutoff, every rank exact
against the same model in one process (float64), empty sub-domains included."""

from __future__ import annotations

import pytest

pytest.importorskip("tad_dftd3")

from nvdd_plugins.models import SumModel
from tests.helpers.dispersion import small_d3
from tests.helpers.oracle import assert_every_rank_close, properties_for, reference
from tests.helpers.systems import SYSTEMS, mpnn_model

pytestmark = pytest.mark.d3


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("system", ["bulk", "slab"])
def test_mlip_plus_d3_matches_one_process(system: str, world_size: int) -> None:
    """The MPNN (4.5 Å) plus D3 (pairs 8 Å, coordination numbers 6 Å) on argon."""
    atoms = SYSTEMS[system]()
    model = SumModel(mpnn_model(), small_d3())
    ref = reference(model, atoms, properties_for(atoms))
    grid = (1, 1, 1) if world_size == 1 else None
    assert_every_rank_close(world_size, model, atoms, ref, f"{system}/{world_size}", grid=grid)


@pytest.mark.mace
def test_mace_plus_d3_matches_one_process() -> None:
    pytest.importorskip("mace")
    from nvdd_plugins.models import MACEWrapper
    from tests.helpers.mace_models import tiny_mace, with_two_species

    atoms = with_two_species(SYSTEMS["bulk"]())
    model = SumModel(MACEWrapper(tiny_mace()), small_d3())
    ref = reference(model, atoms, properties_for(atoms))
    assert_every_rank_close(4, model, atoms, ref, "mace+d3")


@pytest.mark.aimnet
def test_aimnet2_pme_plus_d3_matches_one_process() -> None:
    """Three parts' distributions in one forward: the AEV sums refreshed, the charge sums
    and the PME mesh all-reduced, D3's coordination numbers refreshed."""
    pytest.importorskip("aimnet")
    from tests.helpers.aimnet_models import (
        aimnet_calculator,
        lattice_wrapper,
        tiny_aimnet2,
        with_species,
    )

    atoms = with_species(SYSTEMS["bulk"]())
    calc = aimnet_calculator(tiny_aimnet2(), method="pme")
    model = SumModel(lattice_wrapper(calc, atoms), small_d3())
    ref = reference(model, atoms, properties_for(atoms))
    assert_every_rank_close(2, model, atoms, ref, "aimnet2+pme+d3")
