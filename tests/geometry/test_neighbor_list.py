from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from ase.neighborlist import primitive_neighbor_list

from nvdd_plugins.geometry import NeighborList, build_neighbor_list, rows_times_3x3


def brute_force(positions: np.ndarray, cell: np.ndarray, pbc, cutoff: float) -> dict:
    """All (i, j, shift) -> distance with |x_j - x_i + shift @ cell| < cutoff, by enumeration."""
    n = len(positions)
    if n == 0:
        return {}
    periodic = np.asarray(pbc, dtype=bool)
    ranges = []
    if periodic.any():
        inverse = np.linalg.inv(cell)
        widths = 1.0 / np.linalg.norm(inverse, axis=0)
        frac = positions @ inverse
        spread = frac.max(axis=0) - frac.min(axis=0)
        for k in range(3):
            m = int(np.ceil(cutoff / widths[k] + spread[k])) + 1 if periodic[k] else 0
            ranges.append(range(-m, m + 1))
    else:
        ranges = [range(1)] * 3
    shifts = np.array(list(itertools.product(*ranges)), dtype=np.int64)
    offsets = shifts @ cell if periodic.any() else np.zeros((len(shifts), 3))
    vectors = positions[None, :, None, :] - positions[:, None, None, :] + offsets[None, None]
    distances = np.linalg.norm(vectors, axis=-1)
    i, j, s = np.nonzero(distances < cutoff)
    result = {}
    for a, b, c in zip(i.tolist(), j.tolist(), s.tolist(), strict=True):
        shift = tuple(shifts[c].tolist())
        if a == b and shift == (0, 0, 0):
            continue
        result[(a, b, shift)] = distances[a, b, c]
    return result


def as_dict(nl: NeighborList, positions: torch.Tensor) -> dict:
    distances = torch.linalg.vector_norm(nl.edge_vectors(positions), dim=1).tolist()
    keys = zip(
        nl.edge_index[0].tolist(),
        nl.edge_index[1].tolist(),
        map(tuple, nl.unit_shifts.tolist()),
        strict=True,
    )
    return dict(zip(keys, distances, strict=True))


def ase_set(positions, cell, pbc, cutoff) -> set:
    i, j, s = primitive_neighbor_list("ijS", pbc, cell, positions, cutoff, self_interaction=False)
    return set(zip(i.tolist(), j.tolist(), map(tuple, s.tolist()), strict=True))


def check_structure(nl: NeighborList, positions: torch.Tensor, cell, cutoff: float) -> None:
    n_edges = nl.num_edges
    assert nl.edge_index.shape == (2, n_edges) and nl.edge_index.dtype == torch.int64
    assert nl.unit_shifts.shape == (n_edges, 3) and nl.unit_shifts.dtype == torch.int64
    assert nl.shifts.shape == (n_edges, 3) and nl.shifts.dtype == positions.dtype
    if cell is not None:
        cell = torch.as_tensor(cell, dtype=positions.dtype)
        torch.testing.assert_close(nl.shifts, rows_times_3x3(nl.unit_shifts, cell), rtol=0, atol=0)
    rows = torch.cat((nl.edge_index.T, nl.unit_shifts), dim=1).tolist()
    assert bool((nl.edge_index[0].diff() >= 0).all()), "edges must be grouped by i, ascending"
    assert len({tuple(r) for r in rows}) == len(rows), "edges must be unique"
    lengths = torch.linalg.vector_norm(nl.edge_vectors(positions), dim=1)
    assert bool((lengths < cutoff).all())
    keys = {tuple(r) for r in rows}
    assert all((j, i, -a, -b, -c) in keys for i, j, a, b, c in keys), "list must be full"


