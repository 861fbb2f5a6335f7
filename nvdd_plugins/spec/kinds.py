"""`OutputKind`: how a named model output is laid out, so consolidation knows what to do."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["OutputKind"]


class OutputKind(StrEnum):
    """Layout of a model output.

    PER_NODE: one row per local atom; owned rows are kept (after summing ghost rows into
    their owners for outputs listed in `MLIPSpec.gradient_outputs`).
    PER_GRAPH: one row per system; each rank's owned partial is all-reduced.
    GLOBAL: already identical on every rank; passed through.
    """

    PER_NODE = "per_node"
    PER_GRAPH = "per_graph"
    GLOBAL = "global"
