"""`SpatialPartitioner`: who owns which atom, and which atom images are ghosts of which rank.

Sub-domains are a regular px × py × pz grid in the fractional coordinates of a
`DecompositionFrame`. Periodic axes wrap; atoms beyond an open face belong to the outermost
sub-domain on that side. Empty sub-domains are fine.
"""

from __future__ import annotations

import math

import torch

from nvdd_plugins.decomposition.frame import DecompositionFrame
from nvdd_plugins.decomposition.grid import choose_rank_grid

__all__ = ["GhostImages", "SpatialPartitioner"]


class GhostImages:
    """Atom images one rank sends out as ghosts: for each, the owned row, the destination
    rank and the lattice translation (integer units of the frame box) to apply."""

    def __init__(self, rows: torch.Tensor, ranks: torch.Tensor, units: torch.Tensor) -> None:
        self.rows, self.ranks, self.units = rows, ranks, units

    def __len__(self) -> int:
        return int(self.rows.shape[0])


def _grouped_product(
    groups_a: torch.Tensor, groups_b: torch.Tensor, n_groups: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """All pairs (a, b) of entries with equal group id; inputs sorted by group id.

    Returns indices into the two inputs.
    """
    count_a = torch.bincount(groups_a, minlength=n_groups)
    count_b = torch.bincount(groups_b, minlength=n_groups)
    start_a = torch.cumsum(count_a, 0) - count_a
    start_b = torch.cumsum(count_b, 0) - count_b
    per_group = count_a * count_b
    group = torch.repeat_interleave(torch.arange(n_groups, device=groups_a.device), per_group)
    offset = (
        torch.arange(group.shape[0], device=group.device)
        - (torch.cumsum(per_group, 0) - per_group)[group]
    )
    return start_a[group] + offset // count_b[group], start_b[group] + offset % count_b[group]


def _by_domain(
    atom: torch.Tensor, rank: torch.Tensor, image: torch.Tensor, wrap: torch.Tensor
) -> GhostImages:
    """Images sorted by sub-domain, then atom; units from the atoms' `positions` (which are
    their home positions plus `wrap` periods) to the images."""
    order = torch.argsort(rank * (wrap.shape[0] + 1) + atom, stable=True)
    atom = atom[order]
    return GhostImages(atom, rank[order], image[order] - wrap[atom])


class SpatialPartitioner:
    """Regular grid decomposition of a frame over `world_size` ranks.

    Args:
        frame: the decomposition frame (cell, or atoms' extent on open axes).
        world_size: number of ranks.
        grid: (px, py, pz); default: the minimal-surface grid for the frame's widths.
        halo_width: ghost shell width, Å. A periodic axis that is not split and is wider
            than twice this is a *wrapped* axis: its periodic neighbours are reached through
            lattice shifts of the local neighbour list instead of self-image ghosts.
    """

    def __init__(
        self,
        frame: DecompositionFrame,
        world_size: int,
        grid: tuple[int, int, int] | None = None,
        halo_width: float = 0.0,
    ) -> None:
        self.frame = frame
        self.grid = grid or choose_rank_grid(world_size, frame.widths.tolist())
        if math.prod(self.grid) != world_size:
            suggestion = choose_rank_grid(world_size, frame.widths.tolist())
            raise ValueError(
                f"DomainConfig(grid={self.grid}) has {math.prod(self.grid)} sub-domains but "
                f"the mesh has {world_size} ranks: give a grid whose product is {world_size} "
                f"(e.g. {suggestion}, the minimal-surface grid for this box) or grid=None"
            )
        self.world_size = world_size
        self.halo_width = float(halo_width)
        self._grid_t = torch.tensor(self.grid, device=frame.box.device)
        unsplit = self._grid_t == 1
        wide = frame.widths > 2.0 * self.halo_width
        self.wrapped_axes = frame.pbc & unsplit.to(frame.pbc.device) & wide.to(frame.pbc.device)

    def domain_index(self, rank: int) -> tuple[int, int, int]:
        """Grid coordinates of `rank` (row-major, z fastest)."""
        _, py, pz = self.grid
        return rank // (py * pz), (rank // pz) % py, rank % pz

    def home_fractional(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Fractional coordinates wrapped on periodic axes, and the wrap count per axis
        (positions = home + wrap @ box)."""
        frac = self.frame.fractional(positions)
        wrap = torch.where(self.frame.pbc, torch.floor(frac), torch.zeros_like(frac))
        return frac - wrap, wrap.long()

    def owned_fractional(
        self, positions: torch.Tensor, rank: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Like `home_fractional` for atoms that `rank` owns, but on imaged axes (periodic
        and split, or too narrow to wrap) each atom takes the periodic image nearest to
        `rank`'s sub-domain. An atom that migration hysteresis keeps just across a periodic
        face then sits beside its sub-domain, where its ghosts are, not a period away."""
        home, wrap = self.home_fractional(positions)
        imaged = self.frame.pbc.to(home.device) & ~self.wrapped_axes.to(home.device)
        if not bool(imaged.any()):
            return home, wrap
        index = torch.tensor(self.domain_index(rank), device=home.device, dtype=home.dtype)
        grid = self._grid_t.to(device=home.device, dtype=home.dtype)
        lo, hi = index / grid, (index + 1) / grid

        def outside(coord: torch.Tensor) -> torch.Tensor:
            return torch.clamp(torch.maximum(lo - coord, coord - hi), min=0.0)

        shift = torch.zeros_like(home)
        for delta in (-1.0, 1.0):
            closer = imaged & (outside(home + delta) < outside(home + shift))
            shift = torch.where(closer, delta, shift)
        return home + shift, wrap - shift.long()

    def rank_of(self, positions: torch.Tensor) -> torch.Tensor:
        """Owning rank of each position (N,) int64."""
        home, _ = self.home_fractional(positions)
        cells = torch.floor(home * self._grid_t).long()
        cells = torch.minimum(torch.clamp(cells, min=0), self._grid_t - 1)
        _, py, pz = self.grid
        return (cells[:, 0] * py + cells[:, 1]) * pz + cells[:, 2]

    def ghost_images(self, positions: torch.Tensor, owner_rank: int) -> GhostImages:
        """Images of this rank's atoms within the halo width of another sub-domain (or of
        this one, for periodic self-images). The atom itself on its own rank is excluded, and
        wrapped axes make no images (see the class docstring).

        Membership uses the sub-domain slab expanded by the width along each axis, a superset
        of the exact distance test, so extra ghosts are possible but none is missed.
        """
        device = positions.device
        imaged_axes = (self.frame.pbc & ~self.wrapped_axes).tolist()
        if self.world_size == 1 and not any(imaged_axes):
            # One sub-domain and no periodic axis needing self-images: nothing to send.
            rows = torch.zeros(0, dtype=torch.int64, device=device)
            return GhostImages(rows, rows, torch.zeros((0, 3), dtype=torch.int64, device=device))
        home, wrap = self.owned_fractional(positions, owner_rank)
        atom, rank, image = self._memberships(home)
        keep = ~((rank == owner_rank) & (image == 0).all(dim=1))
        return _by_domain(atom[keep], rank[keep], image[keep], wrap)

    def domain_images(self, positions: torch.Tensor) -> GhostImages:
        """Every image of every atom within the halo width of each sub-domain, its home
        image in its own sub-domain included (the rows of sub-domains evaluated one after
        another in one process); grouped by sub-domain. Units take each atom to its image
        from `positions`, as in `ghost_images`."""
        home, wrap = self.home_fractional(positions)
        return _by_domain(*self._memberships(home), wrap)

    def _memberships(self, home: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(atom, sub-domain, image) of every image of the fractional positions `home` in a
        sub-domain's slab expanded by the halo width (images only on imaged axes)."""
        device = home.device
        n = home.shape[0]
        imaged_axes = (self.frame.pbc & ~self.wrapped_axes).tolist()
        reach = (self.halo_width / self.frame.widths).tolist()
        axis_entries = []
        for axis in range(3):
            p = self.grid[axis]
            periodic = imaged_axes[axis]
            k = math.ceil(reach[axis]) + 1 if periodic else 0
            images = torch.arange(-k, k + 1, device=device)
            coord = home[:, axis].unsqueeze(1) + images.to(home.dtype)  # (n, n_images)
            domains = torch.arange(p, device=device, dtype=home.dtype)
            lower = domains / p - reach[axis]
            upper = (domains + 1) / p + reach[axis]
            if not periodic:  # open or wrapped: the outermost slabs extend to infinity
                lower[0], upper[-1] = -math.inf, math.inf
            inside = (coord.unsqueeze(1) >= lower.view(1, p, 1)) & (
                coord.unsqueeze(1) < upper.view(1, p, 1)
            )
            atom, domain, image = torch.nonzero(inside, as_tuple=True)
            axis_entries.append((atom, domain, images[image]))
        (ax, dx, ix), (ay, dy, iy), (az, dz, iz) = axis_entries
        pick_x, pick_y = _grouped_product(ax, ay, n)
        atom = ax[pick_x]
        pick_xy, pick_z = _grouped_product(atom, az, n)
        atom = atom[pick_xy]
        domain = torch.stack([dx[pick_x][pick_xy], dy[pick_y][pick_xy], dz[pick_z]], dim=1)
        image = torch.stack([ix[pick_x][pick_xy], iy[pick_y][pick_xy], iz[pick_z]], dim=1)
        _, py, pz = self.grid
        rank = (domain[:, 0] * py + domain[:, 1]) * pz + domain[:, 2]
        return atom, rank, image
