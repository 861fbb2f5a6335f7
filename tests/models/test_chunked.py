"""ChunkedEvaluator: a system evaluated in spatial chunks one after another equals the whole
system evaluated at once (float64 tolerances), for a kernel model (LJ: forces and per-atom
stresses from the kernel), an autograd MPNN and tiny MACE, periodic, slab and open."""

from __future__ import annotations

import importlib.util
import logging
import re

import ase.build
import pytest
import torch
from ase import Atoms

from nvdd_plugins import Batch, ChunkedEvaluator
from nvdd_plugins.dynamics import NVE
from nvdd_plugins.models import LennardJonesModel, SimpleMPNN
from tests.helpers.oracle import assert_close, errors, on_the_oracle, properties_for, reference


def _copper(pbc: tuple[bool, bool, bool]) -> Atoms:
    """480 rattled fcc Cu atoms (21.7 x 18.1 x 14.4 Å); open axes get no cell vector."""
    atoms = ase.build.bulk("Cu", "fcc", a=3.61, cubic=True).repeat((6, 5, 4))
    atoms.rattle(0.05, seed=1)
    atoms.pbc = pbc
    atoms.cell[[axis for axis in range(3) if not pbc[axis]]] = 0.0
    return atoms


SYSTEMS = {
    "bulk": (True, True, True),
    "slab": (True, True, False),
    "cluster": (False, False, False),
}
MODELS = {
    "lj": lambda: LennardJonesModel(0.0104, 2.3, 4.0, shift=True),
    "mpnn": lambda: SimpleMPNN(cutoff=3.5, hidden=8, n_layers=2).double(),
}


def _chunked(model, atoms: Atoms, **options) -> dict[str, torch.Tensor]:
    properties = properties_for(atoms)
    return ChunkedEvaluator(model, **options)(Batch.from_atoms(atoms), properties)


@pytest.mark.parametrize("grid", [(2, 1, 1), (2, 2, 1), (3, 2, 2)])
@pytest.mark.parametrize("system", SYSTEMS)
@pytest.mark.parametrize("kind", MODELS)
def test_chunks_equal_the_whole_system(kind: str, system: str, grid) -> None:
    model, atoms = MODELS[kind](), _copper(SYSTEMS[system])
    result = _chunked(model, atoms, grid=grid)
    ref = reference(model, atoms, properties_for(atoms))
    assert_close(errors(result, ref, len(atoms)), f"{kind} {system} {grid}")
    if "stresses" in ref:  # NaN without a cell volume, on both sides
        torch.testing.assert_close(
            result["stresses"], ref["stresses"], atol=1e-9, rtol=0, equal_nan=True
        )


def test_per_atom_virials_of_an_autograd_model_in_chunks() -> None:
    """Per-atom stresses from the edge vectors, chunk by chunk: the shares of ghost images
    go to their atoms, so every atom's stress equals the whole system's."""
    model, atoms = MODELS["mpnn"](), _copper(SYSTEMS["bulk"])
    properties = ("energy", "forces", "stress", "stresses")
    result = ChunkedEvaluator(model, grid=(2, 2, 1))(Batch.from_atoms(atoms), properties)
    ref = reference(model, atoms, properties)
    torch.testing.assert_close(result["stresses"], ref["stresses"], atol=1e-9, rtol=0)
    assert float(ref["stresses"].abs().max()) > 1e3 * 1e-9  # well above the tolerance


@pytest.mark.mace
@pytest.mark.skipif(importlib.util.find_spec("mace") is None, reason="needs mace-torch")
@pytest.mark.parametrize("system", ["bulk", "cluster"])
def test_mace_in_chunks(system: str) -> None:
    from nvdd_plugins.models import MACEWrapper
    from tests.helpers.mace_models import tiny_mace, with_two_species

    model, atoms = MACEWrapper(tiny_mace()), with_two_species(_copper(SYSTEMS[system]))
    result = _chunked(model, atoms, grid=(2, 2, 1))
    assert_close(errors(result, reference(model, atoms, properties_for(atoms)), len(atoms)))


def test_too_thin_a_shell_is_wrong() -> None:
    """Negative control: a two-layer model evaluated with a one-cutoff shell."""
    model, atoms = MODELS["mpnn"](), _copper(SYSTEMS["bulk"])
    result = _chunked(model, atoms, grid=(3, 1, 1), n_layers=1)
    errs = errors(result, reference(model, atoms, properties_for(atoms)), len(atoms))
    assert errs["forces"] > 1e-6, errs


def test_max_atoms_picks_chunks_that_fit() -> None:
    model, atoms = MODELS["lj"](), _copper(SYSTEMS["bulk"])
    evaluator = ChunkedEvaluator(model, max_atoms=400)
    plan = evaluator.plan(Batch.from_atoms(atoms))
    assert len(plan.rows) > 1 and max(plan.rows) <= 400
    assert plan.redundancy == pytest.approx(sum(plan.rows) / len(atoms) - 1.0)
    ref = reference(model, atoms, properties_for(atoms))
    result = evaluator(Batch.from_atoms(atoms), properties_for(atoms))
    assert_close(errors(result, ref, len(atoms)))


