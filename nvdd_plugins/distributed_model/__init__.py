"""`DistributedModel` and the machinery that applies a model's spec on one rank's view."""

from __future__ import annotations

from nvdd_plugins.distributed_model.capacity import Capacity
from nvdd_plugins.distributed_model.domain import HaloDomain
from nvdd_plugins.distributed_model.health import NonFiniteError
from nvdd_plugins.distributed_model.model import DistributedModel
from nvdd_plugins.distributed_model.view import HaloView, assemble_view, build_halo_view

__all__ = [
    "Capacity",
    "DistributedModel",
    "HaloDomain",
    "HaloView",
    "NonFiniteError",
    "assemble_view",
    "build_halo_view",
]
