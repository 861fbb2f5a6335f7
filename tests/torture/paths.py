"""How a torture case runs through each path and is compared with the single-process oracle.

`run_case(case)` never raises and never hangs: it returns an `Outcome` whose status is
"pass", "mismatch" (a comparison failed), "error" (a rank raised), "hang" (no progress
within the timeout), "oracle" (the single-process reference itself failed) or "skip".
"""

from __future__ import annotations

import importlib.util
import math
import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from ase import Atoms
from ase.stress import voigt_6_to_full_3x3_stress

from nvdd_plugins import Batch, ChunkedEvaluator, DomainConfig, DomainParallel, HookScope
from nvdd_plugins.ase import DomainDecomposedCalculator
from nvdd_plugins.comm import Communicator, run_simulated
from nvdd_plugins.config import StrategyKind
from nvdd_plugins.dynamics import NVE, DynamicsStage, NVTLangevin
from tests.helpers import oracle
from tests.helpers.multiprocess import run_gloo
from tests.helpers.oracle import on_the_oracle, properties_for, reference, replicated
from tests.torture.cases import Case
from tests.torture.zoo import (
    MACE_SPECIES,
    SPECIES,
    aimnet_available,
    fairchem_available,
    mace_available,
    nequip_available,
    sevenn_available,
)

TIMEOUT_S = float(os.environ.get("TORTURE_TIMEOUT", "30"))
"""Hard limit of one simulated case (seconds); gloo cases get twice as long."""
POSITION_TOL = 1e-8
HALO = StrategyKind.HALO


class CaseHang(RuntimeError):
    """The ranks made no progress within the timeout."""


class _OracleFailed(RuntimeError):
    """The single-process reference raised."""


