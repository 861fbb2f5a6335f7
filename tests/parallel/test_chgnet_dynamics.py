"""CHGNet 0.3.0 (float64) under DomainParallel: an NVE trajectory of a hot MgO rod on 2
simulated ranks (atoms migrate, the 12 Å shells are rebuilt) stays on the single-process
trajectory."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("chgnet")

from ase.md.velocitydistribution import thermalize_momenta

from nvdd_plugins import Batch
from nvdd_plugins.dynamics import NVE
from tests.helpers.chgnet_models import pretrained_chgnet
from tests.helpers.materials import mgo_rod
from tests.helpers.oracle import assert_trajectory_matches, on_the_oracle

pytestmark = pytest.mark.chgnet

SKIN = 0.3  # Å


def _nve(model):
    return on_the_oracle(NVE(model, 2.0, skin=SKIN))


def test_trajectory_matches_one_process() -> None:
    atoms = mgo_rod()
    thermalize_momenta(atoms, temperature_K=2000, rng=np.random.default_rng(7))
    full = Batch.from_atoms(atoms)
    assert_trajectory_matches(pretrained_chgnet(), full, 10, _nve, SKIN)
