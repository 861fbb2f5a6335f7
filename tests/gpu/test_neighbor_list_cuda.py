"""The CUDA neighbour list equals the CPU one, also with TF32 matrix products switched on."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nvdd_plugins.geometry import build_neighbor_list

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

CUTOFF = 5.0


def _crystal_far_from_origin() -> tuple[torch.Tensor, torch.Tensor]:
    """~4000 atoms at liquid density in a skewed 40 Å cell, 300 Å away from the origin."""
    rng = np.random.default_rng(7)
    cell = np.array([[40.0, 0.0, 0.0], [6.0, 39.0, 0.0], [-4.0, 5.0, 41.0]])
    positions = rng.uniform(0.0, 1.0, (4000, 3)) @ cell + 300.0
    return torch.tensor(positions), torch.tensor(cell)


def _edge_set(nl, keep: torch.Tensor | None = None) -> set[tuple[int, ...]]:
    rows = torch.cat((nl.edge_index.T, nl.unit_shifts), dim=1).cpu()
    if keep is not None:
        rows = rows[keep.cpu()]
    return {tuple(r) for r in rows.tolist()}


def test_cuda_float64_list_is_the_cpu_list_in_the_same_order() -> None:
    positions, cell = _crystal_far_from_origin()
    cpu = build_neighbor_list(positions, cell, True, CUTOFF)
    cuda = build_neighbor_list(positions.cuda(), cell.cuda(), True, CUTOFF)
    assert torch.equal(cuda.edge_index.cpu(), cpu.edge_index)
    assert torch.equal(cuda.unit_shifts.cpu(), cpu.unit_shifts)
    torch.testing.assert_close(cuda.shifts.cpu(), cpu.shifts, rtol=0, atol=0)


def test_float32_list_ignores_tf32_matrix_products() -> None:
    positions, cell = _crystal_far_from_origin()
    reference = build_neighbor_list(positions, cell, True, CUTOFF)
    lengths = torch.linalg.vector_norm(reference.edge_vectors(positions), dim=1)
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")  # TF32 for float32 matrix products
    try:
        nl = build_neighbor_list(positions.float().cuda(), cell.float().cuda(), True, CUTOFF)
    finally:
        torch.set_float32_matmul_precision(previous)
    # Pairs within float32 rounding of the cutoff may go either way; every other pair must match.
    expected = _edge_set(reference, (lengths - CUTOFF).abs() > 1e-3)
    assert not expected - _edge_set(nl), "pairs missing from the float32 list"
    units = nl.unit_shifts.cpu()
    exact_shifts = units.double() @ cell
    i, j = nl.edge_index.cpu()
    exact_lengths = torch.linalg.vector_norm(positions[j] - positions[i] + exact_shifts, dim=1)
    assert float(exact_lengths.max()) < CUTOFF + 1e-3, "a pair beyond the cutoff was listed"
    torch.testing.assert_close(nl.shifts.double().cpu(), exact_shifts, rtol=1e-6, atol=1e-4)
