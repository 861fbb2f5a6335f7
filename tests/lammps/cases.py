"""The LAMMPS cases the tests run: systems in LAMMPS's frame, model files, and what each
launch runs.

`lmp` binary launches first run cases without the handle (fallback mode), then attach it;
Python driver launches attach it before anything runs. LAMMPS and mace are imported only
inside the functions that need them, so this module loads (and tests can skip) without them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ase import Atoms

from tests.helpers.systems import (
    LJ_CUTOFF,
    LJ_EPSILON,
    LJ_SIGMA,
    MPNN_CUTOFF,
    SYSTEMS,
    lj_model,
    mpnn_model,
)
from tests.lammps.lammps_io import Case, lammps_frame

MD_STEPS = {"lj": 100, "mpnn": 40}
NEIGHBOR_SKIN = 1.0  # `neighbor 1.0 bin` in every case
FALLBACK_COMM_CUTOFF = 3 * MPNN_CUTOFF + NEIGHBOR_SKIN  # 3 layers x cutoff + skin


@dataclass(frozen=True)
class LammpsSystem:
    """A system in LAMMPS's frame, its data file and its LAMMPS boundary flags."""

    atoms: Atoms
    data: str
    elements: tuple[str, ...]
    boundary: str


def make_systems() -> dict[str, LammpsSystem]:
    """bulk_ar, slab_ar (Ar) and bulk_mix, slab_mix (Ar + Cu), rotated into LAMMPS's frame."""
    from tests.helpers.mace_models import with_two_species

    systems = {}
    for name, elements in (("ar", ("Ar",)), ("mix", ("Ar", "Cu"))):
        for kind in ("bulk", "slab"):
            atoms = SYSTEMS[kind]()
            if name == "mix":
                atoms = with_two_species(atoms)
            boundary = " ".join("p" if p else "f" for p in atoms.pbc)
            systems[f"{kind}_{name}"] = LammpsSystem(
                lammps_frame(atoms), f"{kind}_{name}.data", elements, boundary
            )
    systems["cluster_ar"] = LammpsSystem(off_centre_cluster(), "cluster_ar.data", ("Ar",), "f f f")
    return systems


def off_centre_cluster() -> Atoms:
    """An open Ar cluster in the lower half of a 30 Å box (`boundary f f f`): cut along z,
    the upper rank owns nothing but receives ghosts, the lower one sends and receives none."""
    atoms = SYSTEMS["cluster"]()
    atoms.positions -= atoms.positions.min(axis=0) - 3.0
    atoms.set_cell([30.0, 30.0, 30.0])
    return atoms


def write_models(directory: Path) -> None:
    """lj.pkl, mpnn.pkl, mpnn32.pkl (float32) and mace.pkl (two species) in `directory`."""
    import torch

    from lammps_interface import MLIAPModel
    from nvdd_plugins.models import MACEWrapper
    from tests.helpers.mace_models import tiny_mace

    MLIAPModel(lj_model(), ["Ar"]).pickle(directory / "lj.pkl")
    MLIAPModel(mpnn_model(), ["Ar"], n_layers=3).pickle(directory / "mpnn.pkl")
    narrow = MLIAPModel(mpnn_model(), ["Ar"], dtype=torch.float32, n_layers=3)
    narrow.pickle(directory / "mpnn32.pkl")
    mace = MLIAPModel(MACEWrapper(tiny_mace()), ["Ar", "Cu"], n_layers=2)
    mace.pickle(directory / "mace.pkl")


def model_case(
    name: str, model: str, system: LammpsSystem, n_ranks: int, **options: object
) -> Case:
    """A bridge case; slabs are cut into `n_ranks` layers along z (empty ones at 4 ranks)."""
    processors = "* * *" if system.boundary == "p p p" else f"* * {n_ranks}"
    return Case(
        name,
        system.data,
        system.elements,
        model,
        boundary=system.boundary,
        processors=processors,
        **options,
    )


def lmp_cases(systems: dict[str, LammpsSystem], n_ranks: int) -> tuple[list[Case], list[Case]]:
    """(cases without the handle, cases with it) for the `lmp` binary."""
    bulk, slab = systems["bulk_ar"], systems["slab_ar"]
    fallback = [
        model_case(
            "fallback_mpnn_bulk",
            "mpnn.pkl",
            bulk,
            n_ranks,
            ghostneigh=1,
            comm_cutoff=FALLBACK_COMM_CUTOFF,
        ),
        model_case("fallback_lj_bulk", "lj.pkl", bulk, n_ranks),
    ]
    cluster = systems["cluster_ar"]
    handle = [
        model_case("mpnn_bulk", "mpnn.pkl", bulk, n_ranks, md_steps=MD_STEPS["mpnn"]),
        model_case("mpnn_slab", "mpnn.pkl", slab, n_ranks),
        model_case("lj_cluster", "lj.pkl", cluster, n_ranks),
        model_case("mpnn_cluster", "mpnn.pkl", cluster, n_ranks),
        model_case("mpnn_cluster_virial", "mpnn.pkl", cluster, n_ranks, atom_virials=True),
        *balance_cases(slab, n_ranks),
        *excluded_pair_cases(systems, n_ranks),
    ]
    fallback.append(
        model_case(
            "fallback_mpnn_bulk_virial",
            "mpnn.pkl",
            bulk,
            n_ranks,
            ghostneigh=1,
            comm_cutoff=FALLBACK_COMM_CUTOFF,
            atom_virials=True,
        )
    )
    fallback.append(
        model_case(
            "fallback_mpnn_slab_shift",
            "mpnn.pkl",
            slab,
            n_ranks,
            ghostneigh=1,
            comm_cutoff=FALLBACK_COMM_CUTOFF,
            md_steps=MD_STEPS["mpnn"],
            balance="shift",
        )
    )
    return fallback, handle


