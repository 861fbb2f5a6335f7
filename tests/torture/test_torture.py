"""The torture suite's CI subset: fixed seeds, one test id per case.

    pytest -m torture tests/torture

Each case is drawn from its seed (tests/torture/cases.py), run through its path on the
simulated mesh or on real gloo ranks under a hard timeout (tests/torture/paths.py) and
compared with the single-process oracle. A failure prints the case line, the error, a
diagnosis and the one-line reproduction command. More cases: benchmarks/torture.py.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import pytest
import torch

from nvdd_plugins.decomposition import (
    DecompositionFrame,
    SpatialPartitioner,
    imbalance,
    in_one_process,
    owned_counts,
)
from tests.torture.cases import CELL_KINDS, FAMILIES, Case, draw_case
from tests.torture.paths import run_case
from tests.torture.zoo import OPS, ModelSpec

pytestmark = pytest.mark.torture

SIMULATED_PATHS = ("replicated", "trajectory", "ase")
_LONGEST = (1048, 1062, 1105)  # 20-odd s each on 2 cores: run by test-all only
CI_SEEDS = (
    *(seed for seed in range(1000, 1110) if seed not in _LONGEST),
    2018,
    2023,
    2035,
    2086,
    114,
)
"""110 consecutive seeds less the three longest, four that complete the coverage of every
aggregation op, and one with a zero cell vector on an open axis under a minimum-image
model."""
GLOO_SEEDS = (3005, 3006, 3008, 3013, 3016)
"""Real gloo processes at 2 and 3 ranks: ReplicatedModel and a 30-step DomainParallel run."""
CHUNKED_SEEDS = tuple(range(4000, 4030))
"""One process, the system evaluated in 1 to 8 chunks one after another (ChunkedEvaluator)."""


GRAPH_SEEDS = (5050, 5022, 5006, 5045, 5017, 5004, 5005, 5047, 5026)
"""Graph partition on the simulated mesh (ReplicatedModel, ASE calculator, trajectory):
RadiusGraphMPNN at 2, 4 and 7 ranks (one with a single atom), MACE at 8, MPNNs with sum,
unique and custom-op aggregations, LJ in a tiny cell and the shift-vector pair model."""


BALANCED_SEEDS = (6190, 6217, 6181, 6163, 6201, 6150, 6169, 6153, 6154, 6071)
"""Inhomogeneous systems whose regular grid is unbalanced (max / mean owned atoms > 1.15),
so the default `balance="auto"` moves the cuts: a cluster at 2 ranks, then 3 to 8 ranks
(primes included): cluster, wire, void, two phases, a slab with a forced 1x1x7 grid, and
the ASE calculator on corner clusters."""
BALANCED_TRAJECTORY_SEEDS = (6139, 6081, 6118, 6055, 6078, 6103)
"""DomainParallel trajectories of such systems at 2 to 8 ranks (re-balancing at rebuilds),
one of them a triclinic open slab at 7 ranks with migration hysteresis."""
BALANCE_PRECONDITION = 1.15


@functools.cache
def _case(seed: int, paths: tuple[str, ...]) -> Case:
    return draw_case(seed, paths)


def _label(seed: int, paths: tuple[str, ...]) -> str:
    case = _case(seed, paths)
    return f"{seed}-{case.path}-{case.family}-{case.cell_kind}-P{case.world_size}"


def _check(case: Case, timeout: float | None = None) -> None:
    outcome = run_case(case) if timeout is None else run_case(case, timeout)
    if outcome.status == "skip":
        pytest.skip(outcome.detail)
    assert outcome.ok, outcome.report()


@pytest.mark.parametrize(
    "seed",
    [
        *CI_SEEDS,
        *(pytest.param(seed, marks=pytest.mark.slow) for seed in _LONGEST),
    ],
    ids=[_label(seed, SIMULATED_PATHS) for seed in (*CI_SEEDS, *_LONGEST)],
)
def test_simulated_case(seed: int) -> None:
    _check(_case(seed, SIMULATED_PATHS))


@pytest.mark.parametrize(
    "seed", CHUNKED_SEEDS, ids=[_label(seed, ("chunked",)) for seed in CHUNKED_SEEDS]
)
def test_chunked_case(seed: int) -> None:
    _check(_case(seed, ("chunked",)))


@pytest.mark.multiprocess
@pytest.mark.parametrize("seed", GLOO_SEEDS, ids=[_label(seed, ("gloo",)) for seed in GLOO_SEEDS])
def test_gloo_case(seed: int) -> None:
    _check(_case(seed, ("gloo",)))


@pytest.mark.parametrize(
    "seed", GRAPH_SEEDS, ids=[_label(seed, ("graph",)) for seed in GRAPH_SEEDS]
)
def test_graph_partition_case(seed: int) -> None:
    _check(_case(seed, ("graph",)))


def test_ci_subset_covers_every_op_family_cell_pbc_and_world_size() -> None:
    cases = [_case(seed, SIMULATED_PATHS) for seed in CI_SEEDS]
    assert {op for case in cases if case.model.kind == "mpnn" for op in case.model.ops} == set(OPS)
    assert {case.family for case in cases} == set(FAMILIES)
    assert {case.cell_kind for case in cases} == set(CELL_KINDS)
    assert {case.path for case in cases} == set(SIMULATED_PATHS)
    assert len({case.pbc for case in cases}) == 8
    assert {case.world_size for case in cases} == set(range(1, 9))
    assert {case.model.kind for case in cases} >= {"mpnn", "simple", "pair", "lj"}
    assert {case.integrator for case in cases} >= {"nve", "langevin"}


def test_cases_are_determined_by_their_seed() -> None:
    for seed in (0, 7, 12345):
        first, second = draw_case(seed), draw_case(seed)
        assert first == second
        assert (first.atoms().positions == second.atoms().positions).all()
        assert draw_case(seed, (first.path,)) == first


SEVENNET_PATHS = ("replicated", "ase", "graph")
SEVENNET_SEEDS = (6000, 6001, 6002, 6003, 6005, 6007, 6010, 6012, 6013, 6014, 6015, 6016)
"""Drawn cases with the zoo's SevenNet in place of the drawn model (sevenn runs in its own
environment: make install-e3nn): replicated and ASE at 2 to 8 ranks (tiny cells, one atom,
every pbc), graph partition with 30-step trajectories."""


@pytest.mark.sevenn
@pytest.mark.parametrize("seed", SEVENNET_SEEDS)
def test_sevennet_case(seed: int) -> None:
    case = replace(_case(seed, SEVENNET_PATHS), model=ModelSpec("sevennet", 4.5, seed=seed))
    _check(replace(case, n_atoms=len(case.atoms())))


PRETRAINED_CASES = {"sevennet0": (6015,), "chgnet": (6003, 6014)}
"""Drawn cases with a pretrained model of a wheel in place of the drawn model (float64):
SevenNet-0 (make install-e3nn) on a periodic ASE case at 7 ranks; CHGNet 0.3.0
(make install-chgnet) on a cluster and an open ASE case (cells narrower than its 12 Å shell
are costly: its own tests). Replicated and ASE paths (CHGNet refuses graph partition)."""


@pytest.mark.parametrize(
    ("kind", "seed"), [(kind, seed) for kind, seeds in PRETRAINED_CASES.items() for seed in seeds]
)
def test_pretrained_case(kind: str, seed: int) -> None:
    cutoff = 5.0 if kind == "sevennet0" else 6.0
    case = replace(_case(seed, ("replicated", "ase")), model=ModelSpec(kind, cutoff, seed=seed))
    # a pretrained model is large: 20 s a case on the loaded 2-core VM (loading included)
    _check(replace(case, n_atoms=len(case.atoms())), timeout=180)


AIMNET2_PATHS = SEVENNET_PATHS
"""Drawn cases with the zoo's AIMNet2 in place of the drawn model (charge equilibration
all-reduced over the ranks, damped shifted force Coulomb up to the case's cutoff): the
SevenNet cases' seeds and paths."""


