"""The bridge's model call replayed from captured graphs (`lammps_interface.halo`), on the
CPU with graphs that replay by calling again: a 60-step LAMMPS NVE trajectory with the
3-layer MPNN, re-neighbouring and view rebuilds (a new capture each) gives the eager
trajectory bit for bit, every call a replay but a new view's first few. The input has no
`neigh_modify exclude`, so each run's bridge says once what the unread ML-IAP pair list
costs."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import pytest

from tests.lammps.jobs import missing_lammps

if (reason := missing_lammps()) is not None:
    pytest.skip(reason, allow_module_level=True)

from lammps_interface.halo import EAGER_CALLS
from tests.helpers.multiprocess import run_mpi

pytestmark = pytest.mark.lammps

SCRIPT = Path(__file__).parent / "scripts" / "replayed_calls.py"


def test_replayed_calls_give_the_eager_trajectory(tmp_path: Path) -> None:
    output = run_mpi(1, SCRIPT, str(tmp_path), timeout=180.0)
    found = re.search(r"max\|dx\| (\S+) max\|df\| (\S+) replays (\d+) captures (\d+)", output)
    assert found, output
    dx, df, replays, captures = float(found[1]), float(found[2]), int(found[3]), int(found[4])
    assert dx == 0.0 and df == 0.0, output
    # `run 60` calls the model 61 times; each new view runs its checked call and then
    # EAGER_CALLS more eagerly
    assert captures >= 2 and replays == 61 - (1 + EAGER_CALLS) * captures, output
    assert output.count("at every step that halo mode does not read") == 2, output


def test_cuda_graphs_is_checked_and_kept_in_the_file(tmp_path: Path) -> None:
    from lammps_interface import MLIAPModel
    from tests.helpers.systems import mpnn_model

    with pytest.raises(ValueError, match='cuda_graphs must be True, False or "auto"'):
        MLIAPModel(mpnn_model(), ["Ar"], cuda_graphs="always")
    path = tmp_path / "graphed.pkl"
    MLIAPModel(mpnn_model(), ["Ar"], cuda_graphs="auto").pickle(str(path))
    with open(path, "rb") as handle:
        assert pickle.load(handle).cuda_graphs == "auto"
    older = MLIAPModel(mpnn_model(), ["Ar"]).__getstate__()
    del older["cuda_graphs"]  # a file written before the option: no graphs
    model = MLIAPModel.__new__(MLIAPModel)
    model.__setstate__(older)
    assert model.cuda_graphs is False


def test_required_graphs_where_none_can_replay_are_refused() -> None:
    import torch

    from lammps_interface.halo import HaloBridge
    from nvdd_plugins.comm import Staging
    from tests.helpers.systems import mpnn_model

    class TwoRanks:  # what `lmp.get_mpi_comm()` gives, as far as the check reads it
        def Get_size(self) -> int:
            return 2

    class Handle:
        def get_mpi_comm(self) -> TwoRanks:
            return TwoRanks()

    staging = Staging(torch.device("cpu"))
    with pytest.raises(ValueError, match="cuda_graphs=True needs one LAMMPS rank on a GPU"):
        HaloBridge(mpnn_model(), Handle(), (torch.float64, 18), staging, cuda_graphs=True)
