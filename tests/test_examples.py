"""Every example script runs as its docstring says (short runs, hard timeouts)."""

from __future__ import annotations

import importlib.util
import sys

import ase.io
import pytest

from tests.helpers.multiprocess import REPO, run_command, run_mpi

pytestmark = pytest.mark.multiprocess
EXAMPLES = REPO / "examples"
MODELS = [
    "lj",
    pytest.param(
        "mace",
        marks=pytest.mark.skipif(importlib.util.find_spec("mace") is None, reason="needs mace"),
    ),
]


# Every example that DomainParallel runs on ranks, under both launchers it advertises: torchrun
# and `mpirun -n 2 python -m mpi4py` (where ASE's collectives turn rank-0-only code into hangs).
LAUNCHERS = ["torchrun", "mpirun"]


def _ok(command: list[str], timeout: float) -> str:
    code, output = run_command(command, REPO, timeout)
    assert code == 0, output
    return output


def _on_two_ranks(launcher: str, script: str, *args: str, timeout: float = 240) -> str:
    """Run `examples/distributed/<script> args` on 2 ranks under `launcher`; its output."""
    path = EXAMPLES / "distributed" / script
    if launcher == "mpirun":
        return run_mpi(2, path, *args, timeout=timeout)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2"]
    return _ok([*torchrun, str(path), *args], timeout)


@pytest.mark.parametrize("model", MODELS)
def test_distributed_nvt_under_torchrun(model: str) -> None:
    args = ["--model", model, "--steps", "10", "--cells", "3"]
    output = _on_two_ranks("torchrun", "03_mace_nvt_distributed.py", *args)
    assert "done: 10 steps" in output and "T[K]" in output


def test_distributed_nvt_with_trajectory_under_mpirun(tmp_path) -> None:
    trajectory = tmp_path / "md.traj"
    args = ["--model", "lj", "--steps", "20", "--cells", "3", "--trajectory", str(trajectory)]
    output = _on_two_ranks("mpirun", "03_mace_nvt_distributed.py", *args)
    assert "rank 1/2" in output and "done: 20 steps" in output
    frames = ase.io.read(trajectory, ":")
    assert len(frames) == 3 and all(len(frame) == 108 for frame in frames)  # steps 0, 10, 20


# MACE in CI: the NVT example (above); NPT with MACE only in test-all
@pytest.mark.parametrize(
    "model", [MODELS[0], pytest.param("mace", marks=[*MODELS[1].marks, pytest.mark.slow])]
)
def test_distributed_npt_under_torchrun(model: str) -> None:
    args = ["--model", model, "--steps", "10", "--anisotropic"]
    output = _on_two_ranks("torchrun", "06_mace_npt_distributed.py", *args)
    assert "done: 10 steps, 12 integrator all-reduces" in output and "P[GPa]" in output


def test_distributed_npt_under_mpirun() -> None:
    args = ["--model", "lj", "--steps", "10", "--anisotropic"]
    output = _on_two_ranks("mpirun", "06_mace_npt_distributed.py", *args)
    assert "done: 10 steps, 12 integrator all-reduces" in output and "P[GPa]" in output


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_fire_nvt_pipeline(launcher: str) -> None:
    args = ["--systems", "2", "--steps", "20"]
    output = _on_two_ranks(launcher, "07_fire_nvt_dd.py", *args)
    assert "FIRE steps" in output and "done: 2 systems relaxed and run" in output
    assert "one-rank mesh" not in output


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_chunked_subdomains(launcher: str) -> None:
    args = ["--cells", "6", "--chunk-atoms", "900"]
    output = _on_two_ranks(launcher, "08_chunked_subdomains.py", *args)
    assert "rank 1: " in output and " chunks of at most " in output
    difference = float(output.split("without chunks: ")[1].split(" Å")[0])
    assert difference < 1e-10 and "done: 5 steps, 864 atoms" in output


def test_byo_model_example() -> None:
    output = _ok([sys.executable, str(EXAMPLES / "distributed" / "04_byo_pytorch_mpnn.py")], 240)
    assert "trace_and_validate: OK" in output
    assert "4 rank(s)" in output and "gives it back: True" in output


def test_byo_custom_op_example() -> None:
    script = EXAMPLES / "distributed" / "05_byo_graph_transformer.py"
    output = _ok([sys.executable, str(script)], 240)
    assert output.index("NOT OK") < output.index("trace_and_validate: OK")
    assert "output_transforms={0: ScatterOutputs()}" in output
    assert "validation verified: True" in output and "20 NVE steps" in output


def test_chunked_md_example() -> None:
    output = _ok([sys.executable, str(EXAMPLES / "single_gpu" / "chunked_md.py")], 240)
    assert "2048 atoms in 2 chunks" in output
    difference = float(output.split("evaluated whole: ")[1].split()[0])
    assert difference < 1e-8


def test_ase_examples_under_mpirun(tmp_path) -> None:
    trajectory = tmp_path / "md.traj"
    output = run_mpi(
        2, EXAMPLES / "ase" / "md.py", "--steps", "20", "--trajectory", str(trajectory)
    )
    assert output.count("wrote") == 1 and trajectory.exists()
    output = run_mpi(2, EXAMPLES / "ase" / "relax.py", "--fmax", "0.01")
    assert output.count("FIRE converged") == 1


@pytest.mark.sevenn
@pytest.mark.skipif(importlib.util.find_spec("sevenn") is None, reason="needs sevenn")
def test_sevennet_example() -> None:
    script = EXAMPLES / "models" / "sevennet_dd.py"
    output = _ok([sys.executable, str(script), "--ranks", "2", "--cells", "2"], 240)
    error = float(output.split("max |force difference|:")[1].split()[0])
    assert "2 interaction layers" in output and error < 1e-8


