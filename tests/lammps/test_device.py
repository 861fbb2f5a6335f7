"""Which device each LAMMPS rank computes on (`lammps_interface.device`), with mocked GPU
counts and node-local ranks; and the MPI shared-memory split that gives the local rank."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from tests.lammps.jobs import missing_lammps

if (reason := missing_lammps()) is not None:
    pytest.skip(reason, allow_module_level=True)

from lammps_interface import MLIAPModel
from lammps_interface.device import choose_device, parse_device
from nvdd_plugins.models import LennardJonesModel
from tests.helpers.multiprocess import run_mpi

pytestmark = pytest.mark.lammps

SCRIPT = Path(__file__).parent / "scripts" / "device_choice.py"


def _never() -> int:
    raise AssertionError("the local rank is needed only to pick a GPU")


@pytest.mark.parametrize(("local_rank", "gpus"), [(0, 4), (3, 4), (5, 4), (7, 2), (2, 1)])
def test_default_is_the_ranks_own_gpu(local_rank: int, gpus: int) -> None:
    expected = torch.device("cuda", local_rank % gpus)
    assert choose_device(None, gpus, lambda: local_rank) == expected
    assert choose_device("cuda", gpus, lambda: local_rank) == expected


def test_default_without_cuda_is_the_cpu() -> None:
    assert choose_device(None, 0, _never) == torch.device("cpu")
    assert choose_device("cpu", 8, _never) == torch.device("cpu")


def test_an_explicit_gpu_is_kept() -> None:
    assert choose_device("cuda:1", 2, _never) == torch.device("cuda", 1)


@pytest.mark.parametrize(
    ("request_", "gpus", "message"),
    [("cuda", 0, "sees no CUDA device"), ("cuda:2", 2, "this node has 2 GPU")],
)
def test_a_gpu_that_is_not_there_is_refused(request_: str, gpus: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        choose_device(request_, gpus, lambda: 0)


@pytest.mark.parametrize("bad", ["gpu", "meta", 3.5])
def test_a_bad_device_is_refused_when_the_model_is_made(bad: object) -> None:
    with pytest.raises(ValueError, match="device must be None, 'cpu', 'cuda'"):
        MLIAPModel(LennardJonesModel(0.01, 3.4, 6.0), ["Ar"], device=bad)


def test_the_request_is_stored_as_text() -> None:
    assert parse_device(torch.device("cuda", 1)) == "cuda:1"
    assert parse_device(None) is None
    model = MLIAPModel(LennardJonesModel(0.01, 3.4, 6.0), ["Ar"], device=torch.device("cpu"))
    assert model.device == "cpu"


def test_ranks_on_one_node_take_gpus_round_robin() -> None:
    """Three ranks on this one node: local ranks 0, 1, 2 from MPI's shared-memory split, so
    with 2 GPUs ranks 0 and 2 share cuda:0."""
    output = run_mpi(3, SCRIPT, timeout=60.0)
    lines = sorted(re.findall(r"rank (\d) local (\d) devices (.*)", output))
    assert lines == [
        ("0", "0", "cuda:0 cuda:0 cuda:0"),
        ("1", "1", "cuda:0 cuda:1 cuda:1"),
        ("2", "2", "cuda:0 cuda:0 cuda:2"),
    ], output


def test_cli_stores_the_device(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from lammps_interface.cli import main

    path = tmp_path / "lj.pkl"
    main(["--lj", "0.01", "3.4", "6.0", "--elements", "Ar", "--device", "cpu", "-o", str(path)])
    assert "device cpu" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--lj", "0.01", "3.4", "6.0", "--elements", "Ar", "--device", "gpu", "-o", "x"])
    assert "device must be None, 'cpu', 'cuda'" in capsys.readouterr().err
