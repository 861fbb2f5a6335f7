"""`StaggeredCuts`: sub-domain boundaries of a px × py × pz rank grid, staggered per slab.

The first axis is cut into px slabs at `x`; each slab i is cut along the second axis at its
own positions `y[i]`; each column (i, j) along the third axis at `z[i, j]`. All positions are
fractional coordinates of the decomposition frame, from 0 to 1; on an open axis the outer
ones may lie beyond (atoms that left the frame), where they only bound the histograms. A
regular grid is the case of evenly spaced cuts; balancing moves them
(`decomposition.balance`). Rank r has grid coordinates (i, j, k) in row-major order, k
fastest, as before.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["StaggeredCuts"]


@dataclass(frozen=True)
class StaggeredCuts:
    """Cut positions (float64, CPU or any device) of a staggered grid.

    Attributes:
        x: (px + 1,) cuts of the first axis, from 0 to 1 (see the module docstring).
        y: (px, py + 1) cuts of the second axis in each slab.
        z: (px, py, pz + 1) cuts of the third axis in each column.
    """

    x: torch.Tensor
    y: torch.Tensor
    z: torch.Tensor

    @classmethod
    def regular(
        cls, grid: tuple[int, int, int], device: torch.device | str = "cpu"
    ) -> StaggeredCuts:
        """Evenly spaced cuts: the regular grid."""
        px, py, pz = grid

        def even(n: int) -> torch.Tensor:
            return torch.arange(n + 1, dtype=torch.float64, device=device) / n

        return cls(even(px), even(py).repeat(px, 1), even(pz).repeat(px, py, 1))

    @property
    def grid(self) -> tuple[int, int, int]:
        """(px, py, pz)."""
        return self.x.shape[0] - 1, self.y.shape[1] - 1, self.z.shape[2] - 1

    def check(self) -> None:
        """Raise ValueError unless the cuts are consistent: shapes of one grid, each row
        non-decreasing from at most 0 to at least 1."""
        px, py, pz = self.grid
        if self.y.shape != (px, py + 1) or self.z.shape != (px, py, pz + 1) or min(px, py, pz) < 1:
            raise ValueError(
                f"staggered cuts of inconsistent shapes {tuple(self.x.shape)}, "
                f"{tuple(self.y.shape)}, {tuple(self.z.shape)}"
            )
        for name, cuts in (("x", self.x), ("y", self.y), ("z", self.z)):
            ends = bool((cuts[..., 0] <= 0).all() and (cuts[..., -1] >= 1).all())
            if not ends or bool((cuts.diff(dim=-1) < 0).any()):
                raise ValueError(f"{name} cuts must rise from <= 0 to >= 1, got {cuts.tolist()}")

    def to(self, device: torch.device | str) -> StaggeredCuts:
        """The same cuts on `device`."""
        return StaggeredCuts(self.x.to(device), self.y.to(device), self.z.to(device))

    def index(self, rank: int) -> tuple[int, int, int]:
        """Grid coordinates (i, j, k) of `rank` (row-major, k fastest)."""
        _, py, pz = self.grid
        return rank // (py * pz), (rank // pz) % py, rank % pz

    def rank(self, i: torch.Tensor, j: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """The rank of grid coordinates (elementwise)."""
        _, py, pz = self.grid
        return (i * py + j) * pz + k

    def bounds(self, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Lower and upper fractional bounds (3,) of `rank`'s sub-domain."""
        i, j, k = self.index(rank)
        lo = torch.stack([self.x[i], self.y[i, j], self.z[i, j, k]])
        hi = torch.stack([self.x[i + 1], self.y[i, j + 1], self.z[i, j, k + 1]])
        return lo, hi

    def locate(self, home: torch.Tensor) -> torch.Tensor:
        """The sub-domain (rank) of fractional coordinates `home` (N, 3); coordinates below
        0 or above 1 (open axes) belong to the outermost sub-domains."""
        home = home.to(self.x.dtype)
        px, py, pz = self.grid

        def slot(cuts: torch.Tensor, coord: torch.Tensor, parts: int) -> torch.Tensor:
            inner = cuts[..., 1:-1].contiguous()
            found = torch.searchsorted(inner, coord.unsqueeze(-1).contiguous(), right=True)
            return found.squeeze(-1).clamp(0, parts - 1)

        i = slot(self.x.expand(home.shape[0], -1), home[:, 0], px)
        j = slot(self.y[i], home[:, 1], py)
        k = slot(self.z[i, j], home[:, 2], pz)
        return self.rank(i, j, k)