@pytest.mark.sevenn
@pytest.mark.skipif(importlib.util.find_spec("sevenn") is None, reason="needs sevenn")
def test_sevennet0_nvt_example() -> None:
    """`make demo`'s script, shortened: one header line, the thermo table, the final state
    of 2 ranks equal to one process, and no warning of the dependencies."""
    script = EXAMPLES / "models" / "sevennet0_nvt.py"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2"]
    output = _ok([*torchrun, str(script), "--cells", "2", "--steps", "5"], 300)
    assert "SevenNet-0 (sevenn 7net-0, float64) on rocksalt MgO, 64 atoms, 2 ranks" in output
    assert "Epot[eV]" in output and "Warning" not in output
    assert any(line.split()[:2] == ["0", "0.00"] for line in output.splitlines())  # step 0
    force_error = float(output.split("max |dF| = ")[1].split()[0])
    assert force_error < 1e-8


@pytest.mark.nequip
@pytest.mark.skipif(importlib.util.find_spec("allegro") is None, reason="needs nequip-allegro")
def test_nequip_example() -> None:
    """Allegro with 3 layers exchanges positions and forces only (2 per step)."""
    script = EXAMPLES / "models" / "nequip_dd.py"
    output = _ok([sys.executable, str(script), "--ranks", "2", "--cells", "2"], 240)
    error = float(output.split("max |force difference|:")[1].split()[0])
    assert "ghost shell: 1 cutoff (strictly local); halo exchanges per step: 2" in output
    assert error < 1e-8


@pytest.mark.uma
@pytest.mark.skipif(importlib.util.find_spec("fairchem") is None, reason="needs fairchem-core")
def test_uma_example() -> None:
    """2 simulated ranks equal fairchem's own forward."""
    script = EXAMPLES / "models" / "uma_dd.py"
    output = _ok([sys.executable, str(script), "--ranks", "2"], 240)
    force_error = float(output.split("max |force difference|:")[1].split()[0])
    stress_error = float(output.split("max |stress difference|:")[1].split()[0])
    assert force_error < 1e-8 and stress_error < 1e-9


@pytest.mark.aimnet
@pytest.mark.skipif(importlib.util.find_spec("aimnet") is None, reason="needs aimnet")
def test_aimnet2_example() -> None:
    script = EXAMPLES / "models" / "aimnet2_dd.py"
    command = [sys.executable, str(script), "--ranks", "2", "--molecules", "2", "--charge", "1"]
    output = _ok(command, 240)
    error = float(output.split("max |force difference|:")[1].split()[0])
    charge = float(output.split("equilibrated charges:")[1].split()[0])
    assert abs(charge - 1) < 1e-4 and error < 1e-8


@pytest.mark.slow  # 15 s on 2 cores; test_aimnet2_example keeps an AIMNet2 example in CI
@pytest.mark.aimnet
@pytest.mark.skipif(importlib.util.find_spec("aimnet") is None, reason="needs aimnet")
def test_aimnet2_lattice_example() -> None:
    """AIMNet2 with PME, its mesh in slabs, on 2 simulated ranks (D3: tests of its own)."""
    script = EXAMPLES / "models" / "aimnet2_lattice_dd.py"
    command = [sys.executable, str(script), "--ranks", "2", "--molecules", "3"]
    output = _ok([*command, "--layout", "slabs"], 240)
    error = float(output.split("max |force difference|:")[1].split()[0])
    assert "81 atoms" in output and "layout='slabs'" in output and error < 1e-8


def test_rigid_ion_example() -> None:
    script = EXAMPLES / "models" / "rigid_ion_dd.py"
    command = [sys.executable, str(script), "--ranks", "4", "--method", "pme"]
    output = _ok(command, 240)
    error = float(output.split("max |force difference|:")[1].split()[0])
    assert "216 ions" in output and error < 1e-8


@pytest.mark.slow
def test_cuda_graphs_example_resolves_auto_off_on_the_cpu() -> None:
    output = _ok([sys.executable, str(EXAMPLES / "single_gpu" / "cuda_graphs_md.py")], 120)
    assert "cuda_graphs resolved: False" in output


@pytest.mark.chgnet
@pytest.mark.skipif(importlib.util.find_spec("chgnet") is None, reason="needs chgnet")
def test_chgnet_example() -> None:
    script = EXAMPLES / "models" / "chgnet_dd.py"
    output = _ok([sys.executable, str(script), "--ranks", "2", "--length", "6"], 300)
    force_error = float(output.split("max |force difference|:")[1].split()[0])
    magmom_error = float(output.split("max |magnetic moment difference|:")[1].split()[0])
    assert "ghost shell 12 Å" in output and force_error < 1e-8 and magmom_error < 1e-10


def test_green_kubo_example_short_form(tmp_path) -> None:
    """The heat-flux example in its CI form (one process; the docstring's torchrun and
    mpirun lines run the same DomainParallel code on two ranks): it reports kappa with an
    error and the literature, and writes the plot (matplotlib is in .venv) and the series."""
    output_prefix = tmp_path / "gk"
    script = EXAMPLES / "heat_flux" / "green_kubo_argon.py"
    output = _ok([sys.executable, str(script), "--short", "--output", str(output_prefix)], 120)
    assert "kappa(0.3 ps) =" in output and "Viscardy et al. 2007" in output
    assert (tmp_path / "gk.png").exists() and (tmp_path / "gk.npz").exists()
