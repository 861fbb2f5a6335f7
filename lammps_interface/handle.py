"""The LAMMPS instance a model reaches from `compute_forces`, registered by `attach`.

ML-IAP gives a model no atom ids, positions or communicator; the LAMMPS handle does. Under
the plain `lmp` binary the input script registers it before `pair_style`:

    python attach input 1 SELF format p here "from lammps_interface import attach"
    python attach invoke

A Python driver calls `lammps_interface.attach(lmp)` itself. One instance per process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from lammps_interface.lammps_python import lammps
from lammps_interface.messages import warnings_to_lammps

__all__ = ["LammpsAtoms", "attach", "attached", "detach", "read_atoms", "require_metal_units"]

_attached: lammps | None = None


def attach(lmp_or_ptr: Any) -> None:
    """Register the LAMMPS instance (a `lammps` object, or the pointer `python ... SELF`
    passes) that `MLIAPModel` reads atom ids, positions, box and communicator from."""
    global _attached
    _attached = lmp_or_ptr if isinstance(lmp_or_ptr, lammps) else lammps(ptr=lmp_or_ptr)
    warnings_to_lammps(_attached)  # nvdd's warnings reach LAMMPS's screen and log file too


def detach() -> None:
    """Forget the registered instance: models fall back to redundant ghost-shell compute."""
    global _attached
    _attached = None
    warnings_to_lammps(None)


def attached() -> lammps | None:
    """The registered LAMMPS instance, or None."""
    return _attached


@dataclass(frozen=True)
class LammpsAtoms:
    """Per-row data read through the handle, in LAMMPS row order (owned, then ghosts): views
    of LAMMPS's own arrays (no copy), valid while LAMMPS keeps them.

    Attributes:
        ids: (ntotal,) atom ids (LAMMPS's integer type).
        positions: (ntotal, 3) positions, Å (ghosts at their image positions).
        cell: (3, 3) box vectors as rows a = (lx, 0, 0), b = (xy, ly, 0), c = (xz, yz, lz), Å.
    """

    ids: np.ndarray
    positions: np.ndarray
    cell: np.ndarray


def read_atoms(lmp: lammps, nlocal: int, ntotal: int) -> LammpsAtoms:
    """Read ids, positions and box for the `ntotal` rows ML-IAP sees."""
    counts = (int(lmp.extract_global("nlocal")), int(lmp.extract_global("nghost")))
    if counts != (nlocal, ntotal - nlocal):
        raise RuntimeError(
            f"the attached LAMMPS instance holds {counts} owned/ghost atoms but the model "
            f"was called with {(nlocal, ntotal - nlocal)}: attach the instance that runs it"
        )
    if ntotal:
        ids = _atom_ids(lmp, ntotal)
        positions = np.asarray(lmp.numpy.extract_atom("x", nelem=ntotal, dim=3))
    else:
        ids, positions = np.zeros(0, dtype=np.int64), np.zeros((0, 3))
    boxlo, boxhi, xy, yz, xz, _, _ = lmp.extract_box()
    lx, ly, lz = (hi - lo for lo, hi in zip(boxlo, boxhi, strict=True))
    cell = np.array([[lx, 0.0, 0.0], [xy, ly, 0.0], [xz, yz, lz]])
    return LammpsAtoms(ids, positions.reshape(ntotal, 3), cell)


def require_metal_units(lmp: lammps) -> None:
    """Refuse any LAMMPS units but metal: models take Å and return eV and eV/Å, which LAMMPS
    would read in its own units (kcal/mol under `units real`, 23x off) without a word."""
    units = lmp.extract_global("units")
    if units != "metal":
        raise ValueError(
            f"LAMMPS runs with `units {units}`, but nvdd models take positions in Å and "
            "return eV and eV/Å: use `units metal`"
        )


def _atom_ids(lmp: lammps, ntotal: int) -> np.ndarray:
    """The ids of the `ntotal` rows; LAMMPS without atom ids (`atom_modify id no`: every id
    0, so one row tells) is refused: the halo exchange finds each ghost's owner by id."""
    raw = lmp.numpy.extract_atom("id", nelem=ntotal)
    if raw is None or int(raw[0]) == 0:
        raise ValueError(
            "LAMMPS atoms have no ids (`atom_modify id no`): the halo exchange finds ghost "
            "atoms by id; use `atom_modify id yes` (LAMMPS's default)"
        )
    return np.asarray(raw)