@pytest.mark.aimnet
@pytest.mark.parametrize("seed", SEVENNET_SEEDS)
def test_aimnet2_case(seed: int) -> None:
    case = replace(_case(seed, AIMNET2_PATHS), model=ModelSpec("aimnet2", 4.5, seed=seed))
    _check(replace(case, n_atoms=len(case.atoms())))


COMPOSED_SEEDS = (6000, 6001, 6003, 6007, 6012, 6016)
"""Drawn cases with the zoo's `SumModel(ShiftPairModel, DFTD3Model)` in place of the drawn
model (the d3 extra): two parts, two cutoffs, one spec union; the SevenNet cases' paths."""


@pytest.mark.parametrize("seed", COMPOSED_SEEDS)
def test_composed_d3_case(seed: int) -> None:
    pytest.importorskip("tad_dftd3")
    case = replace(_case(seed, SEVENNET_PATHS), model=ModelSpec("pair_d3", 4.0, seed=seed))
    _check(replace(case, n_atoms=len(case.atoms())))


NEQUIP_PATHS = (*SEVENNET_PATHS, "chunked")
NEQUIP_SEEDS = (7000, 7001, 7009, 7011, 7015, 7037, 7050)
"""Drawn cases with the zoo's NequIP or Allegro in place of the drawn model (make
install-e3nn): replicated, ASE and graph partition as for SevenNet, and chunks whose ghost
shells are the spec's layers x cutoff (one cutoff for Allegro, whatever its layers)."""


