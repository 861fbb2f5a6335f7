"""`OutputKind`: how a named model output is laid out, and the transform that consolidates it."""

from __future__ import annotations

from enum import StrEnum

from nvdd_plugins.spec.transforms import AllReduceSum, SliceOwned, Transform

__all__ = ["OutputKind"]


class OutputKind(StrEnum):
    """Layout of a model output; `collective` is the transform that consolidates it over
    ranks (None: nothing to do).

    PER_NODE (SliceOwned): one row per local atom; owned rows are kept (after summing ghost
    rows into their owners for outputs listed in `MLIPSpec.gradient_outputs`).
    PER_GRAPH (AllReduceSum): one row per system; each rank's owned partial is summed.
    GLOBAL (None): already identical on every rank; passed through.
    """

    collective: Transform | None

    def __new__(cls, value: str, collective: Transform | None) -> OutputKind:
        member = str.__new__(cls, value)
        member._value_ = value
        member.collective = collective
        return member

    PER_NODE = "per_node", SliceOwned()
    PER_GRAPH = "per_graph", AllReduceSum()
    GLOBAL = "global", None
