from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from ase.geometry import wrap_positions as ase_wrap_positions

from nvdd_plugins.geometry import (
    complete_cell,
    minimum_image,
    perpendicular_widths,
    rows_times_3x3,
    to_cartesian,
    to_fractional,
    volume,
    wrap_positions,
)

SKEWED = torch.tensor([[5.0, 0.0, 0.0], [12.0, 4.0, 0.0], [-6.0, 3.0, 6.0]], dtype=torch.float64)


def random_cell(rng: np.random.Generator) -> torch.Tensor:
    cell = np.diag(rng.uniform(3.0, 8.0, 3)) + rng.normal(0.0, 1.0, (3, 3))
    return torch.tensor(cell)


def test_volume_and_widths() -> None:
    rng = np.random.default_rng(0)
    for cell in [random_cell(rng) for _ in range(5)] + [SKEWED]:
        np.testing.assert_allclose(float(volume(cell)), abs(np.linalg.det(cell.numpy())))
        widths = perpendicular_widths(cell)
        expected = 1.0 / np.linalg.norm(np.linalg.inv(cell.numpy()), axis=0)
        np.testing.assert_allclose(widths.numpy(), expected, rtol=1e-12)
    widths = perpendicular_widths(torch.diag(torch.tensor([2.0, 3.0, 4.0])))
    assert widths.dtype == torch.float32
    torch.testing.assert_close(widths, torch.tensor([2.0, 3.0, 4.0]))
    assert bool((perpendicular_widths(torch.zeros(3, 3)) == 0).all())


def test_fractional_round_trip() -> None:
    rng = np.random.default_rng(1)
    cell = random_cell(rng)
    positions = torch.tensor(rng.normal(0.0, 10.0, (20, 3)))
    frac = to_fractional(positions, cell)
    torch.testing.assert_close(frac, positions @ torch.linalg.inv(cell))
    torch.testing.assert_close(to_cartesian(frac, cell), positions)
    torch.testing.assert_close(to_fractional(cell, cell), torch.eye(3, dtype=torch.float64))
    single = to_fractional(positions[0], cell)
    assert single.shape == (3,)


@pytest.mark.parametrize(
    "pbc", [(True, True, True), (True, True, False), (False, True, False), (False,) * 3]
)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_wrap_positions(pbc, dtype) -> None:
    rng = np.random.default_rng(2)
    cell = SKEWED.to(dtype)
    positions = (torch.tensor(rng.uniform(-3.0, 4.0, (50, 3))) @ SKEWED).to(dtype)
    wrapped, image = wrap_positions(positions, cell, pbc)
    assert wrapped.dtype == dtype and image.dtype == torch.int64 and image.shape == (50, 3)
    tol = 1e-10 if dtype == torch.float64 else 1e-4
    torch.testing.assert_close(wrapped + image.to(dtype) @ cell, positions, atol=tol, rtol=0)
    frac = to_fractional(wrapped, cell)
    mask = torch.tensor(pbc)
    assert bool((frac[:, mask] > -tol).all() and (frac[:, mask] < 1 + tol).all())
    assert bool((image[:, ~mask] == 0).all())
    torch.testing.assert_close(
        frac[:, ~mask], to_fractional(positions, cell)[:, ~mask], atol=tol, rtol=0
    )
    if dtype == torch.float64:
        expected = ase_wrap_positions(
            positions.numpy(), cell.numpy(), pbc, center=(0.5,) * 3, eps=0
        )
        np.testing.assert_allclose(wrapped.numpy(), expected, atol=1e-10)


