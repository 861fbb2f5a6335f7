"""`trace_and_validate` reports on the shipped MACE wrappers: the one-line call works on a
model of any species (the default sample is made of the model's own), with the compile=True
rules checked, on an e3nn model and a cuEquivariance one."""

from __future__ import annotations

import importlib.util

import pytest

pytest.importorskip("mace")

from nvdd_plugins.models import MACEArchitecture, MACEWrapper, random_mace
from nvdd_plugins.validate import trace_and_validate

pytestmark = pytest.mark.mace


def _small_mace(species: int):
    return random_mace([species], architecture=MACEArchitecture(max_ell=1, num_interactions=1))


def test_the_one_line_call_validates_a_copper_mace_with_the_compile_rules() -> None:
    report = trace_and_validate(MACEWrapper(_small_mace(29)), world_size=2)
    assert report.ok, report
    assert report.notes == ()  # compile=True rules checked too


@pytest.mark.skipif(
    importlib.util.find_spec("cuequivariance_torch") is None, reason="needs cuequivariance"
)
def test_a_cuequivariance_mace_is_validated_with_the_compile_rules() -> None:
    model = MACEWrapper(_small_mace(18), cuequivariance=True)
    report = trace_and_validate(model, world_size=2)
    assert report.ok, report
    assert report.notes == ()  # compile=True rules checked too
