"""`python -m nvdd_plugins.validate module:Wrapper`: the report, the exit status, --save."""

from __future__ import annotations

import sys

from nvdd_plugins.models import SimpleMPNN
from nvdd_plugins.spec import MLIPSpec
from nvdd_plugins.validate.__main__ import main
from tests.helpers.multiprocess import REPO, run_command


def test_an_ok_wrapper_exits_0_and_saves_its_spec(tmp_path, capsys) -> None:
    path = tmp_path / "spec.json"
    assert main(["nvdd_plugins.models:SimpleMPNN", "--save", str(path)]) == 0
    assert "trace_and_validate: OK" in capsys.readouterr().out
    assert MLIPSpec.load(path) == SimpleMPNN().distribution_spec()


def test_a_factory_of_a_broken_wrapper_exits_1(capsys) -> None:
    assert main(["tests.validate.defects:not_rebound"]) == 1
    assert "next action: rebind the result of index_add_" in capsys.readouterr().out


def test_run_as_a_module() -> None:
    command = [sys.executable, "-m", "nvdd_plugins.validate", "tests.helpers.systems:PreSlicedMPNN"]
    code, output = run_command(command, REPO, 120)
    assert code == 1, output
    assert "next action: return per-atom energies over all rows, not owned rows" in output
