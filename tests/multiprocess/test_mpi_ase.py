"""The ASE calculator under real `mpirun` (1, 2 and 4 ranks; CI: 1 and 2, see docs/testing.md)."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from tests.helpers.multiprocess import run_command, run_mpi

pytestmark = pytest.mark.multiprocess

SCRIPT = Path(__file__).parent / "mpi_scripts" / "ase_checks.py"


# 4 ranks only in test-all (CI: 4 real ranks in test_gloo_model.py and test_gloo_graph.py,
# the calculator at up to 8 simulated ranks in the torture suite's ASE path)
@pytest.mark.parametrize("n_ranks", [1, 2, pytest.param(4, marks=pytest.mark.slow)])
def test_ase_calculator_under_mpirun(n_ranks: int) -> None:
    output = run_mpi(n_ranks, SCRIPT, timeout=300)
    assert output.count("ALL OK") == n_ranks, output


FAILURES = Path(__file__).parent / "mpi_scripts" / "ase_failures.py"


def _plain_mpirun(mode: str, timeout: float = 60) -> tuple[int, str]:
    command = ["mpirun", "-n", "2", sys.executable, str(FAILURES), mode]
    return run_command(command, None, timeout)


def test_stress_asked_on_one_rank_is_served_from_the_cache() -> None:
    code, output = _plain_mpirun("stress", timeout=120)
    assert code == 0, output
    assert "stress on rank 0 alone" in output and output.count("DONE") == 2


def test_one_rank_raising_aborts_all_without_m_mpi4py() -> None:
    code, output = _plain_mpirun("raise")
    assert code != 0, output
    assert "rank 1 failed on purpose" in output
    assert "rank 0 was not stopped" not in output


def test_a_rank_raising_before_its_calculator_exists_aborts_all() -> None:
    """Importing the calculator module installs the abort hook under a multi-rank mpirun."""
    code, output = _plain_mpirun("early")
    assert code != 0, output
    assert "rank 1 failed before building a calculator" in output
    assert "rank 0 was not stopped" not in output


def test_nan_on_one_rank_is_raised_on_every_rank_naming_its_atoms() -> None:
    code, output = _plain_mpirun("nan", timeout=120)
    assert code == 0, output
    # mpirun may forward two ranks' lines joined: each field ends where the next one starts
    field = r"(.*?)(?=rank \d (?:raised|owns) |$)"
    raised = sorted(re.findall(rf"rank (\d) raised: {field}", output, re.MULTILINE))
    assert [rank for rank, _ in raised] == ["0", "1"], output
    assert raised[0][1] == raised[1][1], output  # the same message on every rank
    owned = json.loads(re.search(r"rank 1 owns (\[[\d, ]*\])", output).group(1))
    assert len(owned) > 10, output
    expected = f"non-finite energies on rank 1: atoms {owned[:10]} and {len(owned) - 10} more. "
    assert raised[0][1].startswith(expected), output


STRESSES = Path(__file__).parent / "mpi_scripts" / "ase_stresses.py"


@pytest.mark.parametrize(
    "n_ranks", [pytest.param(1, marks=pytest.mark.slow), 2, pytest.param(4, marks=pytest.mark.slow)]
)
def test_per_atom_stresses_under_mpirun(n_ranks: int) -> None:
    output = run_mpi(n_ranks, STRESSES, timeout=300)
    assert output.count("STRESSES OK") == n_ranks, output


RIGID_ION = Path(__file__).parent / "mpi_scripts" / "ase_rigid_ion.py"


def test_ewald_and_pme_under_mpirun() -> None:
    output = run_mpi(2, RIGID_ION, timeout=300)  # 4 ranks: test_gloo_rigid_ion.py
    assert output.count("RIGID ION OK") == 2, output


NEQUIP = Path(__file__).parent / "mpi_scripts" / "ase_nequip.py"


@pytest.mark.nequip
@pytest.mark.skipif(importlib.util.find_spec("allegro") is None, reason="needs nequip-allegro")
def test_nequip_and_allegro_under_mpirun() -> None:
    """2 ranks (1, 2 and 4 real ranks: tests/multiprocess/test_gloo_nequip.py)."""
    output = run_mpi(2, NEQUIP, timeout=300)
    assert output.count("NEQUIP ASE OK") == 2, output


UMA = Path(__file__).parent / "mpi_scripts" / "ase_uma.py"


@pytest.mark.uma
@pytest.mark.skipif(importlib.util.find_spec("fairchem") is None, reason="needs fairchem-core")
def test_uma_under_mpirun() -> None:
    """2 ranks (1, 2 and 4 real ranks: tests/multiprocess/test_gloo_uma.py)."""
    output = run_mpi(2, UMA, timeout=300)
    assert output.count("UMA ASE OK") == 2, output


SEVENNET = Path(__file__).parent / "mpi_scripts" / "ase_sevennet_pretrained.py"


@pytest.mark.sevenn
@pytest.mark.skipif(importlib.util.find_spec("sevenn") is None, reason="needs sevenn")
@pytest.mark.slow  # each rank builds SevenNet-0 (10 s); CI: test_gloo_sevennet_pretrained.py
@pytest.mark.parametrize("n_ranks", [1, 2, 4])
def test_pretrained_sevennet_under_mpirun(n_ranks: int) -> None:
    """SevenNet-0 from sevenn's wheel (2 min at 2 ranks on 2 cores; the same layout at 4 real
    ranks in CI: tests/multiprocess/test_gloo_sevennet_pretrained.py)."""
    output = run_mpi(n_ranks, SEVENNET, timeout=300)
    assert output.count("SEVENNET-0 ASE OK") == n_ranks, output


CHGNET = Path(__file__).parent / "mpi_scripts" / "ase_chgnet.py"


@pytest.mark.chgnet
@pytest.mark.skipif(importlib.util.find_spec("chgnet") is None, reason="needs chgnet")
@pytest.mark.parametrize(
    "n_ranks", [pytest.param(1, marks=pytest.mark.slow), 2, pytest.param(4, marks=pytest.mark.slow)]
)
def test_chgnet_under_mpirun(n_ranks: int) -> None:
    """CHGNet 0.3.0 from chgnet's wheel, magnetic moments included (1 and 4 simulated ranks
    in CI: tests/distributed_model/test_chgnet_simulated.py)."""
    output = run_mpi(n_ranks, CHGNET, timeout=300)
    assert output.count("CHGNET ASE OK") == n_ranks, output