@dataclass
class Outcome:
    """The result of one case: status, wall seconds, details and measured deviations."""

    case: Case
    status: str
    seconds: float = 0.0
    detail: str = ""
    deviations: dict[str, float] = field(default_factory=dict)
    info: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Passed or skipped."""
        return self.status in ("pass", "skip")

    def report(self) -> str:
        """The case line, the error, a diagnosis and the reproduction command."""
        return (
            f"{self.status.upper()}: {self.case.line()}\n{self.detail.strip()}\n"
            f"diagnosis: {diagnose(self)}\nreproduce: {self.case.command()}"
        )


def _simulated(case: Case, fn: Callable[[Communicator], Any], timeout: float) -> list[Any]:
    """run_simulated with each rank's own exception recorded, so that a failure reported as
    a timeout (or as a consequence on another rank) still names the rank that raised first."""
    raised: list[tuple[float, int, BaseException, str]] = []

    def guarded(comm: Communicator) -> Any:
        try:
            return fn(comm)
        except BaseException as err:
            if "another rank failed" not in str(err):
                text = traceback.format_exc(limit=-6)
                raised.append((time.monotonic(), comm.rank, err, text))
            raise

    try:
        return run_simulated(case.world_size, guarded, timeout=timeout)
    except (TimeoutError, RuntimeError) as err:
        real = sorted((r for r in raised if not isinstance(r[2], TimeoutError)), key=lambda r: r[0])
        if real:
            _, rank, _, text = real[0]
            if isinstance(err, TimeoutError):
                text = f"reported as a timeout, but rank {rank} raised first:\n{text}"
                raise CaseHang(text) from err
            raise RuntimeError(f"rank {rank} raised:\n{text}") from err
        if isinstance(err, TimeoutError) or raised:
            waits = "\n".join(r[3] for r in raised)
            raise CaseHang(f"no rank raised anything but timeouts: {err}\n{waits}"[:3000]) from err
        raise


def _worst(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {k: max(a.get(k, 0.0), b.get(k, 0.0)) for k in {*a, *b}}


def _check_ranks(results: list[dict[str, torch.Tensor]], ref: dict, n: int, label: str) -> dict:
    """Every rank within the oracle tolerances and identical to rank 0; the worst deviations."""
    worst: dict[str, float] = {}
    for rank, result in enumerate(results):
        errs = oracle.errors(result, ref, max(n, 1))
        if "stresses" in result and "stress" in ref:  # per-atom virials (the LJ kernel)
            errs["stresses"] = float((result["stresses"] - ref["stresses"]).abs().max())
            assert errs["stresses"] < oracle.STRESS_TOL, (f"{label} rank {rank}", errs)
        worst = _worst(worst, errs)
        oracle.assert_close(errs, f"{label} rank {rank}")
        for name in ("energy", "forces", "energies", "stress"):
            if name in result and not torch.equal(result[name], results[0][name]):
                raise AssertionError(f"{label}: rank {rank} {name} differs from rank 0's")
    return worst


def _replicated(
    case: Case, model: Any, atoms: Atoms, timeout: float, strategy: StrategyKind = HALO
) -> Outcome:
    properties = properties_for(atoms)
    ref = _oracle(reference, model, atoms, properties)

    def run(comm: Communicator) -> dict[str, torch.Tensor]:
        return replicated(
            comm, model, atoms, properties, case.grid, case.skin, strategy,
            balance_weight=case.balance_weight,
        )  # fmt: skip

    results = _simulated(case, run, timeout)
    worst = _check_ranks(results, ref, len(atoms), "ReplicatedModel")
    owned = [int(r["n_owned"]) for r in results]
    assert sum(owned) == len(atoms), f"owned counts {owned} do not sum to {len(atoms)}"
    return Outcome(case, "pass", deviations=worst, info={"empty_ranks": owned.count(0)})


def _ase_states(case: Case, atoms: Atoms) -> list[Atoms]:
    """The system, then: moved below the rebuild threshold (skin / 2), moved enough to force
    a rebuild, new species (the calculator must start over), a 1% strained cell, one
    periodic axis opened (when there is one) and, with more than one atom, one atom fewer."""
    rng = np.random.default_rng([case.seed, 2])
    n = len(atoms)
    states = [atoms.copy() for _ in range(5)]
    states[1].positions += rng.uniform(-1.0, 1.0, (n, 3)) * 0.45 * case.skin / np.sqrt(3.0)
    for state in states[2:]:
        state.positions = states[1].positions + rng.normal(scale=0.25, size=(n, 3))
    species = MACE_SPECIES if case.model.kind == "mace" else SPECIES
    for state in states[3:]:
        state.numbers = rng.choice(species, n)
    states[4].set_cell(states[4].cell.array * rng.uniform(0.99, 1.01, 3)[:, None], scale_atoms=True)
    if atoms.pbc.any():
        states.append(states[4].copy())
        states[-1].pbc[rng.choice(np.flatnonzero(atoms.pbc))] = False
    return states + [states[-1][:-1]] * (n > 1)


def _ase(
    case: Case, model: Any, atoms: Atoms, timeout: float, strategy: StrategyKind = HALO
) -> Outcome:
    properties = properties_for(atoms)
    states = _ase_states(case, atoms)
    refs = [_oracle(reference, model, state, properties) for state in states]

    def per_rank(comm: Communicator) -> list[dict[str, torch.Tensor]]:
        calc = DomainDecomposedCalculator(model, skin=case.skin, comm=comm, strategy=strategy)
        out = []
        for state in states:
            mine = state.copy()
            mine.calc = calc
            result = {
                "energy": torch.tensor([mine.get_potential_energy()], dtype=torch.float64),
                "forces": torch.tensor(mine.get_forces()),
                "energies": torch.tensor(mine.get_potential_energies()),
            }
            if "stress" in properties:
                stress = voigt_6_to_full_3x3_stress(mine.get_stress())
                result["stress"] = torch.tensor(stress).unsqueeze(0)
            out.append(result)
        return out

    results = _simulated(case, per_rank, timeout)
    worst: dict[str, float] = {}
    for k, ref in enumerate(refs):
        label = f"ASE calculator, evaluation {k}"
        worst = _worst(worst, _check_ranks([r[k] for r in results], ref, len(states[k]), label))
    return Outcome(case, "pass", deviations=worst)


class _Recorder:
    """LOCAL AFTER_STEP hook: this rank's global ids, positions and mass after every step."""

    stage = DynamicsStage.AFTER_STEP
    scope = HookScope.LOCAL
    frequency = 1

    def __init__(self) -> None:
        self.frames: list[tuple[torch.Tensor, torch.Tensor, float]] = []

    def __call__(self, ctx: Any, stage: DynamicsStage) -> None:
        batch = ctx.batch
        ids, positions = batch.global_ids.clone(), batch.positions.detach().clone()
        self.frames.append((ids, positions, float(batch.atomic_masses.sum())))


