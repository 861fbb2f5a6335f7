"""SevenNet-0 in LAMMPS two ways on one `lmp`: sevenn's own `pair_style e3gnn/parallel` and
`pair_style mliap unified` with nvdd's model file, at each rank count, all ranks sharing the
device. The `lmp` is the one benchmarks/build_lammps_e3gnn.sh builds (both pair styles in one
binary); run with the Python that has sevenn.

GPU machine (one GPU; 4 ranks share it), carrying the trimmed LAMMPS 4Feb2025 source tarball in
an ignored folder `lammps_src/` and, in `.whl/`, the wheels of what sevenn needs beyond the
machine's image (sevenn 0.13.0, e3nn 0.6.0, braceexpand, ase, matscipy); one call, as the
build does not outlive the machine (about 2 minutes of build on 16 cores):

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site
    eval "$(bash benchmarks/build_lammps_e3gnn.sh lammps_src/lammps-4Feb2025-trimmed.tar.xz)"
    PYTHONPATH=$PWD:$PYTHONPATH python3 benchmarks/lammps_e3gnn.py --atoms 1728 4096 \
        --ranks 1 4 --steps 30 --device cuda --json $OUT/lammps_e3gnn.json

On a CPU, with the repository's .venv-e3nn (sevenn over .venv):

    eval "$(PATH=$PWD/.venv-e3nn/bin:$PWD/.venv/bin:$PATH JOBS=2 bash \
        benchmarks/build_lammps_e3gnn.sh TARBALL)"
    PYTHONPATH=$PWD:$PYTHONPATH .venv-e3nn/bin/python benchmarks/lammps_e3gnn.py --atoms 512 \
        --ranks 1 2 --steps 5 --device cpu

Rocksalt MgO (a = 4.2547 Å, 8 n³ atoms: sizes are rounded to cubes), rattled 0.02 Å (seed 0),
`units metal`, 300 K velocities, NVE, timestep 1 fs, neighbour skin 2 Å checked every step.
Each input runs `run 0` (step-0 energy and forces, dumped by id), --warmup steps, then --steps
timed steps: ms/step is LAMMPS's "Loop time" of that last run, with its task breakdown (Pair,
Neigh, Comm, ...; averages over ranks) to show where a step goes. Per rank count: both ms/step,
their ratio (nvdd / e3gnn), and the step-0 energy difference and largest force difference
(both compute in float32).

e3gnn/parallel's device is sevenn's choice: the GPU (rank mod GPU count) whenever libtorch sees
CUDA; --device cpu hides the GPUs from it (CUDA_VISIBLE_DEVICES=""). nvdd's is the model file's
(`python -m lammps_interface --device`): "cuda" gives each rank its node's GPU round-robin.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
from ase import Atoms
from ase.build import bulk
from ase.io.lammpsdata import write_lammps_data
from common import write_json

ELEMENTS = ("Mg", "O")
LATTICE = 4.2547  # Å, near SevenNet-0's MgO minimum
MODEL = "7net-0"
LOOP = re.compile(r"Loop time of (\S+) on (\d+) procs for (\d+) steps")
SECTION = re.compile(r"^(Pair|Neigh|Comm|Modify|Output|Other)\s*\|[^|]*\|\s*(\S+)", re.M)
E3GNN_DEVICE = re.compile(r"PairE3GNNParallel using device : (\S+)")


def mgo(n_atoms: int) -> Atoms:
    """Rocksalt MgO of about `n_atoms` (8 n³), rattled 0.02 Å."""
    cells = max(1, round((n_atoms / 8) ** (1 / 3)))
    atoms = bulk("MgO", "rocksalt", a=LATTICE, cubic=True) * (cells, cells, cells)
    atoms.rattle(0.02, seed=0)
    return atoms


def deploy_e3gnn(directory: Path) -> int:
    """SevenNet-0 deployed by sevenn for e3gnn/parallel into `directory` (one TorchScript file
    per segment; kept if there); the number of segments."""
    if not any(directory.glob("deployed_parallel_*.pt")):
        from sevenn.scripts.deploy import deploy_parallel
        from sevenn.util import pretrained_name_to_path

        deploy_parallel(pretrained_name_to_path(MODEL), str(directory))
    return len(list(directory.glob("deployed_parallel_*.pt")))


def write_nvdd_model(path: Path, device: str) -> None:
    """nvdd's float32 model file for `pair_style mliap unified`, by its CLI."""
    command = [sys.executable, "-m", "lammps_interface", "--sevennet", MODEL, "--elements"]
    command += [*ELEMENTS, "--dtype", "float32", "--device", device, "-o", str(path)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def pair_lines(style: str, model: Path, segments: int) -> str:
    """The input-script lines that load SevenNet-0 as `style` ("e3gnn" or "nvdd")."""
    elements = " ".join(ELEMENTS)
    if style == "e3gnn":
        return f"pair_style e3gnn/parallel\npair_coeff * * {segments} {model} {elements}\n"
    return (
        'python attach input 1 SELF format p here "from lammps_interface import attach"\n'
        "python attach invoke\n"
        f"pair_style mliap unified {model} 0\n"
        f"pair_coeff * * {elements}\n"
        "neigh_modify exclude group all all\n"
    )


def input_script(data: Path, pair: str, dump: Path, warmup: int, steps: int) -> str:
    """The MD input: step 0's energy (printed) and forces (dumped), then the two runs."""
    return f"""units metal
atom_style atomic
atom_modify map array
boundary p p p
read_data {data}
neighbor 2.0 bin
neigh_modify every 1 delay 0 check yes
{pair}velocity all create 300.0 4928459 mom yes rot yes dist gaussian
timestep 0.001
fix nve all nve
thermo {warmup + steps}
run 0
print "STEP0_PE $(pe:%.10f)"
write_dump all custom {dump} id fx fy fz modify sort id format float %.10g
run {warmup}
run {steps}
"""


def lammps_env(device: str) -> dict[str, str]:
    """mpirun's environment: root allowed, oversubscription, one thread per rank unless
    OMP_NUM_THREADS says otherwise, this Python first on PATH (LAMMPS's embedded Python takes
    its packages from the `python3` on PATH); for the CPU, no GPU visible to libtorch."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        OMPI_MCA_rmaps_base_oversubscribe="1",
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
    )
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def run_lammps(
    lmp: str, ranks: int, script: Path, env: dict[str, str], timeout: float
) -> dict[str, Any]:
    """`mpirun -n ranks lmp -in script`: ms/step of the last run, its task breakdown
    (ms/step, rank averages), step-0 energy, e3gnn's device; or the error and output's end."""
    command = ["mpirun", "-n", str(ranks), lmp, "-nocite", "-log", "none", "-in", str(script)]
    process = subprocess.Popen(
        command,
        cwd=script.parent,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # mpirun and its ranks
        out, _ = process.communicate()
        return {"error": f"over {timeout:g} s", "output_tail": out[-3000:]}
    loops = LOOP.findall(out)
    energy = re.search(r"^STEP0_PE (\S+)", out, re.M)
    if process.returncode != 0 or not loops or energy is None:
        return {"error": f"exit {process.returncode}", "output_tail": out[-3000:]}
    seconds, _, steps = loops[-1]
    per_step = 1e3 / int(steps)
    tables = out.rsplit("Section |", 1)[-1]
    result = {
        "ms_per_step": float(seconds) * per_step,
        "breakdown_ms_per_step": {
            name: float(avg) * per_step for name, avg in SECTION.findall(tables)
        },
        "step0_energy_eV": float(energy.group(1)),
    }
    if device := E3GNN_DEVICE.search(out):
        result["e3gnn_device"] = device.group(1)
    return result


def read_forces(path: Path) -> np.ndarray:
    """Forces of a `write_dump ... id fx fy fz modify sort id` file, by id."""
    return np.loadtxt(path, skiprows=9)[:, 1:]


def compare(
    args: argparse.Namespace, n_atoms: int, models: dict[str, Path], segments: int
) -> list[dict[str, Any]]:
    """Both pair styles at each rank count on MgO of about `n_atoms`."""
    atoms = mgo(n_atoms)
    workdir = args.workdir / f"mgo{len(atoms)}"
    workdir.mkdir(parents=True, exist_ok=True)
    data = workdir / "mgo.data"
    with open(data, "w") as handle:
        write_lammps_data(handle, atoms, specorder=list(ELEMENTS), masses=True, units="metal")
    env = lammps_env(args.device)
    rows = []
    for ranks in args.ranks:
        row: dict[str, Any] = {"atoms": len(atoms), "ranks": ranks}
        for style, model in models.items():
            dump = workdir / f"forces_{style}_np{ranks}.dump"
            dump.unlink(missing_ok=True)
            script = workdir / f"in.{style}_np{ranks}"
            pair = pair_lines(style, model, segments)
            script.write_text(input_script(data, pair, dump, args.warmup, args.steps))
            row[style] = run_lammps(args.lmp, ranks, script, env, args.timeout)
            print(f"{len(atoms)} atoms, {ranks} rank(s), {style}: {row[style]}", flush=True)
        if not any("error" in row[style] for style in models):
            forces = {
                style: read_forces(workdir / f"forces_{style}_np{ranks}.dump") for style in models
            }
            row["ratio_nvdd_over_e3gnn"] = row["nvdd"]["ms_per_step"] / row["e3gnn"]["ms_per_step"]
            row["delta_energy_eV"] = (
                row["nvdd"]["step0_energy_eV"] - row["e3gnn"]["step0_energy_eV"]
            )
            row["max_abs_delta_force_eV_per_A"] = float(
                np.abs(forces["nvdd"] - forces["e3gnn"]).max()
            )
            row["max_abs_force_eV_per_A"] = float(np.abs(forces["e3gnn"]).max())
        rows.append(row)
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    """One line per size and rank count."""
    print(
        f"{'atoms':>7} {'ranks':>5} {'e3gnn ms':>9} {'nvdd ms':>9} {'nvdd/e3gnn':>10} "
        f"{'dE eV':>9} {'max|dF|':>9} {'max|F|':>7} {'e3gnn on':>8}"
    )
    for row in rows:
        if "ratio_nvdd_over_e3gnn" not in row:
            print(f"{row['atoms']:>7} {row['ranks']:>5} failed (see the JSON / output above)")
            continue
        print(
            f"{row['atoms']:>7} {row['ranks']:>5} {row['e3gnn']['ms_per_step']:>9.2f} "
            f"{row['nvdd']['ms_per_step']:>9.2f} {row['ratio_nvdd_over_e3gnn']:>10.3f} "
            f"{row['delta_energy_eV']:>9.2e} {row['max_abs_delta_force_eV_per_A']:>9.2e} "
            f"{row['max_abs_force_eV_per_A']:>7.2f} {row['e3gnn'].get('e3gnn_device', '?'):>8}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--atoms", type=int, nargs="+", default=[4096])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--steps", type=int, default=50, help="timed MD steps")
    parser.add_argument("--warmup", type=int, default=5, help="MD steps before the timed ones")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    parser.add_argument("--lmp", default=shutil.which("lmp"), help="default: `lmp` on PATH")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/lammps_e3gnn"))
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per mpirun")
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.lmp is None:
        parser.error("no `lmp` on PATH: eval the lines benchmarks/build_lammps_e3gnn.sh prints")
    args.workdir.mkdir(parents=True, exist_ok=True)
    models = {"e3gnn": args.workdir / "e3gnn_parallel", "nvdd": args.workdir / "nvdd.pkl"}
    segments = deploy_e3gnn(models["e3gnn"])
    write_nvdd_model(models["nvdd"], args.device)
    rows: list[dict[str, Any]] = []
    for n_atoms in args.atoms:
        rows += compare(args, n_atoms, models, segments)
        # after each size, so that a run stopped later still leaves these rows
        write_json(
            args.json, {"model": MODEL, "device": args.device, "lmp": args.lmp, "rows": rows}
        )
    print_table(rows)


if __name__ == "__main__":
    main()