def test_wrap_slab_with_zero_vacuum_vector() -> None:
    cell = torch.tensor([[4.0, 0.0, 0.0], [1.0, 3.0, 0.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    positions = torch.tensor([[9.0, 7.0, 25.0], [-1.0, -0.5, -3.0]], dtype=torch.float64)
    wrapped, image = wrap_positions(positions, cell, (True, True, False))
    torch.testing.assert_close(wrapped + image.double() @ cell, positions)
    assert torch.equal(wrapped[:, 2], positions[:, 2])
    assert bool((image[:, 2] == 0).all())
    frac = to_fractional(wrapped, complete_cell(cell, (True, True, False)))[:, :2]
    assert bool(((frac >= 0) & (frac < 1)).all())


def test_wrap_open_system_accepts_no_cell() -> None:
    positions = torch.randn(5, 3)
    wrapped, image = wrap_positions(positions, None, False)
    assert torch.equal(wrapped, positions) and bool((image == 0).all())


def brute_minimum_image(vector: np.ndarray, cell: np.ndarray, pbc) -> np.ndarray:
    ranges = [range(-4, 5) if p else range(1) for p in pbc]
    shifts = np.array(list(itertools.product(*ranges))) @ cell
    candidates = vector[None] + shifts
    return candidates[np.argmin(np.linalg.norm(candidates, axis=1))]


@pytest.mark.parametrize("pbc", [(True, True, True), (True, False, True)])
def test_minimum_image_against_brute_force(pbc) -> None:
    rng = np.random.default_rng(3)
    checked = 0
    for cell in [random_cell(rng) for _ in range(4)] + [SKEWED]:
        widths = perpendicular_widths(cell).numpy()
        half = 0.5 * widths[list(pbc)].min()
        vectors = torch.tensor(rng.uniform(-1.5, 1.5, (200, 3))) @ cell
        result = minimum_image(vectors, cell, pbc).numpy()
        for vector, got in zip(vectors.numpy(), result, strict=True):
            best = brute_minimum_image(vector, cell.numpy(), pbc)
            difference = np.linalg.solve(cell.numpy().T, got - vector)
            np.testing.assert_allclose(difference, np.round(difference), atol=1e-9)
            if np.linalg.norm(best) < half:
                np.testing.assert_allclose(got, best, atol=1e-10)
                checked += 1
    assert checked > 50


def test_minimum_image_keeps_open_axes() -> None:
    cell = torch.diag(torch.tensor([4.0, 4.0, 4.0]))
    vectors = torch.tensor([[3.0, 3.0, 3.0], [-2.5, 0.1, 9.0]])
    result = minimum_image(vectors, cell, (True, False, False))
    torch.testing.assert_close(result, torch.tensor([[-1.0, 3.0, 3.0], [1.5, 0.1, 9.0]]))
    assert torch.equal(minimum_image(vectors, None, False), vectors)


def test_rows_times_3x3_is_a_full_precision_matrix_product() -> None:
    rng = np.random.default_rng(3)
    rows, matrix = torch.tensor(rng.normal(size=(7, 3))), torch.tensor(rng.normal(size=(3, 3)))
    torch.testing.assert_close(rows_times_3x3(rows, matrix), rows @ matrix, rtol=1e-15, atol=1e-15)
    batched = torch.tensor(rng.normal(size=(7, 3, 3)))
    expected = torch.einsum("ej,ejk->ek", rows, batched)
    torch.testing.assert_close(rows_times_3x3(rows, batched), expected, rtol=1e-15, atol=1e-15)
    cells, strains = batched[:2], batched[2:4]
    torch.testing.assert_close(
        rows_times_3x3(cells, strains[:, None]), torch.bmm(cells, strains), rtol=1e-15, atol=1e-15
    )
    units = torch.tensor([[1, -2, 3], [0, 0, 0]])
    result = rows_times_3x3(units, matrix)
    assert result.dtype == torch.float64
    torch.testing.assert_close(result, units.double() @ matrix, rtol=1e-15, atol=1e-15)


def test_complete_cell() -> None:
    cell = torch.tensor([[4.0, 0.0, 0.0], [1.0, 3.0, 0.0], [0.0, 0.0, 0.0]])
    full = complete_cell(cell, (True, True, False))
    assert torch.equal(full[:2], cell[:2]) and full.dtype == torch.float32
    torch.testing.assert_close(full[2].abs(), torch.tensor([0.0, 0.0, 1.0]))
    wire = complete_cell(torch.tensor([[0.0] * 3, [0.0] * 3, [1.0, 1.0, 1.0]]), (0, 0, 1))
    assert float(volume(wire)) > 0.5
    assert torch.equal(complete_cell(torch.zeros(3, 3), False), torch.eye(3))
    assert complete_cell(SKEWED, True) is SKEWED


def test_errors() -> None:
    with pytest.raises(ValueError, match="shape"):
        volume(torch.eye(2))
    with pytest.raises(ValueError, match="shape"):
        to_fractional(torch.zeros(4, 2), torch.eye(3))
    with pytest.raises(ValueError, match="singular"):
        to_fractional(torch.zeros(4, 3), torch.zeros(3, 3))
    singular = torch.tensor([[1.0, 0.0, 0.0], [2.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    with pytest.raises(ValueError, match="singular"):
        wrap_positions(torch.zeros(4, 3), singular, True)
    with pytest.raises(ValueError, match="zero lattice vector"):
        wrap_positions(torch.zeros(4, 3), torch.diag(torch.tensor([1.0, 1.0, 0.0])), True)
    with pytest.raises(ValueError, match="cell is required"):
        minimum_image(torch.zeros(4, 3), None, (False, False, True))
    with pytest.raises(ValueError, match="pbc"):
        wrap_positions(torch.zeros(4, 3), torch.eye(3), (True, False))
    with pytest.raises(TypeError):
        volume(torch.eye(3, dtype=torch.int64))
