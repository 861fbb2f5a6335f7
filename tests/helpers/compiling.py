"""`torch.compile` as dynamo's graph capture alone, for tests of what nvdd decides when it
compiles (the graph, its breaks, its guards, the recompiles) without Inductor's code
generation, which takes minutes per model on two cores."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def dynamo_only_compile(compile_: Callable[..., Any]) -> Callable[..., Any]:
    """`compile_` with backend "eager" (dynamo's capture, no code generation), fullgraph
    as asked."""
    return lambda fn, **kw: compile_(fn, backend="eager", fullgraph=kw.get("fullgraph", False))
