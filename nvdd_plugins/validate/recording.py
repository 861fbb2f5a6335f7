"""What a distributed forward did with per-atom tensors: every torch call that read or wrote
a node-indexed tensor, where the model made it, and how the engine handles it.

`RecordedModel` wraps a model wrapper so that its forward runs under an `OpRecorder`, a
`TorchFunctionMode` entered inside the engine's interception: it sees each call of the model
first and passes it on unchanged.
"""

from __future__ import annotations

import functools
import os
import sys
import sysconfig
import threading
import traceback
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from types import FrameType
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

from nvdd_plugins.config import StrategyKind
from nvdd_plugins.data import Batch
from nvdd_plugins.distributed_model import CallKind, CallRules, StaleTargets, has_rows, is_opaque
from nvdd_plugins.models import BaseModelMixin
from nvdd_plugins.spec import GLOBAL_SUM_ADAPTERS, MLIPSpec, OpAdapter
from nvdd_plugins.validate.reductions import reduces_over_atoms

__all__ = [
    "Handling",
    "OpRecord",
    "RecordLog",
    "RecordedModel",
    "StaleRead",
    "op_name",
    "user_site",
    "user_site_of",
]

_PACKAGE = Path(__file__).resolve().parents[1]
_LIBRARY_DIRS = tuple(
    str(path) + os.sep
    for path in (
        Path(torch.__file__).resolve().parent,
        _PACKAGE / "validate",
        _PACKAGE / "distributed_model",
        _PACKAGE / "comm",
        _PACKAGE / "spec",
        Path(sysconfig.get_paths()["stdlib"]).resolve(),
    )
)


class Handling(StrEnum):
    """How the engine treats one call on per-atom tensors."""

    AGGREGATION = "aggregation onto atoms: ghost rows refreshed"
    OWNED_SUM = "atoms -> system sum: owned rows only"
    MARKED = "marked aggregation (scattered_onto_nodes): ghost rows refreshed"
    ADAPTER = "OpAdapter of the spec"
    ATOM_REDUCTION = "reduction over atoms: each rank reduces only its own rows"
    UNKNOWN_OPAQUE = "unknown opaque op: not seen into, no adapter"
    PER_ROW = "per-row or gather: nothing to do"


@dataclass(frozen=True)
class OpRecord:
    """One op at one place of the model's code.

    Attributes:
        op: the op's name (`index_add_`, `torch.ops.ns.name.default`).
        site: "file:line" of the model's call.
        handling: what the engine does with it.
        writes_rows: the op returned a per-atom tensor.
        calls: how often it ran (all ranks, all recorded forwards).
        target: the op object itself (for an adapter).
    """

    op: str
    site: str
    handling: Handling
    writes_rows: bool
    calls: int
    target: Any = None


@dataclass(frozen=True)
class StaleRead:
    """An in-place aggregation whose result was not rebound, and the first read of its old
    tensor (compile semantics: the refreshed result is a new tensor)."""

    op: str
    site: str
    reader: str
    reader_site: str


def _is_library(filename: str) -> bool:
    return str(Path(filename).resolve()).startswith(_LIBRARY_DIRS)


def _format_site(filename: str, line: int) -> str:
    relative = os.path.relpath(filename)
    return f"{filename if relative.startswith('..') else relative}:{line}"


def user_site(frame: FrameType | None) -> str:
    """ "file:line" of the innermost frame at or above `frame` outside torch and the engine."""
    for outer, line in traceback.walk_stack(frame):
        if not _is_library(outer.f_code.co_filename):
            return _format_site(outer.f_code.co_filename, line)
    return "?"


def user_site_of(error: BaseException) -> str | None:
    """ "file:line" of the innermost frame outside torch and the engine in `error`'s
    traceback (where the model's code was when it raised), or None."""
    sites = [
        _format_site(frame.f_code.co_filename, line)
        for frame, line in traceback.walk_tb(error.__traceback__)
        if not _is_library(frame.f_code.co_filename)
    ]
    return sites[-1] if sites else None


def op_name(func: Any) -> str:
    """Readable name of a torch callable (`torch.ops.ns.name.overload` for an op)."""
    if isinstance(func, torch._ops.OpOverload):
        return f"torch.ops.{func._schema.name.replace('::', '.')}.{func._overloadname}"
    if isinstance(func, torch._ops.OpOverloadPacket):
        return f"torch.ops.{func._qualified_op_name.replace('::', '.')}"
    return getattr(func, "__name__", repr(func))