def random_case(seed: int, kind: str):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 40))
    pbc = {
        "periodic": (True, True, True),
        "skewed": (True, True, True),
        "slab": (True, True, False),
        "wire": (False, False, True),
        "mixed": tuple(bool(b) for b in rng.random(3) < 0.5),
        "open": (False, False, False),
    }[kind]
    if kind == "skewed":
        lengths = rng.uniform(4.0, 9.0, 3)
        cell = np.diag(lengths)
        cell[1, 0] = rng.uniform(2.0, 4.0) * lengths[0] * rng.choice([-1, 1])
        cell[2, :2] = rng.uniform(-3.0, 3.0, 2) * lengths[:2]
    else:
        cell = np.diag(rng.uniform(3.0, 10.0, 3)) + rng.normal(0.0, 1.5, (3, 3))
        while (1.0 / np.linalg.norm(np.linalg.inv(cell), axis=0)).min() < 1.5:
            cell = np.diag(rng.uniform(3.0, 10.0, 3)) + rng.normal(0.0, 1.5, (3, 3))
    frac = rng.uniform(-0.3, 1.3, (n, 3))
    positions = frac @ cell
    if kind == "open":
        cell = np.zeros((3, 3))
        positions = rng.uniform(-2.0, 2.0, (n, 3)) * rng.uniform(1.0, 4.0)
    cutoff = float(rng.uniform(0.8, 12.0 if kind != "open" else 6.0))
    return positions, cell, pbc, cutoff


CASES = [
    (seed, kind)
    for kind, seeds in [
        ("periodic", range(6)),
        ("skewed", range(6)),
        ("slab", range(4)),
        ("wire", range(3)),
        ("mixed", range(4)),
        ("open", range(3)),
    ]
    for seed in seeds
]


@pytest.mark.parametrize(("seed", "kind"), CASES)
def test_matches_brute_force_and_ase(seed: int, kind: str) -> None:
    positions, cell, pbc, cutoff = random_case(seed, kind)
    pos_t = torch.tensor(positions, dtype=torch.float64)
    nl = build_neighbor_list(pos_t, torch.tensor(cell), pbc, cutoff)
    check_structure(nl, pos_t, cell, cutoff)

    got = as_dict(nl, pos_t)
    expected = brute_force(positions, cell, pbc, cutoff)
    assert set(got) == set(expected)
    np.testing.assert_allclose(
        [got[k] for k in sorted(got)], [expected[k] for k in sorted(got)], rtol=1e-12, atol=1e-12
    )
    assert set(got) == ase_set(positions, cell, pbc, cutoff)


@pytest.mark.parametrize(
    ("cell", "pbc", "cutoff"),
    [
        (np.diag([2.0, 2.5, 3.0]), (True, True, True), 7.5),
        ([[1.5, 0.0, 0.0], [4.0, 1.2, 0.0], [-3.0, 2.0, 1.4]], (True, True, True), 4.0),
        (np.diag([2.0, 2.0, 20.0]), (True, True, False), 5.0),
        (np.diag([10.0, 10.0, 1.3]), (False, False, True), 4.0),
    ],
)
def test_cutoff_larger_than_box(cell, pbc, cutoff: float) -> None:
    cell = np.asarray(cell, dtype=float)
    rng = np.random.default_rng(7)
    positions = rng.uniform(0.0, 1.0, (5, 3)) @ cell
    pos_t = torch.tensor(positions)
    nl = build_neighbor_list(pos_t, torch.tensor(cell), pbc, cutoff)
    check_structure(nl, pos_t, cell, cutoff)
    got = as_dict(nl, pos_t)
    assert set(got) == set(brute_force(positions, cell, pbc, cutoff))
    assert set(got) == ase_set(positions, cell, pbc, cutoff)
    assert nl.num_edges > 5 * 4, "several images of each pair expected"


def test_single_atom_self_images() -> None:
    cell = torch.tensor([[2.0, 0.0, 0.0], [1.0, 2.0, 0.0], [0.0, 0.0, 3.0]], dtype=torch.float64)
    positions = torch.tensor([[0.3, 0.2, 0.1]], dtype=torch.float64)
    nl = build_neighbor_list(positions, cell, (True, True, True), 3.5)
    assert bool((nl.edge_index == 0).all())
    assert not bool((nl.unit_shifts == 0).all(dim=1).any())
    expected = brute_force(positions.numpy(), cell.numpy(), (True,) * 3, 3.5)
    assert set(as_dict(nl, positions)) == set(expected)
    assert nl.num_edges == len(expected) > 0

    open_nl = build_neighbor_list(positions, None, False, 3.5)
    assert open_nl.num_edges == 0


