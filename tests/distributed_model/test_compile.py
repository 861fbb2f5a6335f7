"""compile=True for every shipped wrapper: fixed shapes, one graph, no recompiles after
warm-up across rebuilds (and migrations, on gloo ranks), equal to eager.

The CI tests compile with dynamo's graph capture only (backend "eager"): what nvdd decides
(the graph, its breaks, its guards, the recompiles) without Inductor's code generation, which
takes minutes per model on two cores. Inductor itself is run on LJ in CI and on every
wrapper in the slow tier.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from ase import Atoms
from ase.md.velocitydistribution import thermalize_momenta
from torch._dynamo.utils import counters

from nvdd_plugins import Batch, DomainConfig, DomainParallel
from nvdd_plugins.comm import Communicator, SimulatedMesh
from nvdd_plugins.distributed_model.rows.view import HaloView
from nvdd_plugins.dynamics import NVE
from tests.helpers.compiling import dynamo_only_compile
from tests.helpers.multiprocess import run_gloo
from tests.helpers.oracle import on_the_oracle
from tests.helpers.systems import ShiftPairModel, lj_model, triclinic_bulk


def _mace(cueq: bool) -> tuple[Any, Atoms]:
    from nvdd_plugins.models import MACEWrapper
    from tests.helpers.mace_models import tiny_mace, with_two_species

    return MACEWrapper(tiny_mace(), cuequivariance=cueq), with_two_species(triclinic_bulk())


def _aimnet2() -> tuple[Any, Atoms]:
    from nvdd_plugins.models import AIMNet2Wrapper
    from tests.helpers.aimnet_models import tiny_aimnet2, with_species

    return AIMNet2Wrapper(tiny_aimnet2()), with_species(triclinic_bulk())


def _uma() -> tuple[Any, Atoms]:
    from tests.helpers.uma_models import tiny_uma_wrapper

    return tiny_uma_wrapper(), triclinic_bulk()


def _sevennet() -> tuple[Any, Atoms]:
    from nvdd_plugins.models import SevenNetWrapper
    from tests.helpers.mace_models import with_two_species
    from tests.helpers.sevennet_models import tiny_sevennet

    return SevenNetWrapper(tiny_sevennet()), with_two_species(triclinic_bulk())


def _sevennet0() -> tuple[Any, Atoms]:
    """The pretrained SevenNet-0 from sevenn's wheel, converted to float64, on rattled MgO."""
    from nvdd_plugins.models import SevenNetWrapper
    from tests.helpers.materials import mgo_triclinic

    return SevenNetWrapper.from_pretrained("7net-0", dtype=torch.float64), mgo_triclinic()


def _nequip(name: str) -> tuple[Any, Atoms]:
    from tests.helpers.mace_models import with_two_species
    from tests.helpers.nequip_models import WRAPPERS

    return WRAPPERS[name](), with_two_species(triclinic_bulk())


# name -> (the package it needs, model and atoms, time step in fs: light atoms take a short one)
WRAPPERS: dict[str, tuple[str | None, Callable[[], tuple[Any, Atoms]], float]] = {
    "lj": (None, lambda: (lj_model(), triclinic_bulk()), 4.0),
    "mace": ("mace", lambda: _mace(cueq=False), 4.0),
    "mace_cueq": ("cuequivariance_torch", lambda: _mace(cueq=True), 4.0),
    "aimnet2": ("aimnet", _aimnet2, 0.5),
    "uma": ("fairchem", _uma, 4.0),
    "sevennet": ("sevenn", _sevennet, 4.0),
    "sevennet0": ("sevenn", _sevennet0, 3.0),
    "nequip": ("nequip", lambda: _nequip("nequip"), 4.0),
    "allegro": ("allegro", lambda: _nequip("allegro"), 4.0),
}


def _wrapper(name: str) -> tuple[Any, Atoms, float]:
    package, build, dt = WRAPPERS[name]
    if package is not None and importlib.util.find_spec(package) is None:
        pytest.skip(f"needs {package}")
    model, atoms = build()
    return model, atoms, dt


@dataclasses.dataclass(frozen=True)
class Run:
    """What a trajectory ends with."""

    positions: torch.Tensor
    energy: float
    new_graphs: int  # graphs compiled after the warm-up
    rebuilds: int  # rebuilds after the warm-up
    migrated: int  # atoms that changed rank after the warm-up
    graph_breaks: int


