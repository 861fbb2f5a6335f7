"""The ASE calculator under real `mpirun` (1, 2 and 4 ranks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.multiprocess import run_mpi

pytestmark = pytest.mark.multiprocess

SCRIPT = Path(__file__).parent / "mpi_scripts" / "ase_checks.py"


@pytest.mark.parametrize("n_ranks", [1, 2, 4])
def test_ase_calculator_under_mpirun(n_ranks: int) -> None:
    output = run_mpi(n_ranks, SCRIPT, timeout=300)
    assert output.count("ALL OK") == n_ranks, output
