"""The LAMMPS cases of the bit-identity check: `pair_style mliap unified` through the `lmp`
binary under mpirun, in fallback mode (no handle: a ghost shell of n_layers cutoffs,
`ghostneigh 1`) and with the handle attached (per-layer ghost exchange), at 1 and 2 ranks.

One launch per rank count runs every case (the fallback cases first, then `python attach`,
then the handle cases), as tests/lammps does; outputs are read back from LAMMPS's `%.17g`
dumps (exact for float64): energy, pressure, volume, forces, per-atom energies and per-atom
virials, rows sorted by atom id.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from tests.helpers.systems import triclinic_bulk
from tests.lammps.cases import off_centre_cluster
from tests.lammps.jobs import missing_lammps, run_lmp
from tests.lammps.lammps_io import ATTACH_LINES, Case, lammps_frame, read_snapshot, write_data

RANKS = (1, 2)
NEIGHBOR_SKIN = 1.0  # `neighbor 1.0 bin` in every case block
MODELS = ("lj", "mpnn", "mace")
SYSTEMS = {"bulk": ("p p p", triclinic_bulk), "cluster": ("f f f", off_centre_cluster)}


def _model_files(directory: Path) -> dict[str, tuple[tuple[str, ...], int, float]]:
    """Pickle the models; per model: its elements, layers and cutoff."""
    from lammps_interface import MLIAPModel
    from nvdd_plugins.models import MACEWrapper
    from tests.helpers.mace_models import tiny_mace
    from tests.helpers.systems import lj_model, mpnn_model

    wrappers = {
        "lj": (lj_model(), ("Ar",)),
        "mpnn": (mpnn_model(), ("Ar",)),
        "mace": (MACEWrapper(tiny_mace()), ("Ar", "Cu")),
    }
    files = {}
    for name, (wrapper, elements) in wrappers.items():
        layers = wrapper.distribution_spec().n_layers
        MLIAPModel(wrapper, list(elements), n_layers=layers).pickle(directory / f"{name}.pkl")
        files[name] = (elements, layers, wrapper.cutoff)
    return files


def _blocks(directory: Path, n_ranks: int) -> tuple[list[Case], list[Case]]:
    """Write the data files; (fallback cases, handle cases)."""
    from tests.helpers.mace_models import with_two_species

    fallback, handle = [], []
    for model, (elements, layers, cutoff) in _model_files(directory).items():
        for system, (boundary, build) in SYSTEMS.items():
            atoms = lammps_frame(build())
            if len(elements) > 1:
                atoms = with_two_species(atoms)
            data = f"{system}_{model}.data"
            write_data(directory / data, atoms, elements)
            processors = "* * *" if boundary == "p p p" else f"* * {n_ranks}"
            common = dict(boundary=boundary, processors=processors, atom_virials=True)
            name = f"{model}-{system}-lammps_%s-np{n_ranks}"
            handle.append(Case(name % "handle", data, elements, f"{model}.pkl", **common))
            fallback.append(
                Case(
                    name % "fallback",
                    data,
                    elements,
                    f"{model}.pkl",
                    ghostneigh=int(layers > 1),
                    comm_cutoff=layers * cutoff + NEIGHBOR_SKIN if layers > 1 else None,
                    **common,
                )
            )
    return fallback, handle


@functools.cache
def _launch(n_ranks: int) -> Path:
    """Run every LAMMPS case at `n_ranks` once; the directory of their outputs."""
    directory = Path(tempfile.mkdtemp(prefix=f"bitid_lammps_np{n_ranks}_"))
    fallback, handle = _blocks(directory, n_ranks)
    script = "".join(c.block() for c in fallback) + ATTACH_LINES
    script += "".join(c.block() for c in handle)
    (directory / "in.cases").write_text(script)
    code, output = run_lmp(n_ranks, directory / "in.cases", directory, timeout=600.0)
    if code != 0:
        raise RuntimeError(f"lmp at {n_ranks} ranks exited {code}:\n{output[-3000:]}")
    return directory


def _outputs(name: str, n_ranks: int) -> dict[str, Any]:
    snapshot = read_snapshot(_launch(n_ranks), name)
    tensors = {
        "energy": snapshot.energy,
        "pressure": snapshot.pressure,
        "volume": snapshot.volume,
        "forces": snapshot.forces,
        "energies": snapshot.energies,
        "atom_virials": snapshot.atom_virials,
    }
    return {k: torch.tensor(v, dtype=torch.float64) for k, v in tensors.items()}


def lammps_cases(device: str) -> tuple[list[Any], list[str]]:
    """The LAMMPS cases (`Case`s of bit_identity_cases), or a line saying why none."""
    from bit_identity_cases import Case as DumpCase
    from bit_identity_cases import installed

    why = missing_lammps() or ("" if device == "cpu" else f"runs on the CPU only, not {device}")
    if not why and not installed("mace"):
        why = "the LAMMPS cases need mace-torch"
    if why:
        return [], [f"lammps: {why}"]
    cases = []
    for n_ranks in RANKS:
        for model in MODELS:
            for system in SYSTEMS:
                for mode in ("fallback", "handle"):
                    name = f"{model}-{system}-lammps_{mode}-np{n_ranks}"
                    run: Callable[[], dict] = functools.partial(_outputs, name, n_ranks)
                    cases.append(DumpCase(name, run))
    return cases, []
