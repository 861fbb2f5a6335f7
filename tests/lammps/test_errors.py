"""Set-ups the bridge cannot serve end with a clear message, never a hang."""

from __future__ import annotations

import pytest

from tests.lammps.jobs import missing_lammps, run_lmp

if (reason := missing_lammps()) is not None:
    pytest.skip(reason, allow_module_level=True)

from tests.lammps.cases import model_case
from tests.lammps.lammps_io import ATTACH_LINES, read_snapshot

pytestmark = pytest.mark.lammps


def test_newton_pair_off_is_refused(workdir, systems) -> None:
    """Ghost-row forces need LAMMPS's reverse communication, i.e. newton pair on."""
    case = model_case("newton_off", "lj.pkl", systems["bulk_ar"], 1, newton_pair=False)
    (workdir / "in.newton_off").write_text(ATTACH_LINES + case.block())
    code, output = run_lmp(1, workdir / "in.newton_off", workdir, timeout=120)
    assert code != 0, output
    assert "requires newton pair on" in output


def test_nan_from_the_model_stops_lammps(workdir, systems) -> None:
    """NaN energies or forces end every rank with the message, not `nan` thermo and exit 0."""
    from lammps_interface import MLIAPModel
    from tests.helpers.systems import NaNBeyondWall

    MLIAPModel(NaNBeyondWall(wall_x=5.0), ["Ar"]).pickle(workdir / "nan.pkl")
    case = model_case("nan", "nan.pkl", systems["bulk_ar"], 2)
    (workdir / "in.nan").write_text(ATTACH_LINES + case.block())
    code, output = run_lmp(2, workdir / "in.nan", workdir, timeout=120)
    assert code != 0, output
    assert "NonFiniteError: non-finite energies on rank " in output, output
    assert "atom ids [" in output, output


def test_multi_layer_model_without_handle_or_layers(workdir, systems) -> None:
    """A pair potential needs neither the handle nor n_layers (its spec says one layer); a
    message-passing model without both (its spec leaves n_layers unknown) cannot know its
    ghost shell and says so."""
    from lammps_interface import MLIAPModel
    from tests.helpers.systems import mpnn_model

    bridge = MLIAPModel(mpnn_model(), ["Ar"])
    bridge.n_layers = None  # as for a spec that does not declare it
    bridge.pickle(workdir / "mpnn_bare.pkl")
    case = model_case("bare", "mpnn_bare.pkl", systems["bulk_ar"], 1)
    (workdir / "in.bare").write_text(case.block())
    code, output = run_lmp(1, workdir / "in.bare", workdir, timeout=120)
    assert code != 0, output
    assert "no LAMMPS handle is attached and MLIAPModel has no n_layers" in output


@pytest.mark.parametrize(
    ("model_file", "elements", "expected"),
    [
        ("missing.pkl", ("Ar",), "No such file or directory: 'missing.pkl'"),
        ("corrupt.pkl", ("Ar",), "Running mliappy unified module failure"),
        ("lj.pkl", ("Xe",), "Incorrect args for pair coefficients"),
    ],
)
def test_bad_model_file_or_element(workdir, systems, model_file, elements, expected) -> None:
    """LAMMPS's own loader and `pair_coeff` checks end the run (no hang, non-zero exit)."""
    (workdir / "corrupt.pkl").write_text("not a pickle\n")
    case = model_case("bad", model_file, systems["bulk_ar"], 2)
    script = ATTACH_LINES + case.block().replace(
        "pair_coeff * * Ar", f"pair_coeff * * {' '.join(elements)}"
    )
    (workdir / "in.bad").write_text(script)
    code, output = run_lmp(2, workdir / "in.bad", workdir, timeout=120)
    assert code != 0, output
    assert expected in output


def test_units_other_than_metal_are_refused(workdir, systems) -> None:
    """`units real` would read the model's eV as kcal/mol (23x off): one clear line."""
    case = model_case("real", "lj.pkl", systems["bulk_ar"], 1)
    script = ATTACH_LINES + case.block().replace("units metal", "units real")
    (workdir / "in.real").write_text(script)
    code, output = run_lmp(1, workdir / "in.real", workdir, timeout=60)
    assert code != 0, output
    assert "LAMMPS runs with `units real`" in output and "use `units metal`" in output


def test_atoms_without_ids_are_refused(workdir) -> None:
    """`atom_modify id no` (a data file with every id 0, an orthogonal box: LAMMPS itself
    needs ids for triclinic neighbour lists and sorted dumps): the halo exchange needs ids."""
    from ase.build import bulk

    from tests.lammps.lammps_io import write_data

    atoms = bulk("Ar", "fcc", a=5.26, cubic=True).repeat(3)
    write_data(workdir / "cubic_ar.data", atoms, ("Ar",))
    header, _, rows = (workdir / "cubic_ar.data").read_text().partition("Atoms # atomic\n")
    rows = "\n".join("0" + row[row.index(" ") :] if row else row for row in rows.split("\n"))
    (workdir / "no_ids.data").write_text(header + "Atoms # atomic\n" + rows)
    script = ATTACH_LINES + "\n".join(
        [
            "units metal",
            "atom_style atomic",
            "atom_modify id no",
            "read_data no_ids.data",
            "pair_style mliap unified lj.pkl 0",
            "pair_coeff * * Ar",
            "run 0",
        ]
    )
    (workdir / "in.no_ids").write_text(script)
    code, output = run_lmp(2, workdir / "in.no_ids", workdir, timeout=60)
    assert code != 0, output
    assert "use `atom_modify id yes`" in output, output


