"""Rank grid choice: split the box into px × py × pz sub-domains of minimal surface."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["choose_rank_grid"]


def choose_rank_grid(world_size: int, widths: Sequence[float]) -> tuple[int, int, int]:
    """The (px, py, pz) with px*py*pz == world_size minimising a sub-domain's surface area.

    `widths` are the box's perpendicular widths (Å). Ties prefer splitting the first axes.
    """
    if world_size < 1:
        raise ValueError("world_size must be >= 1")
    lx, ly, lz = (float(w) for w in widths)
    best: tuple[float, tuple[int, int, int]] | None = None
    for px in range(1, world_size + 1):
        if world_size % px:
            continue
        rest = world_size // px
        for py in range(1, rest + 1):
            if rest % py:
                continue
            pz = rest // py
            a, b, c = lx / px, ly / py, lz / pz
            surface = a * b + b * c + a * c
            key = (round(surface, 9), (-px, -py, -pz))
            if best is None or key < (round(best[0], 9), tuple(-g for g in best[1])):
                best = (surface, (px, py, pz))
    assert best is not None
    return best[1]