@pytest.mark.parametrize("pbc", [(True, True, True), (False, False, False)])
def test_zero_atoms(pbc) -> None:
    positions = torch.zeros((0, 3), dtype=torch.float32)
    nl = build_neighbor_list(positions, torch.eye(3) * 5.0, pbc, 2.0)
    assert nl.edge_index.shape == (2, 0) and nl.edge_index.dtype == torch.int64
    assert nl.unit_shifts.shape == (0, 3) and nl.shifts.dtype == torch.float32


def test_open_system_cell_none_equals_zero_cell() -> None:
    rng = np.random.default_rng(3)
    positions = torch.tensor(rng.uniform(0.0, 6.0, (30, 3)))
    a = build_neighbor_list(positions, None, (False, False, False), 2.5)
    b = build_neighbor_list(positions, torch.zeros(3, 3, dtype=torch.float64), False, 2.5)
    c = build_neighbor_list(positions, torch.eye(3, dtype=torch.float64) * 2.0, False, 2.5)
    for other in (b, c):
        assert torch.equal(a.edge_index, other.edge_index)
        assert torch.equal(a.unit_shifts, other.unit_shifts)
    assert bool((a.shifts == 0).all()) and bool((a.unit_shifts == 0).all())


def test_sparse_open_system_far_apart_clusters() -> None:
    rng = np.random.default_rng(11)
    corners = np.array(list(itertools.product([0.0, 1.0e4], repeat=3)))
    positions = np.concatenate([c + rng.uniform(0.0, 4.0, (6, 3)) for c in corners])
    nl = build_neighbor_list(torch.tensor(positions), None, False, 3.0)
    check_structure(nl, torch.tensor(positions), None, 3.0)
    assert set(as_dict(nl, torch.tensor(positions))) == set(
        brute_force(positions, np.zeros((3, 3)), (False,) * 3, 3.0)
    )


def test_slab_with_zero_vacuum_vector() -> None:
    rng = np.random.default_rng(5)
    cell = np.array([[4.0, 0.0, 0.0], [1.5, 3.5, 0.0], [0.0, 0.0, 0.0]])
    positions = rng.uniform(0.0, 1.0, (12, 3)) * [4.0, 3.5, 6.0]
    nl = build_neighbor_list(torch.tensor(positions), torch.tensor(cell), (True, True, False), 4.2)
    got = set(as_dict(nl, torch.tensor(positions)))
    completed = cell.copy()
    completed[2, 2] = 1.0
    assert got == set(brute_force(positions, completed, (True, True, False), 4.2))
    assert got == ase_set(positions, cell, (True, True, False), 4.2)


def test_chunking_does_not_change_the_result() -> None:
    positions, cell, pbc, cutoff = random_case(1, "skewed")
    pos_t, cell_t = torch.tensor(positions), torch.tensor(cell)
    reference = build_neighbor_list(pos_t, cell_t, pbc, cutoff)
    for chunk in (1, 7, 100):
        chunked = build_neighbor_list(pos_t, cell_t, pbc, cutoff, max_candidates=chunk)
        assert torch.equal(reference.edge_index, chunked.edge_index)
        assert torch.equal(reference.unit_shifts, chunked.unit_shifts)
        assert torch.equal(reference.shifts, chunked.shifts)


