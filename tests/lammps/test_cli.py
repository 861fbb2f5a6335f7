"""`python -m lammps_interface` writes a loadable model file and prints the lines to paste."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import pytest
import torch

from tests.lammps.jobs import missing_lammps

if (reason := missing_lammps()) is not None:
    pytest.skip(reason, allow_module_level=True)

from lammps_interface import MLIAPModel
from lammps_interface.cli import main
from nvdd_plugins.models import LennardJonesModel, MACEWrapper, SimpleMPNN

pytestmark = pytest.mark.lammps


def _load(path: Path) -> MLIAPModel:
    with open(path, "rb") as handle:
        model = pickle.load(handle)
    assert isinstance(model, MLIAPModel)
    return model


def test_lj(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "lj.pkl"
    main(["--lj", "0.0104", "3.4", "6.0", "--shift", "--elements", "Ar", "-o", str(path)])
    printed = capsys.readouterr().out
    model = _load(path)
    assert isinstance(model.model, LennardJonesModel) and model.model.shift
    assert (model.rcutfac, model.n_layers, model.element_types) == (3.0, 1, ["Ar"])
    assert (
        'python attach input 1 SELF format p here "from lammps_interface import attach"' in printed
    )
    assert f"pair_style mliap unified {path} 0\npair_coeff * * Ar" in printed
    assert "\nneigh_modify exclude group all all\n" in printed  # halo mode: a live line


def test_mpnn_float32(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "mpnn.pkl"
    args = ["--mpnn-seed", "3", "--cutoff", "4.5", "--dtype", "float32"]
    main([*args, "--elements", "Ar", "Cu", "-o", str(path)])
    printed = capsys.readouterr().out
    model = _load(path)
    assert isinstance(model.model, SimpleMPNN)
    assert model.dtype == torch.float32 and model.model.readout[0].weight.dtype == torch.float32
    assert model.n_layers == 3
    assert "comm_modify cutoff 15.5" in printed  # 3 x 4.5 Å + the default 2 Å skin
    assert f"pair_style mliap unified {path} 1" in printed


def test_mace(tmp_path: Path) -> None:
    pytest.importorskip("mace")
    from tests.helpers.mace_models import tiny_mace

    torch.save(tiny_mace(), tmp_path / "tiny.pt")
    path = tmp_path / "mace.pkl"
    main(["--mace", str(tmp_path / "tiny.pt"), "--elements", "Ar", "Cu", "-o", str(path)])
    model = _load(path)
    assert isinstance(model.model, MACEWrapper)
    assert model.n_layers == 2 and model.rcutfac == 2.25


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one-line message of an argument the CLI refuses (exit status 2, no traceback)."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    message = capsys.readouterr().err
    assert "Traceback" not in message
    return message


def test_mpnn_needs_a_cutoff(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--mpnn-seed", "1", "--elements", "Ar", "-o", str(tmp_path / "x.pkl")]
    assert "--mpnn-seed needs --cutoff" in _refused(argv, capsys)


def test_missing_model_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--mace", str(tmp_path / "none.pt"), "--elements", "Cu", "-o", str(tmp_path / "x")]
    assert "none.pt" in _refused(argv, capsys)


def test_elements_the_mace_model_does_not_know(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("mace")
    from tests.helpers.mace_models import tiny_mace

    torch.save(tiny_mace(), tmp_path / "tiny.pt")
    argv = ["--mace", str(tmp_path / "tiny.pt"), "--elements", "Cu", "Au", "-o", str(tmp_path)]
    assert "no parameters for Au (79)" in _refused(argv, capsys)


def test_mace_converted_to_cuequivariance(tmp_path: Path) -> None:
    pytest.importorskip("mace")
    pytest.importorskip("cuequivariance_torch")
    from tests.helpers.mace_models import tiny_mace

    torch.save(tiny_mace(), tmp_path / "tiny.pt")
    path = tmp_path / "mace.pkl"
    argv = ["--mace", str(tmp_path / "tiny.pt"), "--cuequivariance", "--elements", "Ar", "Cu"]
    main([*argv, "--device", "cpu", "-o", str(path)])
    model = _load(path)
    assert isinstance(model.model, MACEWrapper) and model.model.cuequivariance
    assert model.device == "cpu"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"\x93random bytes, not a torch.save file" * 8, "cannot read .* as a model saved with"),
        ({"weights": torch.zeros(3)}, "holds a dict, not a mace-torch model"),
        (torch.nn.Linear(3, 3), "MACEWrapper takes a mace-torch model .* got a Linear"),
    ],
    ids=["random_bytes", "dict", "linear"],
)
def test_a_file_that_is_not_a_mace_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content, expected: str
) -> None:
    """Random bytes, a saved dict or a saved nn.Linear: one line and exit 2, no traceback."""
    pytest.importorskip("mace")
    path = tmp_path / "model.pt"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        torch.save(content, path)
    argv = ["--mace", str(path), "--elements", "Cu", "-o", str(tmp_path / "x.pkl")]
    assert re.search(expected, _refused(argv, capsys))
    assert not (tmp_path / "x.pkl").exists()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--lj", "0.0104", "3.4", "inf"], "cutoff must be a finite number > 0"),
        (["--lj", "nan", "3.4", "6.0"], "must be finite and positive, got nan"),
        (["--mpnn-seed", "1", "--cutoff", "4.5", "--hidden", "0"], "hidden must be >= 1"),
        (["--mpnn-seed", "1", "--cutoff", "4.5", "--layers", "0"], "n_layers must be >= 1"),
    ],
    ids=["lj_inf_cutoff", "lj_nan_epsilon", "hidden_0", "layers_0"],
)
def test_numbers_no_model_can_have(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], expected: str
) -> None:
    """Numbers that make no model are refused in one line, and no file is written."""
    argv = [*args, "--elements", "Ar", "-o", str(tmp_path / "x.pkl")]
    assert expected in _refused(argv, capsys)
    assert not (tmp_path / "x.pkl").exists()


def test_sevennet_bad_name_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without sevenn (the main environment) the message names the overlay; with it, an
    unknown name is refused by sevenn's own name table."""
    argv = ["--sevennet", "7net-nonsense", "--elements", "Mg", "O", "-o", str(tmp_path / "m.pkl")]
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    error = capsys.readouterr().err
    assert "install-e3nn" in error or "unknown SevenNet model '7net-nonsense'" in error