_GLOBAL_SUM_MARKS = frozenset(adapter.op for adapter in GLOBAL_SUM_ADAPTERS)
"""Recorded wherever they are called: a spec without their adapters sums each rank's rows."""
_HANDLING = {
    CallKind.MARKED: Handling.MARKED,
    CallKind.ADAPTED: Handling.ADAPTER,
    CallKind.OPAQUE: Handling.UNKNOWN_OPAQUE,
    CallKind.INTO_NODES: Handling.AGGREGATION,
    CallKind.NODE_TO_SYSTEM: Handling.OWNED_SUM,
}


class RecordLog:
    """The records of every recorded forward, merged (thread-safe: one recorder per rank)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, str, Handling, bool]] = Counter()
        self._targets: dict[str, Any] = {}
        self.stale_read: StaleRead | None = None

    def add(self, func: Any, site: str, handling: Handling, writes: bool) -> None:
        """Count one call of `func` at `site`."""
        name = op_name(func)
        with self._lock:
            self._counts[(name, site, handling, writes)] += 1
            self._targets[name] = func

    def note_stale_read(self, read: StaleRead) -> None:
        """Keep the first stale read seen."""
        with self._lock:
            self.stale_read = self.stale_read or read

    def records(self) -> tuple[OpRecord, ...]:
        """Every (op, site, handling), in order of first call."""
        with self._lock:
            return tuple(
                OpRecord(op, site, handling, writes, calls, self._targets.get(op))
                for (op, site, handling, writes), calls in self._counts.items()
            )


class OpRecorder(TorchFunctionMode):
    """Record into `log` the calls on per-atom tensors (leading size `n_rows`) of one
    forward, each with the handling the interception's rules (`CallRules`) give it.

    With compile semantics (the refreshed result of an in-place aggregation is a new
    tensor), also note the first read of such an aggregation's old, stale tensor.
    """

    def __init__(self, n_rows: int, adapters: Sequence[OpAdapter], log: RecordLog) -> None:
        super().__init__()
        self.n_rows, self.log = n_rows, log
        self.rules = CallRules(functools.partial(has_rows, n_rows=n_rows), adapters)
        self._stale = StaleTargets()

    def _node_indexed(self, values: Any) -> bool:
        return any(has_rows(v, self.n_rows) for v in tree_leaves(values))

    def __torch_function__(
        self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        site = None
        # the bookkeeping's own tensor calls must not reach the engine's mode below this one
        with torch._C.DisableTorchFunction():
            stale = self._stale.find((args, kwargs)) if self._stale else None
            if stale is not None:
                site = user_site(sys._getframe(1))
                self.log.note_stale_read(StaleRead(*stale, op_name(func), site))
        result = func(*args, **kwargs)
        with torch._C.DisableTorchFunction():
            writes = self._node_indexed(result)
            if writes or func in _GLOBAL_SUM_MARKS or self._node_indexed((args, kwargs)):
                returns_tensor = any(isinstance(v, torch.Tensor) for v in tree_leaves(result))
                if returns_tensor or is_opaque(func):
                    site = site or user_site(sys._getframe(1))
                    self.log.add(func, site, self._handling(func, args, kwargs), writes)
                    self._stale.track(func, args, result, (op_name(func), site))
        return result

    def _handling(self, func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Handling:
        handling = _HANDLING.get(self.rules.classify(func, args, kwargs))
        if handling is not None:
            return handling
        if reduces_over_atoms(func, args, kwargs, self.n_rows):
            return Handling.ATOM_REDUCTION
        return Handling.PER_ROW

    def check_returned(self, outputs: Iterable[Any]) -> None:
        """Note a stale tensor among the forward's outputs."""
        stale = self._stale.find(list(outputs)) if self._stale else None
        if stale is not None:
            self.log.note_stale_read(StaleRead(*stale, "the forward's return", ""))


class RecordedModel(nn.Module, BaseModelMixin):
    """`model` with its forward recorded into `log`, distributed under `spec` instead of the
    spec the model declares."""

    def __init__(self, model: BaseModelMixin, spec: MLIPSpec, log: RecordLog) -> None:
        super().__init__()
        self.model = model
        self.model_config = model.model_config
        self.spec = spec
        self.log = log

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        """The model's forward, recorded."""
        recorder = OpRecorder(batch.num_nodes, self.spec.distribution.custom_ops, self.log)
        with recorder:
            out = self.model(batch)
        recorder.check_returned(out.values())
        return out

    def distribution_spec(self, strategy: StrategyKind | None = None) -> MLIPSpec:
        """The spec under validation."""
        return self.spec

    def prepare_for_compile(self) -> RecordedModel:
        """The model's compile-ready wrapper, recorded."""
        prepared = self.model.prepare_for_compile()
        return self if prepared is self.model else RecordedModel(prepared, self.spec, self.log)
