"""The native CPU kernels against the vectorised torch code they replace.

The neighbour list must come out identical (same edges, order, unit shifts and shifts); the
Lennard-Jones sums equal to rounding (the torch path sums with a segment reduction). A broken
list or kernel must show: the negative controls drop one edge and feed an index out of range.
"""

from __future__ import annotations

import pytest
import torch

from nvdd_plugins.geometry import build_neighbor_list
from nvdd_plugins.geometry.cell import complete_cell, perpendicular_widths
from nvdd_plugins.geometry.cell_grid import with_periodic_images
from nvdd_plugins.kernels import lennard_jones
from nvdd_plugins.native import (
    build,
    lennard_jones_native,
    native_enabled,
    native_library,
)

pytestmark = pytest.mark.skipif(native_library() is None, reason="no C compiler")

EPSILON, SIGMA = 0.0104, 3.40


def crystal(repeats: int, spacing: float, dtype: torch.dtype, seed: int = 0):
    """A rattled simple-cubic block (positions, cubic cell)."""
    grid = torch.stack(
        torch.meshgrid(*(torch.arange(repeats, dtype=torch.float64),) * 3, indexing="ij"), -1
    ).reshape(-1, 3)
    generator = torch.Generator().manual_seed(seed)
    positions = grid + 0.1 * torch.randn(grid.shape, generator=generator, dtype=torch.float64)
    return (positions * spacing).to(dtype), torch.eye(3, dtype=dtype) * repeats * spacing


def both(monkeypatch: pytest.MonkeyPatch, function, *args, **kwargs):
    """`function(*args, **kwargs)` with the native kernels on, then off."""
    on = function(*args, **kwargs)
    monkeypatch.setenv("NVDD_NATIVE", "0")
    off = function(*args, **kwargs)
    monkeypatch.delenv("NVDD_NATIVE")
    return on, off


GEOMETRIES = {
    "periodic": ((True, True, True), None, 0.0),
    "slab": ((True, True, False), None, 0.0),
    "triclinic": ((True, True, True), ((1.0, 0.0, 0.0), (0.3, 1.0, 0.0), (0.2, -0.25, 1.0)), 0.0),
    "cluster": ((False, False, False), None, 0.0),
    "outside_cell": ((True, False, True), None, 17.0),
}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("name", sorted(GEOMETRIES))
@pytest.mark.parametrize("cutoff", [3.1, 11.0])  # 11 Å: more than half the 18 Å box
def test_neighbor_list_is_the_torch_one(monkeypatch, name, cutoff, dtype):
    pbc, shear, offset = GEOMETRIES[name]
    positions, cell = crystal(6, 3.0, dtype)
    if shear is not None:
        cell = torch.tensor(shear, dtype=dtype) @ cell
        positions = positions @ torch.tensor(shear, dtype=dtype)
    positions = positions + offset
    for touching in (None, 100):
        on, off = both(
            monkeypatch, build_neighbor_list, positions, cell, pbc, cutoff, touching=touching
        )
        assert on.num_edges > 0
        assert torch.equal(on.edge_index, off.edge_index)
        assert torch.equal(on.unit_shifts, off.unit_shifts)
        assert torch.equal(on.shifts, off.shifts)
        if touching is not None:
            i, j = on.edge_index
            assert bool(((i < touching) | (j < touching)).all())


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("name", sorted(GEOMETRIES))
@pytest.mark.parametrize("reach", [3.1, 11.0, 40.0])  # 40 Å: images two boxes away
def test_periodic_images_are_the_torch_ones(monkeypatch, name, reach, dtype):
    """The atoms' periodic images near the cell: the same points in the same order, bit for
    bit (atom, lattice units, positions, each atom's own point)."""
    pbc, shear, offset = GEOMETRIES[name]
    positions, cell = crystal(6, 3.0, dtype, seed=1)
    if shear is not None:
        cell = torch.tensor(shear, dtype=dtype) @ cell
        positions = positions @ torch.tensor(shear, dtype=dtype)
    full = complete_cell(cell, pbc)
    widths = perpendicular_widths(full.double()).tolist()
    on, off = both(monkeypatch, with_periodic_images, positions + offset, full, pbc, widths, reach)
    assert on.atom.shape[0] > positions.shape[0] or not any(pbc)
    for field in ("atom", "unit", "pos", "image", "central"):
        assert torch.equal(getattr(on, field), getattr(off, field)), field


