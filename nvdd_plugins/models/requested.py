"""Which outputs the evaluation under way asks for, so that a model may skip the others.

`evaluate_model` and the distributed engine evaluate a model inside `asking_for(properties)`;
a model whose forward computes an output beyond energies and forces directly (not by
autograd), such as `LennardJonesModel`'s stress from its per-atom virials, checks
`asked_for(name)` and leaves it out when nobody asked for it. Outside any evaluation (a
model called directly) everything counts as asked for.

Per thread (simulated ranks are threads of one process), in a `threading.local`: unlike a
`ContextVar`, whose `get` breaks a `torch.compile` graph, its read is traced and guarded on.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

__all__ = ["asked_for", "asking_for"]

_state = threading.local()


@contextmanager
def asking_for(properties: Iterable[str]) -> Iterator[None]:
    """Within (on this thread): the evaluation asks for `properties` only (nests; restored
    on exit)."""
    previous = getattr(_state, "asked", None)
    _state.asked = frozenset(properties)
    try:
        yield
    finally:
        _state.asked = previous


def asked_for(*names: str) -> bool:
    """Whether the evaluation under way on this thread asks for any of `names` (True
    outside one)."""
    asked = getattr(_state, "asked", None)
    return asked is None or not asked.isdisjoint(names)
