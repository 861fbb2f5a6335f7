"""The cases of the bit-identity check: models x systems x paths x rank counts.

Every path evaluates float64 models on a periodic system (108 atoms of sheared fcc Ar/Cu, or
H/C/O for AIMNet2) and an open cluster (32 atoms), with fixed seeds, and returns every tensor
it produced (energy, energies, forces, stress, per-atom stresses where the model and path
give them, AIMNet2's charges). Ranks are simulated in threads on the CPU and forked gloo
processes on CUDA (threads would share autograd's one CUDA thread); the parent process never
touches CUDA, so the forks may.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from ase import Atoms

from nvdd_plugins import Batch, DomainConfig, DomainParallel, ReplicatedModel, StrategyKind
from nvdd_plugins.comm import Communicator, run_simulated
from nvdd_plugins.dynamics import NVE
from tests.helpers.multiprocess import run_gloo
from tests.helpers.systems import cluster, lj_model, mpnn_model, triclinic_bulk

SKIN = 0.3
TIMEOUT_S = 300.0
CHUNK_ROWS = (60, 200, 600, 2000, 10**9)
"""Rows per chunk of the chunked path, tried in this order: the first the shell allows."""

PER_ATOM = ("forces", "energies", "stresses", "charges")
Outputs = dict[str, Any]


def installed(*modules: str) -> bool:
    """True when every one of `modules` is importable here."""
    return all(importlib.util.find_spec(m) is not None for m in modules)


def _mace(device: str = "cpu", cuequivariance: bool = False) -> Any:
    """Tiny MACE, moved to `device` before the conversion (cuEquivariance picks its fused
    kernels on a GPU)."""
    from nvdd_plugins.models import MACEWrapper
    from tests.helpers.mace_models import tiny_mace

    return MACEWrapper(tiny_mace().to(device), cuequivariance=cuequivariance)


def _aimnet2() -> Any:
    from nvdd_plugins.models import AIMNet2Wrapper
    from tests.helpers.aimnet_models import aimnet_calculator, tiny_aimnet2

    model = tiny_aimnet2()
    return AIMNet2Wrapper(model, aimnet_calculator(model).external_coulomb, charge=0.0)


def _sevennet() -> Any:
    from nvdd_plugins.models import SevenNetWrapper
    from tests.helpers.sevennet_models import tiny_sevennet

    return SevenNetWrapper(tiny_sevennet())


def _e3nn(name: str) -> Callable[[], Any]:
    def build() -> Any:
        from tests.helpers.nequip_models import WRAPPERS

        return WRAPPERS[name]()

    return build


def _on(build: Callable[[], Any]) -> Callable[[str], Any]:
    """`build`, its model moved to a device."""
    return lambda device: build().to(device)


def _two_species(atoms: Atoms) -> Atoms:
    from tests.helpers.mace_models import with_two_species

    return with_two_species(atoms)


def _hco(atoms: Atoms) -> Atoms:
    from tests.helpers.aimnet_models import with_species

    return with_species(atoms)


Combo = tuple[str, str, int]
"""(path, system, ranks)."""
CORE: frozenset[Combo] = frozenset(
    {
        ("single", "bulk", 1),
        ("halo", "bulk", 1),
        ("halo", "bulk", 2),
        ("domain_parallel", "bulk", 2),
        ("graph", "bulk", 2),
        ("chunked", "bulk", 2),
        ("ase", "bulk", 2),
        ("single", "cluster", 1),
        ("halo", "cluster", 2),
        ("chunked", "cluster", 1),
        ("chunked_evaluator", "cluster", 1),
    }
)
"""What the slower models run through: every path once, both systems, 1 and 2 ranks."""
UNCHUNKED = frozenset(c for c in CORE if not c[0].startswith("chunked"))


@dataclass(frozen=True)
class ModelCase:
    """A model of the check: its builder (on a device), what species it wants, the modules
    it needs and the (path, system, ranks) it runs (None: all)."""

    build: Callable[[str], Any]
    species: Callable[[Atoms], Atoms] | None
    needs: tuple[str, ...]
    combos: frozenset[Combo] | None = CORE


MODELS: dict[str, ModelCase] = {
    "lj": ModelCase(_on(lj_model), None, (), combos=None),
    "mpnn": ModelCase(_on(mpnn_model), None, (), combos=None),
    "mace": ModelCase(_mace, _two_species, ("mace",)),
    "mace_cueq": ModelCase(
        lambda device: _mace(device, True),
        _two_species,
        ("mace", "cuequivariance_torch"),
        UNCHUNKED,
    ),
    "aimnet2": ModelCase(_on(_aimnet2), _hco, ("aimnet",)),
    "sevennet": ModelCase(_on(_sevennet), _two_species, ("sevenn",)),
    "nequip": ModelCase(_on(_e3nn("nequip")), _two_species, ("nequip",)),
    "allegro": ModelCase(_on(_e3nn("allegro")), _two_species, ("nequip", "allegro")),
}
SYSTEMS: dict[str, Callable[[], Atoms]] = {"bulk": triclinic_bulk, "cluster": cluster}


def _properties(atoms: Atoms, per_atom_stress: bool = True) -> tuple[str, ...]:
    if atoms.cell.rank < 3:
        return ("energy", "forces", "energies")
    return ("energy", "forces", "energies", "stress") + ("stresses",) * per_atom_stress


def _tensors(result: dict[str, Any]) -> Outputs:
    return {k: v.detach().cpu() for k, v in result.items() if isinstance(v, torch.Tensor)}


def _batch(atoms: Atoms, device: str) -> Batch:
    return Batch.from_atoms(atoms, device=device, dtype=torch.float64)


def _evaluate(
    model: Any, atoms: Atoms, device: str, call: Callable[[Batch, tuple[str, ...]], dict]
) -> Outputs:
    """`call(batch, properties)`; a path that refuses per-atom stresses is asked without
    them, and says so under "_note"."""
    try:
        return _tensors(call(_batch(atoms, device), _properties(atoms)))
    except (ValueError, NotImplementedError, RuntimeError) as err:
        if "stresses" not in _properties(atoms) or "virial" not in str(err).lower():
            raise
        out = _tensors(call(_batch(atoms, device), _properties(atoms, per_atom_stress=False)))
        return out | {"_note": f"per-atom stresses refused: {str(err).splitlines()[0]}"}


def _config(model: Any, comm: Communicator, **options: Any) -> DomainConfig:
    return DomainConfig(cutoff=model.cutoff, skin=SKIN, mesh=comm, **options)


def _n_layers(model: Any) -> int:
    return model.distribution_spec().n_layers


def single(comm: Communicator, model: Any, atoms: Atoms, device: str) -> Outputs:
    """The single-process oracle, `evaluate_model`."""
    from nvdd_plugins.models import evaluate_model

    return _evaluate(model, atoms, device, lambda b, p: evaluate_model(model, b, p))


def halo(comm: Communicator, model: Any, atoms: Atoms, device: str) -> Outputs:
    """ReplicatedModel, halo strategy."""
    distributed = ReplicatedModel(model, _config(model, comm))
    return _evaluate(model, atoms, device, distributed)


def graph(comm: Communicator, model: Any, atoms: Atoms, device: str) -> Outputs:
    """ReplicatedModel, graph partition."""
    config = _config(model, comm, strategy=StrategyKind.GRAPH_PARTITION)
    return _evaluate(model, atoms, device, ReplicatedModel(model, config))


def chunked(comm: Communicator, model: Any, atoms: Atoms, device: str) -> Outputs:
    """ReplicatedModel with `chunk_atoms` and a ghost shell of n_layers cutoffs; the
    smallest chunk of CHUNK_ROWS that the ghost shell allows (stored as "_chunk_atoms")."""
    for rows in CHUNK_ROWS:
        config = _config(model, comm, chunk_atoms=rows, halo_layers=_n_layers(model))
        try:
            out = _evaluate(model, atoms, device, ReplicatedModel(model, config))
        except ValueError as err:  # every rank plans the same chunks, so all raise alike
            if "are not possible" not in str(err):
                raise
            continue
        return out | {"_chunk_atoms": torch.tensor(rows)}
    raise AssertionError("unreachable: the last chunk size holds any system")


def chunked_evaluator(comm: Communicator, model: Any, atoms: Atoms, device: str) -> Outputs:
    """One process, ChunkedEvaluator over a 2 x 1 x 1 grid."""
    from nvdd_plugins import ChunkedEvaluator

    evaluator = ChunkedEvaluator(model, n_layers=_n_layers(model), grid=(2, 1, 1))
    return _evaluate(model, atoms, device, evaluator)


def domain_parallel(comm: Communicator, model: Any, atoms: Atoms, device: str) -> Outputs:
    """DistributedModel: each rank holds its own atoms (DomainParallel.partition); per-atom
    outputs gathered by global id."""
    dd = DomainParallel(NVE(model, 1.0), _config(model, comm))
    atoms = atoms.copy()
    atoms.set_velocities(torch.zeros(len(atoms), 3).numpy())  # NVE's partition wants them
    full = _batch(atoms, device) if comm.rank == 0 else None
    owned = dd.partition(full)

    def call(_: Batch, properties: tuple[str, ...]) -> dict:
        result = dd.model(owned, properties)
        per_atom = {k: v for k, v in result.items() if k in PER_ATOM}
        return result | comm.gather_by_id(owned.global_ids, per_atom)

    return _evaluate(model, atoms, device, call)


def ase_calculator(comm: Communicator, model: Any, atoms: Atoms, device: str) -> Outputs:
    """DomainDecomposedCalculator (ReplicatedModel inside): ASE's results."""
    from nvdd_plugins.ase import DomainDecomposedCalculator

    mine = atoms.copy()
    mine.calc = DomainDecomposedCalculator(model, skin=SKIN, comm=comm, device=device)
    out = {
        "energy": torch.tensor(mine.get_potential_energy(), dtype=torch.float64),
        "forces": torch.tensor(mine.get_forces()),
        "energies": torch.tensor(mine.get_potential_energies()),
    }
    if atoms.cell.rank == 3:
        out["stress"] = torch.tensor(mine.get_stress())
        out["stresses"] = torch.tensor(mine.get_stresses())
    return out


