"""LAMMPS with the model on the GPU (`MLIAPModel(device=...)`) equals the single-process CPU
run in float64, at 1 and 2 ranks sharing the GPU (tests/gpu/scripts/lammps_on_gpu.py); at one
rank the model calls replayed from the bridge's CUDA graphs give the eager trajectory
(tests/lammps/scripts/replayed_calls.py)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import torch

from tests.helpers.multiprocess import run_mpi

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.lammps,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(
        importlib.util.find_spec("lammps") is None
        or importlib.util.find_spec("lammps.mliap") is None
        or importlib.util.find_spec("mace") is None,
        reason="needs LAMMPS with ML-IAP and mace-torch",
    ),
]

SCRIPT = Path(__file__).parent / "scripts" / "lammps_on_gpu.py"


@pytest.mark.parametrize("n_ranks", [1, 2])
def test_lammps_on_the_gpu_equals_the_cpu_run(n_ranks: int) -> None:
    output = run_mpi(n_ranks, SCRIPT, timeout=300.0)
    print(output)
    assert output.count("OK ") >= 3, output


def test_lammps_md_replayed_from_cuda_graphs_equals_eager(tmp_path: Path) -> None:
    script = Path(__file__).parents[1] / "lammps" / "scripts" / "replayed_calls.py"
    output = run_mpi(1, script, str(tmp_path), "cuda", timeout=300.0)
    print(output)
    found = re.search(r"max\|dx\| (\S+) max\|df\| (\S+) replays (\d+)", output)
    assert found, output
    # float64 atomics sum in no fixed order on a GPU: equal up to rounding, not bit for bit
    assert float(found[1]) < 1e-10 and float(found[2]) < 1e-8 and int(found[3]) > 0, output
