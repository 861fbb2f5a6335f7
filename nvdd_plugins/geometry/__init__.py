"""Geometry layer: cells, fractional coordinates, minimum image, neighbour lists, Verlet state."""

from __future__ import annotations

from nvdd_plugins.geometry.batch_neighbors import (
    VerletNeighborList,
    attach_neighbor_list,
    edge_shifts,
)
from nvdd_plugins.geometry.cell import images_unambiguous, is_singular, zero_vectors

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
from .verlet import Capacity, VerletState

__all__ = [
    "Capacity",
    "NeighborList",
    "VerletNeighborList",
    "VerletState",
    "attach_neighbor_list",
    "build_neighbor_list",
    "complete_cell",
    "edge_shifts",
    "images_unambiguous",
    "is_singular",
    "minimum_image",
    "perpendicular_widths",
    "rows_times_3x3",
    "to_cartesian",
    "to_fractional",
    "volume",
    "wrap_positions",
    "zero_vectors",
]
