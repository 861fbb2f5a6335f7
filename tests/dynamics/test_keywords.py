"""Keywords of earlier releases (FIRE's constants, NPT's time scales and chains, one by one
or by position) get a TypeError with the call to write instead."""

from __future__ import annotations

import re

import pytest

from nvdd_plugins.dynamics import FIRE, NPT, FIRESettings, MTKParameters, VariableCellFIRE
from tests.helpers.systems import lj_model


@pytest.mark.parametrize("cls", [FIRE, VariableCellFIRE])
def test_fire_constants_passed_one_by_one_name_fire_settings(cls: type) -> None:
    with pytest.raises(
        TypeError, match=re.escape("pass settings=FIRESettings(dtmax=..., finc=...)")
    ):
        cls(lj_model(), dtmax=1.0, finc=1.2)
    with pytest.raises(TypeError, match=r"settings must be a FIRESettings, got float 0\.2"):
        cls(lj_model(), 0.1, 0.05, *([0.0, None] if cls is VariableCellFIRE else []), 0.2)
    assert cls(lj_model(), settings=FIRESettings(dtmax=1.0)).settings.dtmax == 1.0


def test_npt_time_scales_passed_one_by_one_name_mtk_parameters() -> None:
    with pytest.raises(TypeError, match=re.escape("pass mtk=MTKParameters(tdamp=..., pdamp=...)")):
        NPT(lj_model(), 1.0, 300.0, 0.0, tdamp=100.0, pdamp=1000.0)
    with pytest.raises(TypeError, match=r"mtk must be a MTKParameters, got float 100\.0"):
        NPT(lj_model(), 1.0, 300.0, 0.0, 100.0, 1000.0)
    mtk = MTKParameters(tdamp=100.0, pdamp=1000.0)
    assert NPT(lj_model(), 1.0, 300.0, 0.0, mtk).mtk is mtk