def _trajectory(comm: Communicator, model: Any, atoms: Atoms, options: dict[str, Any]) -> Run:
    """Positions after options["warm_up"] + options["steps"] NVE steps of `atoms` at 600 K
    (skin 0.2 Å: a rebuild every few steps), compiled or not (options["compile"])."""
    if options.get("dynamo_only"):  # in a rank process, where no fixture reaches
        torch.compile = dynamo_only_compile(torch.compile)
    atoms = atoms.copy()
    thermalize_momenta(atoms, temperature_K=600, rng=np.random.default_rng(0))
    config = DomainConfig(cutoff=model.cutoff, skin=0.2, mesh=comm, compile=options["compile"])
    dd = DomainParallel(NVE(model, options["dt"]), config)
    dd.partition(Batch.from_atoms(atoms) if comm.rank == 0 else None)
    dd.run(n_steps=options["warm_up"])
    graphs, domain = counters["stats"]["unique_graphs"], dd.model.domain
    rebuilds, migrated = domain.rebuilds, domain.migrated
    dd.run(n_steps=options["steps"])
    return Run(
        dd.gather(dd.batch).positions.detach(),
        float(dd.dynamics.results["energy"].sum()),
        counters["stats"]["unique_graphs"] - graphs,
        domain.rebuilds - rebuilds,
        domain.migrated - migrated,
        sum(counters["graph_break"].values()),
    )


def _reference(model: Any, atoms: Atoms, dt: float, n_steps: int) -> tuple[torch.Tensor, float]:
    """The single-process eager trajectory's positions and last energy (the oracle)."""
    atoms = atoms.copy()
    thermalize_momenta(atoms, temperature_K=600, rng=np.random.default_rng(0))
    dynamics, batch = on_the_oracle(NVE(model, dt, skin=0.2)), Batch.from_atoms(atoms)
    for _ in range(n_steps):
        dynamics.step(batch)
    return batch.positions.detach(), float(dynamics.results["energy"].sum())


def _one_rank(name: str, warm_up: int, steps: int) -> tuple[Run, tuple[torch.Tensor, float]]:
    torch._dynamo.reset()
    counters.clear()
    model, atoms, dt = _wrapper(name)
    options = {"compile": True, "dt": dt, "warm_up": warm_up, "steps": steps}
    run = _trajectory(SimulatedMesh(1).communicator(0), model, atoms, options)
    return run, _reference(model, atoms, dt, warm_up + steps)


def _check(run: Run, reference: tuple[torch.Tensor, float], name: str, tolerance: float) -> None:
    """Rebuilt while compiled, no graph after the warm-up, and on the oracle's trajectory
    (positions within `tolerance` Å, energy per atom 1e-10 eV: padding rows that counted
    would show there, not in the positions)."""
    positions, energy = reference
    assert run.rebuilds >= 3, f"{name}: the neighbour list must be rebuilt while compiled"
    assert run.new_graphs == 0, f"{name}: {run.new_graphs} graphs compiled after warm-up"
    assert run.graph_breaks == 0, f"{name}: graph breaks"
    assert float((run.positions - positions).abs().max()) < tolerance, name
    assert abs(run.energy - energy) / len(positions) < 1e-10, f"{name}: energy"


# more than a minute on two cores (cuEquivariance's CPU code, fairchem's): slow
SLOW_TO_TRACE = ("mace_cueq", "uma")


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.slow) if n in SLOW_TO_TRACE else n
        for n in WRAPPERS
        if n not in ("lj", "mace")
    ],
)
def test_wrapper_compiles_to_a_recompile_free_graph(name: str, dynamo_only: None) -> None:
    """Each wrapper's compiled forward (dynamo's capture, one graph: fullgraph) over 4 + 16
    steps: no graph after the first steps across the rebuilds, on the eager oracle's
    trajectory (float64)."""
    run, reference = _one_rank(name, warm_up=4, steps=16)
    _check(run, reference, name, 1e-10)


