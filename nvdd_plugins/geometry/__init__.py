"""Geometry layer: cells, fractional coordinates, minimum image, neighbour lists, rebuilds."""

from __future__ import annotations

from .cell import (
    complete_cell,
    minimum_image,
    perpendicular_widths,
    rows_times_3x3,
    to_cartesian,
    to_fractional,
    volume,
    wrap_positions,
)
from .neighbor_list import NeighborList, build_neighbor_list
from .rebuild import RebuildDetector

__all__ = [
    "NeighborList",
    "RebuildDetector",
    "build_neighbor_list",
    "complete_cell",
    "minimum_image",
    "perpendicular_widths",
    "rows_times_3x3",
    "to_cartesian",
    "to_fractional",
    "volume",
    "wrap_positions",
]