def test_clear_errors() -> None:
    model, atoms = MODELS["mpnn"](), _copper(SYSTEMS["bulk"])
    with pytest.raises(ValueError, match="raise max_atoms"):
        ChunkedEvaluator(model, max_atoms=100).plan(Batch.from_atoms(atoms))
    with pytest.raises(ValueError, match="positive"):
        ChunkedEvaluator(model, max_atoms=0)
    no_layers = MODELS["mpnn"]()
    no_layers.distribution_spec = lambda strategy=None: None
    with pytest.raises(ValueError, match="n_layers"):
        ChunkedEvaluator(no_layers)


def test_models_with_global_sums_are_refused() -> None:
    """A spec whose forward sums over the whole system (charge equilibration: an adapter
    with AllReduceSum) cannot run chunk by chunk, even with its layers given."""
    from dataclasses import replace

    from nvdd_plugins.spec import AllReduceSum, OpAdapter

    class GlobalSumMPNN(SimpleMPNN):
        def distribution_spec(self, strategy=None):
            spec = super().distribution_spec(strategy)
            summed = OpAdapter(op=torch.ops.aten.sum.default, output_transforms={0: AllReduceSum()})
            return replace(spec, distribution=replace(spec.distribution, custom_ops=(summed,)))

    model = GlobalSumMPNN(cutoff=3.5, hidden=8, n_layers=2).double()
    with pytest.raises(ValueError, match="ChunkedEvaluator cannot evaluate GlobalSumMPNN"):
        ChunkedEvaluator(model, n_layers=2)


def test_nve_in_chunks_follows_the_whole_system() -> None:
    model, atoms = MODELS["mpnn"](), _copper(SYSTEMS["bulk"])
    runs = []
    for chunked in (False, True):
        batch = Batch.from_atoms(atoms)
        generator = torch.Generator().manual_seed(0)
        velocities = torch.randn(batch.positions.shape, generator=generator, dtype=torch.float64)
        batch.add_node_property("velocities", velocities * 0.01)
        dynamics = on_the_oracle(NVE(model, dt=1.0))
        if chunked:
            dynamics.evaluator = ChunkedEvaluator(model, grid=(2, 2, 1))
        dynamics.run(batch, 10)
        runs.append(batch.positions.clone())
    assert float((runs[0] - runs[1]).abs().max()) < 1e-8


def test_measured_row_limit_scales_the_probe_peak_to_free_memory(monkeypatch) -> None:
    """The GPU memory probe under mocked CUDA memory statistics: one probe chunk of about
    4096 own atoms is evaluated, and the limit is 0.8 x (free + cached) / its peak per row,
    never below the probe's 4096 rows (negative control: little free memory)."""
    from nvdd_plugins.decomposition import DecompositionFrame
    from nvdd_plugins.distributed_model.rows.chunk_grid import measured_row_limit

    atoms = ase.build.bulk("Cu", "fcc", a=3.61, cubic=True).repeat((16, 16, 16))
    batch = Batch.from_atoms(atoms)
    frame = DecompositionFrame.from_system(batch.positions, batch.cell[0], batch.pbc[0])
    probed = []
    stats = {"allocated": 1_000, "per_row": 2_000, "free": 10**9, "reserved": 1_000 + 10**8}
    for name, value in {
        "synchronize": lambda device: None,
        "reset_peak_memory_stats": lambda device: None,
        "memory_allocated": lambda device: stats["allocated"],
        "max_memory_allocated": lambda device: 1_000 + stats["per_row"] * probed[-1],
        "mem_get_info": lambda device: (stats["free"], 2 * stats["free"]),
        "memory_reserved": lambda device: stats["reserved"],
    }.items():
        monkeypatch.setattr(torch.cuda, name, value)

    def evaluate(chunk: tuple[torch.Tensor, torch.Tensor, int], wrapped: torch.Tensor) -> None:
        probed.append(chunk[0].shape[0])
        assert 1024 <= chunk[2] <= 8192 and wrapped.shape == (3,)

    limit = measured_row_limit(frame, batch.positions, 4.0, evaluate)
    assert len(probed) == 1 and probed[0] < len(atoms)
    assert limit == int(0.8 * (10**9 + 10**8) / 2_000)
    stats["free"], stats["reserved"] = 10**6, 1_000
    assert measured_row_limit(frame, batch.positions, 4.0, evaluate) == 4096


def test_chunks_mostly_of_ghost_shells_are_reported(caplog) -> None:
    """A row limit met only by chunks whose ghost shells are most of the work is reported,
    with a limit that is not (ChunkedEvaluator(max_atoms=300) on 500 atoms of a two-layer
    MPNN had planned 900 chunks, 506 times the rows, without a word)."""
    model, atoms = MODELS["lj"](), ase.build.bulk("Cu", "fcc", a=3.61, cubic=True) * (8, 8, 4)
    with caplog.at_level(logging.WARNING, logger="nvdd_plugins.distributed_model.rows.chunk_grid"):
        plan = ChunkedEvaluator(model, max_atoms=700).plan(Batch.from_atoms(atoms))
    assert plan.work > 2.0, plan  # the system in one piece: 1 row per atom
    assert f"evaluates {sum(plan.rows)} rows for {len(atoms)} atoms" in caplog.text
    suggested = int(re.search(r"chunks of (\d+) rows keep it within 2x", caplog.text).group(1))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="nvdd_plugins.distributed_model.rows.chunk_grid"):
        plan = ChunkedEvaluator(model, max_atoms=suggested).plan(Batch.from_atoms(atoms))
    assert len(plan.rows) > 1 and plan.work <= 2.0 and not caplog.text, plan