def balance_cases(slab: LammpsSystem, n_ranks: int) -> list[Case]:
    """The slab (cut along z: empty ranks at 4) with LAMMPS's `balance` and `fix balance`
    (shift, rcb)."""
    steps = MD_STEPS["mpnn"]
    return [
        model_case("mpnn_slab_shift", "mpnn.pkl", slab, n_ranks, md_steps=steps, balance="shift"),
        model_case("mpnn_slab_rcb", "mpnn.pkl", slab, n_ranks, md_steps=steps, balance="rcb"),
    ]


def excluded_pair_cases(systems: dict[str, LammpsSystem], n_ranks: int) -> list[Case]:
    """Cases with `neigh_modify exclude group all all` (ML-IAP lists no pairs): the periodic
    triclinic bulk and the balanced slab with MD (re-neighbouring, `fix balance`), and the
    open cluster (names end in _exclude). Half the other cases' MD: still four
    re-neighbourings and two `fix balance` calls."""
    steps = MD_STEPS["mpnn"] // 2
    slab = systems["slab_ar"]
    options = {"exclude_pairs": True}
    return [
        model_case(
            "mpnn_bulk_exclude", "mpnn.pkl", systems["bulk_ar"], n_ranks, md_steps=steps, **options
        ),
        model_case("mpnn_cluster_exclude", "mpnn.pkl", systems["cluster_ar"], n_ranks, **options),
        model_case(
            "mpnn_slab_shift_exclude",
            "mpnn.pkl",
            slab,
            n_ranks,
            md_steps=steps,
            balance="shift",
            **options,
        ),
        model_case(
            "mpnn_slab_rcb_exclude",
            "mpnn.pkl",
            slab,
            n_ranks,
            md_steps=steps,
            balance="rcb",
            **options,
        ),
    ]


def driver_cases(systems: dict[str, LammpsSystem], n_ranks: int) -> list[Case]:
    """Cases for the Python driver (handle attached by the driver)."""
    bulk = systems["bulk_ar"]
    lj = (LJ_EPSILON, LJ_SIGMA, LJ_CUTOFF)
    return [
        Case("lj_native", bulk.data, bulk.elements, None, lj=lj, md_steps=MD_STEPS["lj"]),
        model_case("lj_bridge", "lj.pkl", bulk, n_ranks, md_steps=MD_STEPS["lj"]),
        model_case("lj_bridge_ghostneigh", "lj.pkl", bulk, n_ranks, ghostneigh=1),
        model_case("mpnn_bulk", "mpnn.pkl", bulk, n_ranks, md_steps=MD_STEPS["mpnn"]),
        model_case("mpnn_slab", "mpnn.pkl", systems["slab_ar"], n_ranks),
        model_case("mpnn_bulk_ghostneigh", "mpnn.pkl", bulk, n_ranks, ghostneigh=1),
        model_case("mpnn32_bulk", "mpnn32.pkl", bulk, n_ranks),
        model_case("mace_bulk", "mace.pkl", systems["bulk_mix"], n_ranks),
        model_case("mace_slab", "mace.pkl", systems["slab_mix"], n_ranks),
        *virial_cases(systems, n_ranks),
    ]


def virial_cases(systems: dict[str, LammpsSystem], n_ranks: int) -> list[Case]:
    """Static cases that also dump `compute stress/atom` (named <case>_virial)."""
    bulk = systems["bulk_ar"]
    lj = (LJ_EPSILON, LJ_SIGMA, LJ_CUTOFF)
    return [
        Case("lj_native_virial", bulk.data, bulk.elements, None, lj=lj, atom_virials=True),
        model_case("lj_bridge_virial", "lj.pkl", bulk, n_ranks, atom_virials=True),
        model_case("mpnn_bulk_virial", "mpnn.pkl", bulk, n_ranks, atom_virials=True),
        model_case("mpnn_slab_virial", "mpnn.pkl", systems["slab_ar"], n_ranks, atom_virials=True),
        model_case(
            "mpnn_bulk_ghostneigh_virial",
            "mpnn.pkl",
            bulk,
            n_ranks,
            ghostneigh=1,
            atom_virials=True,
        ),
        model_case("mace_bulk_virial", "mace.pkl", systems["bulk_mix"], n_ranks, atom_virials=True),
        model_case("mace_slab_virial", "mace.pkl", systems["slab_mix"], n_ranks, atom_virials=True),
    ]