@pytest.mark.nequip
@pytest.mark.parametrize("kind", ["nequip", "allegro"])
@pytest.mark.parametrize("seed", NEQUIP_SEEDS)
def test_nequip_case(seed: int, kind: str) -> None:
    case = replace(_case(seed, NEQUIP_PATHS), model=ModelSpec(kind, 4.5, seed=seed))
    _check(replace(case, n_atoms=len(case.atoms())))


UMA_PATHS = SEVENNET_PATHS
UMA_SEEDS = (8002, 8005, 8009, 8020)
"""Drawn cases with the zoo's UMA (fairchem's eSCN-MD, make install-uma) in place of the
drawn model: replicated, ASE and graph partition as for SevenNet."""


@pytest.mark.uma
@pytest.mark.parametrize("seed", UMA_SEEDS)
def test_uma_case(seed: int) -> None:
    case = replace(_case(seed, UMA_PATHS), model=ModelSpec("uma", 4.5, seed=seed))
    _check(replace(case, n_atoms=len(case.atoms())))


def _regular_imbalance(case: Case) -> float:
    """max / mean owned atoms of the case's system on the regular grid."""
    atoms = case.atoms()
    positions = torch.tensor(atoms.positions)
    cell, pbc = torch.tensor(atoms.cell.array), torch.tensor(atoms.pbc)
    frame = DecompositionFrame.from_system(positions, cell, pbc)
    regular = SpatialPartitioner(frame, case.world_size, case.grid)
    return imbalance(owned_counts(regular, positions, in_one_process))


@pytest.mark.parametrize(
    "seed", BALANCED_SEEDS, ids=[_label(seed, SIMULATED_PATHS) for seed in BALANCED_SEEDS]
)
def test_balanced_case(seed: int) -> None:
    case = _case(seed, SIMULATED_PATHS)
    assert _regular_imbalance(case) > BALANCE_PRECONDITION, "not a case that needs balancing"
    _check(case)


@pytest.mark.parametrize(
    "seed",
    BALANCED_TRAJECTORY_SEEDS,
    ids=[_label(seed, ("trajectory",)) for seed in BALANCED_TRAJECTORY_SEEDS],
)
def test_balanced_trajectory_case(seed: int) -> None:
    case = _case(seed, ("trajectory",))
    assert _regular_imbalance(case) > BALANCE_PRECONDITION, "not a case that needs balancing"
    _check(case)


WEIGHTED_SEEDS = tuple(seed for seed in BALANCED_SEEDS if seed not in (6071, 6154))
"""The balanced cases other than the ASE calculator's (which balances by owned atoms)."""
WEIGHTED_TRAJECTORY_SEEDS = (6139, 6081)


@pytest.mark.parametrize("weight", ["rows", "time"])
@pytest.mark.parametrize(
    "seed", WEIGHTED_SEEDS, ids=[_label(seed, SIMULATED_PATHS) for seed in WEIGHTED_SEEDS]
)
def test_balanced_case_weighed_by_rows_or_time(seed: int, weight: str) -> None:
    case = replace(_case(seed, SIMULATED_PATHS), balance_weight=weight)
    assert case.path != "ase"
    _check(case)


@pytest.mark.parametrize("weight", ["rows", "time"])
@pytest.mark.parametrize(
    "seed",
    WEIGHTED_TRAJECTORY_SEEDS,
    ids=[_label(seed, ("trajectory",)) for seed in WEIGHTED_TRAJECTORY_SEEDS],
)
def test_balanced_trajectory_weighed_by_rows_or_time(seed: int, weight: str) -> None:
    _check(replace(_case(seed, ("trajectory",)), balance_weight=weight))
