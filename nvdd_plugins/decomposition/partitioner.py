"""`SpatialPartitioner`: who owns which atom, and which atom images are ghosts of which rank.

Sub-domains are the boxes of a px × py × pz grid of `StaggeredCuts` in the fractional
coordinates of a `DecompositionFrame`: a regular grid, or cuts moved to balance the load.
Periodic axes wrap; atoms beyond an open face belong to the outermost sub-domain on that
side. Empty sub-domains are fine.
"""

from __future__ import annotations

import math

import torch

from nvdd_plugins.decomposition.cuts import StaggeredCuts
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


def _by_domain(
    atom: torch.Tensor, rank: torch.Tensor, image: torch.Tensor, wrap: torch.Tensor
) -> GhostImages:
    """Images sorted by sub-domain, then atom; units from the atoms' `positions` (which are
    their home positions plus `wrap` periods) to the images."""
    order = torch.argsort(rank * (wrap.shape[0] + 1) + atom, stable=True)
    atom = atom[order]
    return GhostImages(atom, rank[order], image[order] - wrap[atom])


class SpatialPartitioner:
    """Grid decomposition of a frame over `world_size` ranks.

    Args:
        frame: the decomposition frame (cell, or atoms' extent on open axes).
        world_size: number of ranks.
        grid: (px, py, pz); default: the grid of `cuts`, else the minimal-surface grid for
            the frame's widths.
        halo_width: ghost shell width, Å. A periodic axis that is not split and is wider
            than twice this is a *wrapped* axis: its periodic neighbours are reached through
            lattice shifts of the local neighbour list instead of self-image ghosts.
        cuts: the sub-domain boundaries; default: the regular grid.
        wrap: whether such axes wrap; False images every periodic axis (every periodic
            image an atom's neighbours reach is then a row of its own, as the heat flux
            needs).
    """

    def __init__(
        self,
        frame: DecompositionFrame,
        world_size: int,
        grid: tuple[int, int, int] | None = None,
        halo_width: float = 0.0,
        cuts: StaggeredCuts | None = None,
        wrap: bool = True,
    ) -> None:
        self.frame = frame
        self.grid = tuple(
            grid
            or (cuts.grid if cuts else None)
            or choose_rank_grid(world_size, frame.widths.tolist())
        )
        if math.prod(self.grid) != world_size:
            suggestion = choose_rank_grid(world_size, frame.widths.tolist())
            raise ValueError(
                f"DomainConfig(grid={self.grid}) has {math.prod(self.grid)} sub-domains but "
                f"the mesh has {world_size} ranks: give a grid whose product is {world_size} "
                f"(e.g. {suggestion}, the minimal-surface grid for this box) or grid=None"
            )
        if cuts is not None and cuts.grid != self.grid:
            raise ValueError(f"cuts of grid {cuts.grid} given for the rank grid {self.grid}")
        device = frame.box.device
        self.cuts = (cuts or StaggeredCuts.regular(self.grid)).to(device)
        self.world_size = world_size
        self.halo_width = float(halo_width)
        unsplit = torch.tensor(self.grid, device=device) == 1
        wide = (frame.widths > 2.0 * self.halo_width) & wrap
        self.wrapped_axes = frame.pbc & unsplit.to(frame.pbc.device) & wide.to(frame.pbc.device)

    def domain_index(self, rank: int) -> tuple[int, int, int]:
        """Grid coordinates of `rank` (row-major, z fastest)."""
        return self.cuts.index(rank)

    def bounds(self, rank: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Fractional lower and upper bounds (3,) of `rank`'s sub-domain, as `like`'s
        device and dtype."""
        lo, hi = self.cuts.bounds(rank)
        return lo.to(like), hi.to(like)

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
        lo, hi = self.bounds(rank, home)

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
        return self.cuts.locate(home)

    def ghost_images(self, positions: torch.Tensor, owner_rank: int) -> GhostImages:
        """Images of this rank's atoms within the halo width of another sub-domain (or of
        this one, for periodic self-images). The atom itself on its own rank is excluded, and
        wrapped axes make no images (see the class docstring).

        Membership uses the sub-domain box expanded by the width along each axis, a superset
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
        sub-domain's box expanded by the halo width (images only on imaged axes).

        Axis by axis: the boxes an image can reach along the second axis depend on the
        slab it is in along the first, those along the third on its column."""
        device = home.device
        imaged_axes = (self.frame.pbc & ~self.wrapped_axes).tolist()
        reach = (self.halo_width / self.frame.widths).tolist()
        px, py, pz = self.grid
        tables = (
            self.cuts.x.reshape(1, px + 1),
            self.cuts.y,
            self.cuts.z.reshape(px * py, pz + 1),
        )
        atom = torch.arange(home.shape[0], device=device)
        group = torch.zeros_like(atom)
        image = torch.zeros(home.shape[0], 0, dtype=torch.long, device=device)
        for axis, table in enumerate(tables):
            parts = table.shape[1] - 1
            periodic = imaged_axes[axis]
            k = math.ceil(reach[axis]) + 1 if periodic else 0
            images = torch.arange(-k, k + 1, device=device)
            coord = home[atom, axis].unsqueeze(1).to(table.dtype) + images  # (E, n_images)
            lower = table[group, :-1] - reach[axis]  # (E, parts)
            upper = table[group, 1:] + reach[axis]
            if not periodic:  # open or wrapped: the outermost boxes extend to infinity
                lower[:, 0], upper[:, -1] = -math.inf, math.inf
            inside = (coord.unsqueeze(2) >= lower.unsqueeze(1)) & (
                coord.unsqueeze(2) < upper.unsqueeze(1)
            )
            entry, which, part = torch.nonzero(inside, as_tuple=True)
            atom = atom[entry]
            group = group[entry] * parts + part
            image = torch.cat([image[entry], images[which].unsqueeze(1)], dim=1)
        return atom, group, image
