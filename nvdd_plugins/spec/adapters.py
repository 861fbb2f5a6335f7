"""Adapters: declare how an op or helper the framework cannot see through distributes.

`OpAdapter` goes in `DistributionSpec.custom_ops`; `MethodAdapter`, `PythonAdapter` and
`JitAdapter` go in `DistributionSpec.third_party_helpers`. All are plain frozen values. An op
or a callable may be given as itself or by its qualified name (resolved when the adapter is
applied); two adapters are equal when they name the same op or callable, so a spec equals
itself after `MLIPSpec.save` and `load`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from nvdd_plugins.spec.naming import qualified_name, resolve_qualified_name
from nvdd_plugins.spec.transforms import Transform, transform_from_name

__all__ = [
    "Adapter",
    "JitAdapter",
    "MethodAdapter",
    "OpAdapter",
    "PythonAdapter",
    "adapter_from_dict",
]


def _named(obj: Any) -> Any:
    """What an adapter compares by: the qualified name of an op or a callable (the object
    itself when it has none, e.g. a local function)."""
    try:
        return qualified_name(obj)
    except ValueError:
        return obj


def _frozen_transforms(transforms: Mapping[int, Transform]) -> Mapping[int, Transform]:
    for index, transform in transforms.items():
        if not isinstance(index, int) or index < 0:
            raise ValueError(f"transform keys are argument/output positions >= 0, got {index!r}")
        if not isinstance(transform, Transform):
            raise TypeError(f"position {index}: expected a Transform, got {transform!r}")
    return MappingProxyType(dict(transforms))


@dataclass(frozen=True, eq=False)
class OpAdapter:
    """Distribution of one opaque op (a custom kernel or a fused torch op).

    Args:
        op: the op as called by the model (`torch.ops.ns.name.default`, the packet, or a
            Python callable that is dispatched through torch functions), or its qualified
            name ("ns::name.default", "module:function").
        arg_transforms: positional argument index -> transform applied before the call.
        output_transforms: output index (0 for a single tensor) -> transform applied after.
    """

    op: Any
    arg_transforms: Mapping[int, Transform] = field(default_factory=dict)
    output_transforms: Mapping[int, Transform] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "arg_transforms", _frozen_transforms(self.arg_transforms))
        object.__setattr__(self, "output_transforms", _frozen_transforms(self.output_transforms))

    def __deepcopy__(self, memo: dict[int, Any]) -> OpAdapter:
        """The adapter itself: it is immutable (and may hold an op, which cannot be copied)."""
        return self

    def _key(self) -> tuple[Any, ...]:
        return (
            _named(self.op),
            tuple(sorted(self.arg_transforms.items(), key=lambda item: item[0])),
            tuple(sorted(self.output_transforms.items(), key=lambda item: item[0])),
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OpAdapter) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def resolved_op(self) -> Any:
        """The op (looked up when given by name; a torch op must be registered by then)."""
        return resolve_qualified_name(self.op) if isinstance(self.op, str) else self.op

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; the op is saved by its qualified name."""
        return {
            "type": "OpAdapter",
            "op": qualified_name(self.op),
            "arg_transforms": {str(k): v.name for k, v in self.arg_transforms.items()},
            "output_transforms": {str(k): v.name for k, v in self.output_transforms.items()},
        }


@dataclass(frozen=True, eq=False)
class _Replacement:
    """Swap `target` ("module:qualname") for `replacement` (a callable or its qualified
    name) while a distributed forward runs."""

    target: str
    replacement: Callable[..., Any] | str

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return False
        mine, theirs = (
            (self.target, _named(self.replacement)),
            (other.target, _named(other.replacement)),
        )
        return mine == theirs

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.target, _named(self.replacement)))

    def resolved_replacement(self) -> Callable[..., Any]:
        """The replacement callable (imported when given by name)."""
        if isinstance(self.replacement, str):
            return resolve_qualified_name(self.replacement)
        return self.replacement

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; callables are saved by qualified name."""
        return {
            "type": type(self).__name__,
            "target": self.target,
            "replacement": qualified_name(self.replacement),
        }


@dataclass(frozen=True, eq=False)
class MethodAdapter(_Replacement):
    """Replace a third-party class method, e.g. target="pkg.mod:Block.forward"."""


@dataclass(frozen=True, eq=False)
class PythonAdapter(_Replacement):
    """Replace a module-level Python helper, e.g. target="pkg.mod:scatter_sum"."""


@dataclass(frozen=True, eq=False)
class JitAdapter(_Replacement):
    """Replace a TorchScript helper (a `torch.jit.ScriptFunction`) by an eager equivalent."""


Adapter = OpAdapter | MethodAdapter | PythonAdapter | JitAdapter


def adapter_from_dict(data: Mapping[str, Any]) -> Adapter:
    """Inverse of the adapters' `to_dict`: ops and replacements are imported (the target of
    a replacement stays its name: it is looked up when a forward runs)."""
    kind = data.get("type")
    if kind == "OpAdapter":
        return OpAdapter(
            op=resolve_qualified_name(data["op"]),
            arg_transforms={
                int(k): transform_from_name(v) for k, v in data["arg_transforms"].items()
            },
            output_transforms={
                int(k): transform_from_name(v) for k, v in data["output_transforms"].items()
            },
        )
    classes = {cls.__name__: cls for cls in (MethodAdapter, PythonAdapter, JitAdapter)}
    if kind not in classes:
        raise ValueError(f"unknown adapter type {kind!r}")
    # the replacement is the function itself again, as the op of an OpAdapter is
    replacement = resolve_qualified_name(data["replacement"])
    return classes[kind](target=data["target"], replacement=replacement)
