"""Adapters: declare how an op or helper the framework cannot see through distributes.

`OpAdapter` goes in `DistributionSpec.custom_ops`; `MethodAdapter`, `PythonAdapter` and
`JitAdapter` go in `DistributionSpec.third_party_helpers`. All are plain frozen values.
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


def _frozen_transforms(transforms: Mapping[int, Transform]) -> Mapping[int, Transform]:
    for index, transform in transforms.items():
        if not isinstance(index, int) or index < 0:
            raise ValueError(f"transform keys are argument/output positions >= 0, got {index!r}")
        if not isinstance(transform, Transform):
            raise TypeError(f"position {index}: expected a Transform, got {transform!r}")
    return MappingProxyType(dict(transforms))


@dataclass(frozen=True)
class OpAdapter:
    """Distribution of one opaque op (a custom kernel or a fused torch op).

    Args:
        op: the op as called by the model (`torch.ops.ns.name.default`, the packet, or a
            Python callable that is dispatched through torch functions).
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

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; the op is saved by its qualified name."""
        return {
            "type": "OpAdapter",
            "op": qualified_name(self.op),
            "arg_transforms": {str(k): v.name for k, v in self.arg_transforms.items()},
            "output_transforms": {str(k): v.name for k, v in self.output_transforms.items()},
        }


@dataclass(frozen=True)
class _Replacement:
    """Swap `target` ("module:qualname") for `replacement` while a distributed forward runs."""

    target: str
    replacement: Callable[..., Any] | str

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


@dataclass(frozen=True)
class MethodAdapter(_Replacement):
    """Replace a third-party class method, e.g. target="pkg.mod:Block.forward"."""


@dataclass(frozen=True)
class PythonAdapter(_Replacement):
    """Replace a module-level Python helper, e.g. target="pkg.mod:scatter_sum"."""


@dataclass(frozen=True)
class JitAdapter(_Replacement):
    """Replace a TorchScript helper (a `torch.jit.ScriptFunction`) by an eager equivalent."""


Adapter = OpAdapter | MethodAdapter | PythonAdapter | JitAdapter


def adapter_from_dict(data: Mapping[str, Any]) -> Adapter:
    """Inverse of the adapters' `to_dict`."""
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
    return classes[kind](target=data["target"], replacement=data["replacement"])