def test_translation_by_lattice_vectors_maps_shifts() -> None:
    positions, cell, pbc, cutoff = random_case(2, "periodic")
    pos_t, cell_t = torch.tensor(positions), torch.tensor(cell)
    moved = torch.tensor([[17, -23, 5]] * len(positions))
    moved[::2] = 0
    a = build_neighbor_list(pos_t, cell_t, pbc, cutoff)
    b = build_neighbor_list(pos_t + moved.double() @ cell_t, cell_t, pbc, cutoff)
    assert torch.equal(a.edge_index, b.edge_index)
    i, j = a.edge_index
    assert torch.equal(b.unit_shifts, a.unit_shifts - moved[j] + moved[i])


@pytest.mark.parametrize(
    ("seed", "kind"), [(0, "periodic"), (1, "skewed"), (2, "slab"), (0, "open")]
)
def test_float32(seed: int, kind: str) -> None:
    positions, cell, pbc, cutoff = random_case(seed, kind)
    pos32 = torch.tensor(positions, dtype=torch.float32)
    nl = build_neighbor_list(pos32, torch.tensor(cell, dtype=torch.float32), pbc, cutoff)
    assert nl.shifts.dtype == torch.float32
    check_structure(nl, pos32, cell, cutoff)
    got = as_dict(nl, pos32)
    expected = brute_force(positions, cell, pbc, cutoff)
    for key in set(got) ^ set(expected):
        assert abs(expected.get(key, got.get(key)) - cutoff) < 1e-4, key
    common = sorted(set(got) & set(expected))
    np.testing.assert_allclose([got[k] for k in common], [expected[k] for k in common], atol=1e-4)


def test_fcc_neighbour_counts() -> None:
    a = 3.61
    basis = np.array([[0, 0, 0], [0, 0.5, 0.5], [0.5, 0, 0.5], [0.5, 0.5, 0]])
    grid = np.array(list(itertools.product(range(3), repeat=3)))
    positions = torch.tensor(((grid[:, None, :] + basis[None]) * a).reshape(-1, 3))
    cell = torch.eye(3, dtype=torch.float64) * 3 * a
    nl = build_neighbor_list(positions, cell, True, 0.8 * a)
    assert nl.num_edges == 12 * len(positions)
    counts = torch.bincount(nl.edge_index[0], minlength=len(positions))
    assert bool((counts == 12).all())


def test_errors() -> None:
    positions = torch.zeros((4, 3))
    with pytest.raises(ValueError, match="shape"):
        build_neighbor_list(torch.zeros(4, 2), torch.eye(3), True, 1.0)
    with pytest.raises(ValueError, match="cutoff"):
        build_neighbor_list(positions, torch.eye(3), True, 0.0)
    with pytest.raises(ValueError, match="cell is required"):
        build_neighbor_list(positions, None, (True, False, False), 1.0)
    with pytest.raises(ValueError, match="zero lattice vector"):
        build_neighbor_list(positions, torch.diag(torch.tensor([1.0, 1.0, 0.0])), True, 1.0)
    singular = torch.tensor([[1.0, 0.0, 0.0], [2.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    with pytest.raises(ValueError, match="singular"):
        build_neighbor_list(positions, singular, True, 1.0)
    with pytest.raises(ValueError, match="finite"):
        build_neighbor_list(torch.full((2, 3), float("nan")), None, False, 1.0)
    with pytest.raises(ValueError, match="pbc"):
        build_neighbor_list(positions, torch.eye(3), (True, True), 1.0)


def test_tensor_pbc_and_differentiable_edge_vectors() -> None:
    positions, cell, _, cutoff = random_case(4, "slab")
    pos_t = torch.tensor(positions, requires_grad=True)
    pbc = torch.tensor([True, True, False])
    nl = build_neighbor_list(pos_t, torch.tensor(cell), pbc, cutoff)
    assert not nl.shifts.requires_grad
    expected = build_neighbor_list(pos_t.detach(), torch.tensor(cell), (True, True, False), cutoff)
    assert torch.equal(nl.edge_index, expected.edge_index)
    lengths = torch.linalg.vector_norm(nl.edge_vectors(pos_t), dim=1)
    (grad,) = torch.autograd.grad(lengths.sum(), pos_t)
    assert grad.shape == pos_t.shape and bool(torch.isfinite(grad).all())
