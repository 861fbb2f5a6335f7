"""Which outputs the evaluation under way asks for, so that a model may skip the others.

`evaluate_model` and the distributed engine evaluate a model inside `asking_for(properties)`;
a model whose forward computes an output beyond energies and forces directly (not by
autograd), such as `LennardJonesModel`'s stress from its per-atom virials, checks
`asked_for(name)` and leaves it out when nobody asked for it. Outside any evaluation (a
model called directly) everything counts as asked for.

A module-level value rather than a context variable: `torch.compile` traces a read of it
(guarding on its value) where it would break the graph at `ContextVar.get`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

__all__ = ["asked_for", "asking_for"]

_asked: frozenset[str] | None = None


@contextmanager
def asking_for(properties: Iterable[str]) -> Iterator[None]:
    """Within: the evaluation asks for `properties` only (nests; restored on exit)."""
    global _asked
    previous, _asked = _asked, frozenset(properties)
    try:
        yield
    finally:
        _asked = previous


def asked_for(*names: str) -> bool:
    """Whether the evaluation under way asks for any of `names` (True outside one)."""
    return _asked is None or not _asked.isdisjoint(names)