PATHS: dict[str, tuple[Callable[..., Outputs], tuple[int, ...]]] = {
    "single": (single, (1,)),
    "halo": (halo, (1, 2)),
    "domain_parallel": (domain_parallel, (1, 2)),
    "graph": (graph, (1, 2)),
    "chunked": (chunked, (1, 2)),
    "chunked_evaluator": (chunked_evaluator, (1,)),
    "ase": (ase_calculator, (1, 2)),
}


@dataclass(frozen=True)
class Case:
    """One dump file: `run()` gives its outputs."""

    name: str
    run: Callable[[], Outputs]


def _on_ranks(
    path: Callable[..., Outputs], model_case: ModelCase, system: str, ranks: int, device: str
) -> Outputs:
    atoms = SYSTEMS[system]()
    if model_case.species is not None:
        atoms = model_case.species(atoms)
    if device == "cpu":
        model = model_case.build(device)
        return run_simulated(ranks, lambda c: path(c, model, atoms, device), timeout=TIMEOUT_S)[0]

    def per_rank(comm: Communicator) -> Outputs:
        return path(comm, model_case.build(device), atoms, device)

    return run_gloo(ranks, per_rank, timeout=TIMEOUT_S)[0]


def all_cases(device: str) -> tuple[list[Case], list[str]]:
    """Every case runnable here, and a line for each model or path skipped."""
    from bit_identity_lammps import lammps_cases

    cases, skipped = [], []
    for name, model_case in MODELS.items():
        if not installed(*model_case.needs):
            skipped.append(f"{name}: needs {', '.join(model_case.needs)} (not importable here)")
            continue
        for system in SYSTEMS:
            for path_name, (path, rank_counts) in PATHS.items():
                for ranks in rank_counts:
                    combo = (path_name, system, ranks)
                    if model_case.combos is not None and combo not in model_case.combos:
                        continue
                    run = functools.partial(_on_ranks, path, model_case, system, ranks, device)
                    cases.append(Case(f"{name}-{system}-{path_name}-np{ranks}", run))
    lammps, lammps_skipped = lammps_cases(device)
    return cases + lammps, skipped + lammps_skipped
