"""`DistributedModel` and the machinery that applies a model's spec on one rank's view."""

from __future__ import annotations

from nvdd_plugins.distributed_model.domain import HaloDomain
from nvdd_plugins.distributed_model.health import NonFiniteError
from nvdd_plugins.distributed_model.model import DistributedModel
from nvdd_plugins.distributed_model.view import HaloView, build_halo_view

__all__ = ["DistributedModel", "HaloDomain", "HaloView", "NonFiniteError", "build_halo_view"]
