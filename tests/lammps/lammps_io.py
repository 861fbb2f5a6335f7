"""LAMMPS files for tests: data files from ase.Atoms, input blocks per case, and their outputs.

LAMMPS wants a lower-triangular cell, so systems are first rotated into that frame
(`lammps_frame`); references are computed on the rotated atoms and compared by atom id.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from ase import Atoms
from ase.data import atomic_masses, atomic_numbers

NKTV2P = 1.6021765e6  # LAMMPS metal units: eV/Å³ -> bar (src/update.cpp)
ATTACH_LINES = (
    'python attach input 1 SELF format p here "from lammps_interface import attach"\n'
    "python attach invoke\n"
)
_COLUMNS = "id x y z xu yu zu fx fy fz c_pe"
_VIRIAL_COLUMNS = "id c_sa[1] c_sa[2] c_sa[3] c_sa[4] c_sa[5] c_sa[6]"
_THERMO = ("pe", "pxx", "pyy", "pzz", "pxy", "pxz", "pyz", "vol")


def lammps_frame(atoms: Atoms) -> Atoms:
    """`atoms` rotated so the cell is lower triangular (a along x, b in the xy plane)."""
    atoms = atoms.copy()
    cell, _ = atoms.cell.standard_form()
    atoms.set_cell(cell, scale_atoms=True)
    return atoms


def write_data(
    path: Path,
    atoms: Atoms,
    elements: tuple[str, ...],
    charges: dict[int, float] | None = None,
) -> None:
    """An `atom_style atomic` data file, or `atom_style charge` with `charges` (e, by atomic
    number); atom k of `atoms` gets id k + 1."""
    cell = atoms.cell.array.tolist()
    if not np.allclose(cell, np.tril(cell)):
        raise ValueError("rotate the atoms with lammps_frame first")
    types = {atomic_numbers[e]: k + 1 for k, e in enumerate(elements)}
    lines = [
        "nvdd test system",
        "",
        f"{len(atoms)} atoms",
        f"{len(elements)} atom types",
        "",
        f"0 {cell[0][0]!r} xlo xhi",
        f"0 {cell[1][1]!r} ylo yhi",
        f"0 {cell[2][2]!r} zlo zhi",
    ]
    if np.any(np.tril(cell, -1)):
        lines.append(f"{cell[1][0]!r} {cell[2][0]!r} {cell[2][1]!r} xy xz yz")
    lines += ["", "Masses", ""]
    lines += [
        f"{k + 1} {float(atomic_masses[atomic_numbers[e]])!r}" for k, e in enumerate(elements)
    ]
    lines += ["", "Atoms # atomic" if charges is None else "Atoms # charge", ""]
    for k, (z, x) in enumerate(zip(atoms.numbers, atoms.positions.tolist(), strict=True)):
        q = "" if charges is None else f" {charges[int(z)]!r}"
        lines.append(f"{k + 1} {types[int(z)]}{q} {x[0]!r} {x[1]!r} {x[2]!r}")
    path.write_text("\n".join(lines) + "\n")


@dataclass(frozen=True)
class Case:
    """One LAMMPS run: a system, a pair style, and what to write.

    Attributes:
        name: prefix of the output files (<name>.dump/.txt, <name>_md.dump/.txt after MD).
        data: data file.
        elements: element of each atom type.
        model: .pkl file for `pair_style mliap unified`, or None for native lj/cut.
        boundary: LAMMPS boundary flags.
        processors: LAMMPS processors grid.
        ghostneigh: the mliap ghostneigh flag.
        comm_cutoff: `comm_modify cutoff`, Å (None: LAMMPS's default).
        md_steps: NVE steps from 300 K after the static evaluation (0: none).
        lj: (epsilon, sigma, cutoff) for the native style.
        newton_pair: LAMMPS's newton pair flag.
        atom_virials: also dump `compute stress/atom NULL virial` (<name>.virial).
        balance: LAMMPS's own load balancing: "shift" (`balance` + `fix balance` shift
            along z, brick communication) or "rcb" (the same with recursive coordinate
            bisection, tiled communication); "" for none.
        exclude_pairs: `neigh_modify exclude group all all` (LAMMPS's neighbour lists, and
            so ML-IAP's pair list, hold no pairs; the ghost shell stays the pair cutoff's).
    """

    name: str
    data: str
    elements: tuple[str, ...]
    model: str | None
    boundary: str = "p p p"
    processors: str = "* * *"
    ghostneigh: int = 0
    comm_cutoff: float | None = None
    md_steps: int = 0
    lj: tuple[float, float, float] | None = None
    newton_pair: bool = True
    atom_virials: bool = False
    balance: str = ""
    exclude_pairs: bool = False

    def block(self) -> str:
        """The input-script lines of this case (they start with `clear`)."""
        lines = [
            "clear",
            "units metal",
            f"newton {'on' if self.newton_pair else 'off'}",
            "atom_style atomic",
            "atom_modify map array sort 10 1.0",
            f"boundary {self.boundary}",
            f"processors {self.processors}",
            *(["comm_style tiled"] if self.balance == "rcb" else []),
            f"read_data {self.data}",
            "neighbor 1.0 bin",
            "neigh_modify every 5 delay 0 check no",  # rebuild (and sort) during MD
            *(["neigh_modify exclude group all all"] if self.exclude_pairs else []),
        ]
        if self.comm_cutoff is not None:
            lines.append(f"comm_modify cutoff {self.comm_cutoff!r}")
        if self.model is None:
            epsilon, sigma, cutoff = self.lj
            lines += [
                f"pair_style lj/cut {cutoff!r}",
                f"pair_coeff * * {epsilon!r} {sigma!r}",
                "pair_modify shift yes",
            ]
        else:
            lines += [
                f"pair_style mliap unified {self.model} {self.ghostneigh}",
                f"pair_coeff * * {' '.join(self.elements)}",
            ]
        style = {"": "", "shift": "shift z 20 1.0", "rcb": "rcb"}[self.balance]
        if style:
            lines.append(f"balance 1.0 {style}")
        lines += ["compute pe all pe/atom", *_snapshot(self.name, self.atom_virials)]
        if self.md_steps:
            lines += [
                "velocity all create 300 4928459 loop geom",
                *([f"fix lb all balance 10 1.0 {style}"] if style else []),
                "fix md all nve",
                "timestep 0.002",
                f"run {self.md_steps}",
                *_snapshot(f"{self.name}_md", self.atom_virials),
            ]
        return "\n".join(lines) + "\n"


def _snapshot(prefix: str, atom_virials: bool = False) -> list[str]:
    values = " ".join(f"$({key}:%.17g)" for key in _THERMO)
    lines = [
        f"dump snap all custom 1 {prefix}.dump {_COLUMNS}",
        "dump_modify snap sort id format float %.17g",
    ]
    if atom_virials:
        lines += [
            "compute sa all stress/atom NULL virial",
            f"dump virial all custom 1 {prefix}.virial {_VIRIAL_COLUMNS}",
            "dump_modify virial sort id format float %.17g",
        ]
    lines += ["run 0", "undump snap"]
    if atom_virials:
        lines += ["undump virial", "uncompute sa"]
    return [*lines, f'print "{values}" file {prefix}.txt screen no']


@dataclass(frozen=True)
class Snapshot:
    """What a case wrote at one instant, rows sorted by atom id.

    Attributes:
        energy: potential energy, eV.
        pressure: (pxx, pyy, pzz, pxy, pxz, pyz), bar.
        volume: box volume, Å³.
        positions, unwrapped: (N, 3) wrapped and unwrapped positions, Å.
        forces: (N, 3) eV/Å.
        energies: (N,) per-atom energies, eV.
        atom_virials: (N, 6) per-atom virials (xx, yy, zz, xy, xz, yz) in eV with the stress
            sign (`compute stress/atom`, which is -virial x nktv2p, over nktv2p: they sum to
            stress() x volume), or None when the case did not dump them.
    """

    energy: float
    pressure: np.ndarray
    volume: float
    positions: np.ndarray
    unwrapped: np.ndarray
    forces: np.ndarray
    energies: np.ndarray
    atom_virials: np.ndarray | None = None

    def stress(self) -> np.ndarray:
        """(3, 3) virial stress, eV/Å³, ASE sign (valid when the atoms are at rest)."""
        xx, yy, zz, xy, xz, yz = self.pressure / NKTV2P
        return -np.array([[xx, xy, xz], [xy, yy, yz], [xz, yz, zz]])


def read_snapshot(directory: Path, prefix: str) -> Snapshot:
    """Read <prefix>.txt and <prefix>.dump written by a case."""
    thermo = np.loadtxt(directory / f"{prefix}.txt")
    lines = (directory / f"{prefix}.dump").read_text().splitlines()
    start = lines.index(f"ITEM: ATOMS {_COLUMNS}") + 1
    rows = np.array([[float(v) for v in line.split()] for line in lines[start:]])
    virials = None
    if (directory / f"{prefix}.virial").exists():
        virial_lines = (directory / f"{prefix}.virial").read_text().splitlines()
        first = virial_lines.index(f"ITEM: ATOMS {_VIRIAL_COLUMNS}") + 1
        table = np.array([[float(v) for v in line.split()] for line in virial_lines[first:]])
        virials = table[:, 1:] / NKTV2P
    return Snapshot(
        energy=float(thermo[0]),
        pressure=thermo[1:7],
        volume=float(thermo[7]),
        positions=rows[:, 1:4],
        unwrapped=rows[:, 4:7],
        forces=rows[:, 7:10],
        energies=rows[:, 10],
        atom_virials=virials,
    )
