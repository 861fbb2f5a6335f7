"""NequIP and Allegro through LAMMPS (`pair_style mliap unified`, Python driver) at 1, 2 and 4
ranks equal nequip's own ASE calculator: with the handle (per-layer ghost exchange) on a
two-species bulk and slab, per-atom virials for Allegro, and Allegro without the handle on
LAMMPS's default ghost shell of one cutoff (fallback mode, no exchange: its spec's
n_layers = 1)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.lammps.jobs import missing_lammps

if (reason := missing_lammps()) is not None:
    pytest.skip(reason, allow_module_level=True)
pytest.importorskip("nequip")
pytest.importorskip("allegro")

from lammps_interface import MLIAPModel
from tests.helpers.multiprocess import run_mpi
from tests.helpers.nequip_models import BUILDERS, WRAPPERS, nequip_reference
from tests.helpers.oracle import assert_close
from tests.lammps.cases import LammpsSystem, model_case
from tests.lammps.conftest import DRIVER, MODEL_RANKS, Run
from tests.lammps.lammps_io import ATTACH_LINES, write_data
from tests.lammps.references import atom_virial_reference, deviations, virial_deviations

pytestmark = [pytest.mark.lammps, pytest.mark.nequip]

DETACH_LINES = 'python detach here "from lammps_interface import detach"\npython detach invoke\n'
ATTACHED = {  # case: (model, system)
    "nequip_bulk": ("nequip", "bulk_mix"),
    "nequip_slab": ("nequip", "slab_mix"),
    "allegro_bulk": ("allegro", "bulk_mix"),
    "allegro_slab": ("allegro", "slab_mix"),
}
FALLBACK = {"fallback_allegro_bulk": ("allegro", "bulk_mix")}


def _script(systems: dict[str, LammpsSystem], n_ranks: int) -> str:
    """Fallback cases (handle detached, default ghost shell), then the attached ones."""

    def blocks(cases: dict[str, tuple[str, str]], **options: object) -> str:
        return "".join(
            model_case(name, f"{kind}.pkl", systems[system], n_ranks, **options).block()
            for name, (kind, system) in cases.items()
        )

    virial = model_case(
        "allegro_bulk_virial", "allegro.pkl", systems["bulk_mix"], n_ranks, atom_virials=True
    )
    return DETACH_LINES + blocks(FALLBACK) + ATTACH_LINES + blocks(ATTACHED) + virial.block()


@pytest.fixture(scope="module", params=MODEL_RANKS, ids=lambda n: f"np{n}")
def nequip_run(request, tmp_path_factory, systems: dict[str, LammpsSystem]) -> Run:
    n_ranks = request.param
    directory = tmp_path_factory.mktemp(f"nequip_np{n_ranks}")
    for name in ("bulk_mix", "slab_mix"):
        write_data(directory / systems[name].data, systems[name].atoms, systems[name].elements)
    for kind, make in WRAPPERS.items():
        MLIAPModel(make(), ["Ar", "Cu"]).pickle(directory / f"{kind}.pkl")
    (directory / "in.cases").write_text(_script(systems, n_ranks))
    output = run_mpi(n_ranks, DRIVER, str(directory / "in.cases"), timeout=300)
    return Run(Path(directory), output, n_ranks)


def _reference(kind: str, atoms) -> dict[str, np.ndarray]:
    ref = {k: v.numpy() for k, v in nequip_reference(BUILDERS[kind](), atoms).items()}
    ref["stress"] = ref["stress"][0]
    return ref


@pytest.mark.parametrize("case", [*ATTACHED, *FALLBACK])
def test_matches_nequip_calculator(nequip_run, systems, case: str) -> None:
    kind, system = {**ATTACHED, **FALLBACK}[case]
    atoms = systems[system].atoms
    errs = deviations(nequip_run.snapshot(case), _reference(kind, atoms), atoms)
    print(f"{case} np{nequip_run.n_ranks}: {errs}")
    assert_close(errs, f"{case} np{nequip_run.n_ranks}")


def test_fallback_needs_no_deeper_shell(nequip_run) -> None:
    assert "fallback mode: no LAMMPS handle attached" in nequip_run.output
    assert "A one-layer model is exact with LAMMPS's default ghost shell" in nequip_run.output


def test_allegro_per_atom_virials(nequip_run, systems) -> None:
    atoms = systems["bulk_mix"].atoms
    reference = atom_virial_reference(WRAPPERS["allegro"](), atoms)
    errs = virial_deviations(nequip_run.snapshot("allegro_bulk_virial"), reference)
    assert max(errs.values()) < 1e-10, errs
