"""Qualified names for ops and Python objects, so specs can be saved and loaded."""

from __future__ import annotations

import importlib
from typing import Any

import torch

__all__ = ["qualified_name", "resolve_qualified_name"]


def qualified_name(obj: Any) -> str:
    """`ns::op.overload` for a torch op, `module:qualname` for a Python object."""
    if isinstance(obj, torch._ops.OpOverload):
        return f"{obj._schema.name}.{obj._overloadname}"
    if isinstance(obj, torch._ops.OpOverloadPacket):
        return obj._qualified_op_name
    if isinstance(obj, str):
        return obj
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if not module or not qualname or "<locals>" in qualname:
        raise ValueError(f"{obj!r} has no importable qualified name; define it at module level")
    return f"{module}:{qualname}"


def resolve_qualified_name(name: str) -> Any:
    """Inverse of `qualified_name`; imports the module that defines a Python object.

    A torch op must already be registered (import the package that defines it first).
    """
    if "::" in name:
        namespace, rest = name.split("::", 1)
        op_name, _, overload = rest.partition(".")
        try:
            packet = getattr(getattr(torch.ops, namespace), op_name)
            return getattr(packet, overload) if overload else packet
        except (AttributeError, RuntimeError) as err:
            raise ValueError(
                f"torch op {name!r} is not registered: import the package that defines it "
                "before loading the spec"
            ) from err
    module_name, sep, attr_path = name.partition(":")
    if not sep:
        raise ValueError(f"{name!r} is neither 'ns::op.overload' nor 'module:qualname'")
    obj: Any = importlib.import_module(module_name)
    for part in attr_path.split("."):
        obj = getattr(obj, part)
    return obj