def test_nan_is_named_where_it_came_from(workdir, systems) -> None:
    """NaN energies on rank 1's atoms spread to rank 0's forces through the halo exchange:
    every rank's message names rank 1 as the origin (by atom id) and rank 0 as reached."""
    from lammps_interface import MLIAPModel
    from tests.helpers.systems import NaNSpreadingBeyondWall

    system = systems["bulk_ar"]
    wall = 0.8 * float(system.atoms.cell[0, 0])  # inside rank 1's half of x
    MLIAPModel(NaNSpreadingBeyondWall(wall_x=wall), ["Ar"]).pickle(workdir / "spread.pkl")
    case = model_case("spread", "spread.pkl", system, 2)
    script = ATTACH_LINES + case.block().replace("processors * * *", "processors 2 1 1")
    (workdir / "in.spread").write_text(script)
    code, output = run_lmp(2, workdir / "in.spread", workdir, timeout=120)
    assert code != 0, output
    assert "non-finite energies on rank 1: atom ids [" in output, output
    assert "non-finite energies on rank 0" not in output, output
    assert "non-finite forces only on rank 0: atom ids [" in output, output


class _FormatOneFile:
    """Pickles as the model file of a release before model files had a format version: no
    `format_version`, no `device` and no staging buffers (runtime state added since)."""

    def __init__(self, state: dict) -> None:
        dropped = ("format_version", "device", "_staging")
        self.state = {name: value for name, value in state.items() if name not in dropped}

    def __reduce__(self):
        import copyreg

        from lammps_interface import MLIAPModel

        return (copyreg._reconstructor, (MLIAPModel, object, None), self.state)


def test_a_model_file_of_the_previous_release_runs(workdir, systems) -> None:
    """A format-1 file loads with its runtime fields set afresh and gives the same energy as
    a file of this release (it stopped LAMMPS with `no attribute '_staging'`)."""
    import pickle

    from lammps_interface import MLIAPModel
    from tests.helpers.systems import lj_model

    bridge = MLIAPModel(lj_model(), ["Ar"])
    with open(workdir / "format1.pkl", "wb") as handle:
        pickle.dump(_FormatOneFile(bridge.__getstate__()), handle)
    script = ATTACH_LINES + "".join(
        model_case(name, f"{name}.pkl", systems["bulk_ar"], 2).block() for name in ("format1", "lj")
    )
    (workdir / "in.format1").write_text(script)
    code, output = run_lmp(2, workdir / "in.format1", workdir, timeout=120)
    assert code == 0, output
    old, new = (read_snapshot(workdir, name) for name in ("format1", "lj"))
    assert old.energy == new.energy and (old.forces == new.forces).all()


def test_model_files_from_a_newer_release_or_incomplete_are_refused(tmp_path) -> None:
    """A file of a format this release does not know, or missing a field, says what to do."""
    import pickle

    from lammps_interface import MLIAPModel
    from tests.helpers.systems import lj_model

    state = MLIAPModel(lj_model(), ["Ar"]).__getstate__()
    newer = _FormatOneFile(state)
    newer.state = {**state, "format_version": 99}
    incomplete = _FormatOneFile(state)
    del incomplete.state["dtype"]
    for file, message in (
        (newer, "format version 99, newer than this release reads"),
        (incomplete, r"lacks \['dtype'\]"),
    ):
        with pytest.raises(ValueError, match=message) as raised:
            pickle.loads(pickle.dumps(file))
        assert "python -m lammps_interface" in str(raised.value)


def test_a_reciprocal_space_model_is_refused_with_the_alternatives() -> None:
    """RigidIonModel (Ewald/PME) was refused as "not periodic (pbc False)" on a periodic box:
    the message says that ML-IAP cannot carry a reciprocal sum, and what to run instead."""
    from lammps_interface import MLIAPModel
    from nvdd_plugins.models import Ewald, RigidIonModel
    from tests.helpers.ionic import NACL_CHARGES, TOSI_FUMI_NACL

    model = RigidIonModel(NACL_CHARGES, TOSI_FUMI_NACL, 6.0, Ewald.for_accuracy(6.0, 1e-6))
    with pytest.raises(ValueError, match="reciprocal-space term") as raised:
        MLIAPModel(model, ["Na", "Cl"])
    assert "DomainParallel or the ASE calculator" in str(raised.value)
    assert "kspace_style ewald" in str(raised.value)