def _integrator(case: Case, model: Any) -> NVE | NVTLangevin:
    if case.integrator == "nve":
        return NVE(model, case.dt, skin=case.skin)
    return NVTLangevin(model, case.dt, case.temperature, 0.02, seed=case.seed, skin=case.skin)


def _reference_trajectory(case: Case, model: Any, atoms: Atoms, steps: int) -> torch.Tensor:
    dynamics, batch = on_the_oracle(_integrator(case, model)), Batch.from_atoms(atoms)
    frames = []
    for _ in range(steps):
        dynamics.step(batch)
        frames.append(batch.positions.detach().clone())
    return torch.stack(frames)


def _trajectory_rank(
    comm: Communicator,
    case: Case,
    model: Any,
    atoms: Atoms,
    steps: int,
    strategy: StrategyKind = HALO,
) -> dict:
    recorder = _Recorder()
    config = DomainConfig(
        model.cutoff,
        case.skin,
        comm,
        grid=case.grid,
        migration_hysteresis=case.hysteresis,
        strategy=strategy,
        balance_weight=case.balance_weight,
    )
    with DomainParallel(_integrator(case, model), config, steps, hooks=[recorder]) as dd:
        dd.partition(Batch.from_atoms(atoms) if comm.rank == 0 else None)
        dd.run()
        final, domain = dd.gather(dd.batch), dd.model.domain
        ids, masses = final.global_ids.clone(), final.atomic_masses.clone()
        return dict(frames=recorder.frames, final_ids=ids, final_masses=masses,
                    rebuilds=domain.rebuilds, migrated=domain.migrated)  # fmt: skip


def _check_trajectory(reports: list[dict], ref: torch.Tensor, atoms: Atoms) -> dict[str, float]:
    """Per step: every atom owned exactly once, mass conserved, positions on the reference."""
    n, masses = len(atoms), torch.tensor(atoms.get_masses())
    for rank, report in enumerate(reports):
        assert len(report["frames"]) == ref.shape[0], f"rank {rank}: {len(report['frames'])} steps"
        assert torch.equal(report["final_ids"], torch.arange(n)), f"rank {rank}: gather lost ids"
        assert torch.equal(report["final_masses"], masses), f"rank {rank}: gathered masses differ"
    worst = 0.0
    for s in range(ref.shape[0]):
        frames = [report["frames"][s] for report in reports]
        ids = torch.cat([f[0] for f in frames])
        counts = torch.bincount(ids, minlength=n)
        if not bool((counts == 1).all()):
            lost, twice = torch.nonzero(counts == 0).flatten(), torch.nonzero(counts > 1).flatten()
            message = f"step {s + 1}: atoms lost {lost.tolist()}, owned twice {twice.tolist()}"
            raise AssertionError(message)
        mass = sum(f[2] for f in frames)
        assert abs(mass - float(masses.sum())) < 1e-9, f"step {s + 1}: total mass {mass}"
        error = float((torch.cat([f[1] for f in frames]) - ref[s][ids]).abs().max())
        if error > POSITION_TOL:
            raise AssertionError(f"step {s + 1}: positions off the reference by {error:.3e} Å")
        worst = max(worst, error)
    return {"positions": worst}