def test_neighbor_list_negative_control(monkeypatch):
    """The comparison above sees a missing edge and two edges in another order."""
    positions, cell = crystal(5, 3.0, torch.float64)
    on, off = both(monkeypatch, build_neighbor_list, positions, cell, (True,) * 3, 4.0)
    assert torch.equal(on.edge_index, off.edge_index)
    assert not torch.equal(on.edge_index[:, 1:], off.edge_index)
    swapped = on.edge_index.clone()
    swapped[:, [0, 1]] = swapped[:, [1, 0]]
    assert not torch.equal(swapped, off.edge_index)


@pytest.mark.parametrize("shift", [False, True])
def test_lennard_jones_is_the_torch_one(monkeypatch, shift):
    positions, cell = crystal(6, 3.6, torch.float64)
    listed = build_neighbor_list(positions, cell, (True,) * 3, 8.5)
    args = (positions, listed.edge_index, listed.shifts, EPSILON, SIGMA, 8.5, shift)
    on, off = both(monkeypatch, lennard_jones, *args)
    for native, vectorised in zip(on, off, strict=True):
        scale = float(vectorised.abs().max())
        assert float((native - vectorised).abs().max()) <= 1e-14 * scale
    # negative control: one edge fewer changes the sums far beyond that bound
    fewer = lennard_jones(
        positions, listed.edge_index[:, 1:], listed.shifts[1:], EPSILON, SIGMA, 8.5, shift
    )
    assert float((fewer[1] - on[1]).abs().max()) > 1e-6


@pytest.mark.parametrize("native", ["1", "0"])
def test_lennard_jones_virials_only_when_asked(monkeypatch, native):
    """Without virials the kernel (native or torch) skips them and gives the same energies
    and forces bit for bit; with them they are there (their values: the test above and
    tests/models/test_lennard_jones.py's stress against ASE)."""
    monkeypatch.setenv("NVDD_NATIVE", native)
    positions, cell = crystal(5, 3.6, torch.float64)
    listed = build_neighbor_list(positions, cell, (True,) * 3, 8.5)
    args = (positions, listed.edge_index, listed.shifts, EPSILON, SIGMA, 8.5, False)
    energies, forces, virials = lennard_jones(*args, True)
    skipped = lennard_jones(*args, False)
    assert torch.equal(skipped[0], energies) and torch.equal(skipped[1], forces)
    assert skipped[2].shape == (0, 3, 3)
    assert virials.shape == (positions.shape[0], 3, 3) and float(virials.abs().min()) > 0


def test_lennard_jones_rejects_out_of_range_edges(monkeypatch):
    monkeypatch.setenv("NVDD_NATIVE", "1")  # the native kernel itself, whatever the caller's
    positions, _ = crystal(2, 3.6, torch.float64)
    edges = torch.tensor([[0, 1], [1, positions.shape[0]]])
    with pytest.raises(IndexError, match="outside the 8 atoms"):
        lennard_jones_native(positions, edges, torch.zeros(2, 3, dtype=torch.float64), 1, 1, 3, 0)


def test_lennard_jones_gradient_still_autograd(monkeypatch):
    """The native forward keeps the op's autograd (energies -> positions) working."""
    positions, cell = crystal(4, 3.6, torch.float64)
    listed = build_neighbor_list(positions, cell, (True,) * 3, 8.5)
    leaf = positions.clone().requires_grad_(True)
    energies, forces, _ = lennard_jones(
        leaf, listed.edge_index, listed.shifts, EPSILON, SIGMA, 8.5, False
    )
    (gradient,) = torch.autograd.grad(energies.sum(), leaf)
    assert torch.allclose(-gradient, forces, rtol=1e-12, atol=1e-14)


def test_switched_off_and_without_compiler(monkeypatch, tmp_path):
    monkeypatch.setenv("NVDD_NATIVE", "0")
    assert not native_enabled()
    positions, _ = crystal(2, 3.6, torch.float64)
    edges = torch.tensor([[0], [1]])
    assert lennard_jones_native(positions, edges, torch.zeros(1, 3), 1, 1, 3, 0) is None
    monkeypatch.delenv("NVDD_NATIVE")
    # a dtype without a kernel (float16): not applicable
    assert lennard_jones_native(positions.half(), edges, torch.zeros(1, 3), 1, 1, 3, 0) is None
    # a compiler that fails: no library, logged, and the torch code runs instead
    monkeypatch.setenv("NVDD_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    build.native_library.cache_clear()
    try:
        assert build.native_library() is None
        listed = build_neighbor_list(positions, None, (False,) * 3, 10.0)
        assert listed.num_edges == 8 * 7
        assert not list(tmp_path.glob("*.so"))
    finally:
        monkeypatch.undo()
        build.native_library.cache_clear()
    assert native_library() is not None