@pytest.mark.parametrize(
    "name", ["lj"] + [pytest.param(n, marks=pytest.mark.slow) for n in WRAPPERS if n != "lj"]
)
def test_inductor_trajectory_matches_eager(name: str) -> None:
    """Inductor's code (scalar C++ on the CPU), float64, 10 + 30 steps: no recompiles, on
    the eager trajectory to rounding. Minutes per wrapper on two cores but LJ's."""
    run, reference = _one_rank(name, warm_up=10, steps=30)
    _check(run, reference, name, 1e-8)


def _per_rank(comm: Communicator, name: str, options: dict[str, Any]) -> Run:
    model, atoms = WRAPPERS[name][1]()
    return _trajectory(comm, model, atoms, options)


@pytest.mark.multiprocess
@pytest.mark.parametrize(
    ("name", "world_size"),
    [("lj", 2), ("lj", 4)]
    + [
        pytest.param(name, size, marks=pytest.mark.slow)
        for name in ("mace_cueq", "aimnet2", "sevennet", "nequip")
        for size in (2, 4)
    ],
)
def test_compiled_on_gloo_ranks(name: str, world_size: int) -> None:
    """Compiled (dynamo's capture) on real gloo ranks: views are rebuilt (and LJ's atoms
    migrate), no rank compiles a graph after the warm-up, and the gathered positions are the
    single-process eager trajectory's (AIMNet2: its charge sums all-reduced inside the
    graph)."""
    model, atoms, dt = _wrapper(name)
    options = {"compile": True, "dt": dt, "warm_up": 6, "steps": 24, "dynamo_only": True}
    runs = run_gloo(world_size, _per_rank, name, options, timeout=600)
    reference = _reference(model, atoms, dt, 30)
    for rank, run in enumerate(runs):
        _check(run, reference, f"{name} rank {rank}", 1e-10)
    if name == "lj":  # (the others' atoms may stay put in these few steps)
        assert sum(run.migrated for run in runs) > 0, "atoms must change rank while compiled"


def test_a_model_weighing_pairs_beyond_its_cutoff_compiles_exactly(
    dynamo_only: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model whose pair term does not vanish beyond its cutoff is compiled on the pairs
    within it: the others become the view's far padding pair, whose rows no atom's energy
    reads. Negative control: handed every Verlet pair, it is wrong."""
    model, atoms = ShiftPairModel(), triclinic_bulk()
    options = {"compile": True, "dt": 4.0, "warm_up": 4, "steps": 16}
    reference = _reference(model, atoms, 4.0, 20)
    run = _trajectory(SimulatedMesh(1).communicator(0), model, atoms, options)
    _check(run, reference, "a pair model without a zero beyond its cutoff", 1e-10)
    monkeypatch.setattr(
        HaloView, "within_cutoff", lambda view, *_: (view.edge_index, _[1], view.edge_unit_shifts)
    )
    torch._dynamo.reset()
    wrong = _trajectory(SimulatedMesh(1).communicator(0), model, atoms, options)
    assert float((wrong.positions - reference[0]).abs().max()) > 1e-6


class _HostRead(ShiftPairModel):
    """Reads a value on the host mid-forward: torch.compile cannot keep one graph."""

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        out = super().forward(batch)
        if float(out["energy"].sum()) > 1e9:
            raise AssertionError("unreachable")
        return out


def test_a_forward_that_breaks_the_graph_is_refused(dynamo_only: None) -> None:
    """Where torch.compile would break the graph, the code after the break would run
    without the interception it was traced under: a clear error instead."""
    options = {"compile": True, "dt": 4.0, "warm_up": 2, "steps": 0}
    with pytest.raises(ValueError, match="_HostRead's breaks it"):
        _trajectory(SimulatedMesh(1).communicator(0), _HostRead(), triclinic_bulk(), options)


def test_the_reference_mpnn_is_refused_with_its_reason(dynamo_only: None) -> None:
    """SimpleMPNN takes the minimum image of its pair vectors, reading the periodic axes on
    the host: refused, as the README's model table says."""
    from tests.helpers.systems import mpnn_model

    options = {"compile": True, "dt": 4.0, "warm_up": 2, "steps": 0}
    with pytest.raises(ValueError, match=r"SimpleMPNN's breaks it \(Tensor.tolist"):
        _trajectory(SimulatedMesh(1).communicator(0), mpnn_model(), triclinic_bulk(), options)