def _trajectory(
    case: Case, model: Any, atoms: Atoms, timeout: float, strategy: StrategyKind = HALO
) -> Outcome:
    ref = _oracle(_reference_trajectory, case, model, atoms, case.steps)
    run = lambda comm: _trajectory_rank(comm, case, model, atoms, case.steps, strategy)  # noqa: E731
    reports = _simulated(case, run, timeout)
    worst = _check_trajectory(reports, ref, atoms)
    info = {key: sum(r[key] for r in reports) for key in ("rebuilds", "migrated")}
    return Outcome(case, "pass", deviations=worst, info=info)


def _gloo(case: Case, model: Any, atoms: Atoms, timeout: float) -> Outcome:
    properties = properties_for(atoms)
    ref = _oracle(reference, model, atoms, properties)
    trajectory = _oracle(_reference_trajectory, case, model, atoms, case.steps)

    def per_rank(comm: Communicator) -> tuple[dict, dict]:
        result = replicated(comm, model, atoms, properties, grid=case.grid, skin=case.skin)
        return result, _trajectory_rank(comm, case, model, atoms, case.steps)

    try:
        reports = run_gloo(case.world_size, per_rank, timeout=2 * timeout)
    except TimeoutError as err:
        raise CaseHang(str(err)) from err
    worst = _check_ranks([r[0] for r in reports], ref, len(atoms), "gloo ReplicatedModel")
    worst |= _check_trajectory([r[1] for r in reports], trajectory, atoms)
    return Outcome(case, "pass", deviations=worst)


def _graph(case: Case, model: Any, atoms: Atoms, timeout: float) -> Outcome:
    """Graph partition: ReplicatedModel, the ASE calculator's states and (MACE aside,
    which is slow) a DomainParallel trajectory, each against the single-process run."""
    runs = [_replicated, _ase] + [_trajectory] * (case.model.kind != "mace")
    outcomes = [run(case, model, atoms, timeout, StrategyKind.GRAPH_PARTITION) for run in runs]
    worst: dict[str, float] = {}
    for outcome in outcomes:
        worst = _worst(worst, outcome.deviations)
    return Outcome(case, "pass", deviations=worst, info=outcomes[0].info)


