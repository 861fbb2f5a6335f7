"""Transforms: what to do to one argument or output of an adapted op (declarative only).

The vocabulary is deliberately tiny. How each transform is carried out lives in the
`distributed_model` layer; here they are plain values that serialise by name.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "AllReduceSum",
    "GatherInputs",
    "ScatterOutputs",
    "SliceOwned",
    "Transform",
    "transform_from_name",
]


@dataclass(frozen=True)
class Transform:
    """Base of all transforms; `name` is the serialised form."""

    @property
    def name(self) -> str:
        """Stable name used by `MLIPSpec.save`."""
        return type(self).__name__


@dataclass(frozen=True)
class ScatterOutputs(Transform):
    """The tensor is node-indexed and complete on owned rows: overwrite ghost rows with
    their owners' rows (halo mode) — the correction every node-indexed scatter needs."""


@dataclass(frozen=True)
class GatherInputs(Transform):
    """The op reads node rows it does not own: make them current before the call
    (halo mode: refresh ghost rows from owners; graph partition: all-gather the shards)."""


@dataclass(frozen=True)
class SliceOwned(Transform):
    """Keep only the rows this rank owns (the first `n_owned` rows)."""


@dataclass(frozen=True)
class AllReduceSum(Transform):
    """The value is a per-rank partial of a replicated quantity: sum it over all ranks."""


_BY_NAME = {cls.__name__: cls for cls in (ScatterOutputs, GatherInputs, SliceOwned, AllReduceSum)}


def transform_from_name(name: str) -> Transform:
    """Inverse of `Transform.name`."""
    try:
        return _BY_NAME[name]()
    except KeyError:
        raise ValueError(f"unknown transform {name!r}; known: {sorted(_BY_NAME)}") from None
