"""Two GPUs under torchrun with NCCL: float64 results equal one GPU, each rank's atoms live
on its own GPU, example 03 runs to the end (MACE and LJ), and one rank's exception ends the
job promptly with its message."""

from __future__ import annotations

import importlib.util
import re
import sys
import time

import pytest
import torch

from tests.helpers.multiprocess import REPO, run_command

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 GPUs"
    ),
]


def _torchrun(*args: str, timeout: float) -> tuple[int, str]:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    return run_command([*command, "--nproc_per_node=2", *args], REPO, timeout)


def test_two_gpus_equal_one_gpu_in_float64() -> None:
    code, output = _torchrun("tests/gpu/scripts/nccl_checks.py", "forces", timeout=400)
    print(output)
    assert code == 0, output
    assert output.count("worst 2-GPU vs 1-GPU force error") == 2


@pytest.mark.parametrize(
    "model", ["lj", "mace"] if importlib.util.find_spec("mace") is not None else ["lj"]
)
def test_example_03_runs_on_two_gpus(model: str) -> None:
    script = "examples/distributed/03_mace_nvt_distributed.py"
    code, output = _torchrun(script, "--model", model, "--steps", "30", timeout=400)
    print(output)
    assert code == 0, output
    assert "done: 30 steps" in output


def test_one_rank_raising_ends_the_nccl_job() -> None:
    code, output = _torchrun("tests/gpu/scripts/nccl_checks.py", "raise", timeout=120)
    ended = time.time()
    print(output)
    assert code != 0
    assert "rank 1 failed on purpose" in output
    assert "rank 0 was not stopped" not in output
    failed = float(re.search(r"failing at ([0-9.]+)", output).group(1))
    print(f"the job ended {ended - failed:.1f} s after rank 1 failed")
    assert ended - failed < 30


@pytest.mark.parametrize("fault", ["raise", "nan", "kill"])
def test_faults_end_the_nccl_job(fault: str) -> None:
    """tests/multiprocess/test_faults.py's DomainParallel faults, with NCCL between GPUs."""
    script = "tests/multiprocess/mpi_scripts/faults.py"
    start = time.time()
    code, output = _torchrun(script, fault, "parallel", timeout=180)
    ended = time.time()
    print(output)
    assert code != 0 and "SURVIVED" not in output
    expected = {"raise": "rank 1 failed on purpose", "nan": "NonFiniteError", "kill": "Signal 9"}
    assert expected[fault] in output
    failed = re.search(r"failing at ([0-9.]+)", output)
    since = ended - (float(failed.group(1)) if failed else start)
    print(f"{fault}: the job ended {since:.1f} s after the fault")
    assert since < 30