def _oracle(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` (a single-process reference); its failure is reported as such."""
    try:
        return fn(*args)
    except Exception as err:
        raise _OracleFailed(f"single-process {fn.__name__}: {err!r}") from err


_STATUS = ((AssertionError, "mismatch"), (CaseHang, "hang"), (_OracleFailed, "oracle"))


def _chunked(case: Case, model: Any, atoms: Atoms, timeout: float) -> Outcome:
    """One process, the system cut into `world_size` chunks (or the case's grid) evaluated
    one after another with a ghost shell of n_layers cutoffs."""
    properties = properties_for(atoms)
    ref = _oracle(reference, model, atoms, properties)
    grid = case.grid or (case.world_size, 1, 1)
    evaluator = ChunkedEvaluator(model, n_layers=case.model.n_layers, grid=grid)
    result = oracle.requested(evaluator(Batch.from_atoms(atoms), properties), properties)
    worst = _check_ranks([result], ref, len(atoms), f"chunked {grid}")
    worst = _worst(worst, _chunked_ranks(case, model, atoms, timeout, ref, properties))
    return Outcome(case, "pass", deviations=worst)


def _chunked_ranks(
    case: Case, model: Any, atoms: Atoms, timeout: float, ref: dict, properties: tuple
) -> dict[str, float]:
    """`DomainConfig(chunk_atoms=...)` at the case's ranks: first one chunk a rank, then
    chunks of 60% of the largest of those (unless the ghost shell alone is bigger)."""

    def run(chunk_atoms: int) -> list[dict]:
        return _simulated(
            case,
            lambda comm: replicated(
                comm,
                model,
                atoms,
                properties,
                case.grid,
                case.skin,
                chunk_atoms=chunk_atoms,
                halo_layers=case.model.n_layers,
            ),
            timeout,
        )

    whole = run(10**9)
    worst = _check_ranks(whole, ref, len(atoms), "one chunk a rank")
    largest = max((int(r["chunk_rows"].max()) for r in whole if "chunk_rows" in r), default=0)
    try:
        split = run(max(1, math.ceil(0.6 * largest)))
    except RuntimeError as err:
        if "are not possible" not in str(err):
            raise
        return worst
    return _worst(worst, _check_ranks(split, ref, len(atoms), "chunks of 60%"))


RUNNERS = {
    "replicated": _replicated,
    "trajectory": _trajectory,
    "ase": _ase,
    "gloo": _gloo,
    "chunked": _chunked,
    "graph": _graph,
}


def run_case(case: Case, timeout: float = TIMEOUT_S) -> Outcome:
    """Run `case` through its path; never raises."""
    start = time.perf_counter()
    if case.model.kind == "mace" and not mace_available():
        outcome = Outcome(case, "skip", detail="mace-torch is not importable")
    elif case.model.kind in ("sevennet", "sevennet0") and not sevenn_available():
        outcome = Outcome(case, "skip", detail="sevenn is not importable")
    elif case.model.kind in ("nequip", "allegro") and not nequip_available():
        outcome = Outcome(case, "skip", detail="nequip or nequip-allegro is not installed")
    elif case.model.kind == "chgnet" and importlib.util.find_spec("chgnet") is None:
        outcome = Outcome(case, "skip", detail="chgnet is not installed")
    elif case.model.kind == "uma" and not fairchem_available():
        outcome = Outcome(case, "skip", detail="fairchem-core is not installed")
    elif case.model.kind == "aimnet2" and not aimnet_available():
        outcome = Outcome(case, "skip", detail="aimnet is not installed")
    else:
        limit = timeout + 0.05 * case.steps * case.world_size
        try:
            outcome = RUNNERS[case.path](case, case.model.build(), case.atoms(), limit)
        except Exception as err:
            status = next((s for kind, s in _STATUS if isinstance(err, kind)), "error")
            text = str(err) if status != "error" else f"{type(err).__name__}: {err}"
            outcome = Outcome(case, status, detail=text[:3000])
    outcome.seconds = time.perf_counter() - start
    return outcome


_SIGNATURES = (
    ("modified by an inplace operation", "known defect 2: scatter_reduce/index_reduce autograd"),
    ("raised first", "known defect 3: a rank's exception reported as a timeout"),
    ("the cell is singular", "new: DecompositionFrame with a skewed cell and a zero vector"),
    ("got [0.0", "new: SimpleMPNN rejects a cell with a zero vector on an open axis"),
)


def diagnose(outcome: Outcome) -> str:
    """Which known (or newly found) defect an outcome most likely shows, else "NEW?"."""
    if outcome.ok:
        return "-"
    case = outcome.case
    for signature, name in _SIGNATURES:
        if signature in outcome.detail:
            return name
    if outcome.status == "hang":
        return "known defect 1: deadlock (a rank sends ghosts but receives none)?"
    if outcome.status == "mismatch" and case.hysteresis > 0:
        return "new: migration_hysteresis keeps an atom across a periodic face at the far image?"
    unique = any(op.rstrip("_") in ("index_copy", "index_put", "scatter") for op in case.model.ops)
    if outcome.status == "mismatch" and unique and case.world_size > 1 and len(case.model.ops) > 1:
        return "known defect 2: index_copy/index_put/scatter targets not halo-refreshed?"
    return "NEW?"
