"""Third-party helper replacement (`MethodAdapter`, `PythonAdapter`, `JitAdapter`) while a
distributed forward runs; reference-counted so concurrent virtual ranks share one patch."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from nvdd_plugins.spec import JitAdapter, MethodAdapter, PythonAdapter

__all__ = ["replaced_helpers"]

_LOCK = threading.Lock()
_ACTIVE: dict[tuple[int, str], list[Any]] = {}  # (owner id, attribute) -> [original, count]


def _owner_and_attribute(target: str) -> tuple[Any, str]:
    module_name, sep, path = target.partition(":")
    if not sep or not path:
        raise ValueError(f"adapter target {target!r} must look like 'package.module:name'")
    owner: Any = importlib.import_module(module_name)
    *parents, attribute = path.split(".")
    for part in parents:
        owner = getattr(owner, part)
    if not hasattr(owner, attribute):
        raise ValueError(f"adapter target {target!r} does not exist")
    return owner, attribute


@contextmanager
def replaced_helpers(
    adapters: Sequence[MethodAdapter | PythonAdapter | JitAdapter],
) -> Iterator[None]:
    """Swap each adapter's target for its replacement inside the block."""
    entered = []
    try:
        for adapter in adapters:
            owner, attribute = _owner_and_attribute(adapter.target)
            key = (id(owner), attribute)
            with _LOCK:
                # Another virtual rank may have patched the target already: check the original.
                original = _ACTIVE[key][0] if key in _ACTIVE else getattr(owner, attribute)
                if isinstance(adapter, JitAdapter) and not isinstance(
                    original, torch.jit.ScriptFunction | torch.jit.ScriptModule
                ):
                    raise ValueError(f"JitAdapter target {adapter.target!r} is not TorchScript")
                if key not in _ACTIVE:
                    _ACTIVE[key] = [original, 0]
                    setattr(owner, attribute, adapter.resolved_replacement())
                _ACTIVE[key][1] += 1
            entered.append((owner, attribute, key))
        yield
    finally:
        for owner, attribute, key in reversed(entered):
            with _LOCK:
                _ACTIVE[key][1] -= 1
                if _ACTIVE[key][1] == 0:
                    setattr(owner, attribute, _ACTIVE.pop(key)[0])
