"""The spec's marks (`scattered_onto_nodes`, `owned_part`, `summed_over_ranks`) reach the
interception mode in code torch.compile traces, which hides a mode entered inside the traced
code from torch's dispatch; without `handling_marks` they would pass as the identity
(negative control)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.overrides import TorchFunctionMode

from nvdd_plugins.spec import handling_marks, owned_part, scattered_onto_nodes, summed_over_ranks

MARKS = {scattered_onto_nodes: 2.0, owned_part: 3.0, summed_over_ranks: 5.0}


class _Scaling(TorchFunctionMode):
    """Scales each mark's tensor by its own factor; every other call as it is."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):
        if func in MARKS:
            return torch.mul(args[0], MARKS[func])
        return func(*args, **(kwargs or {}))


def _forward(x: torch.Tensor, handled: bool) -> torch.Tensor:
    mode = _Scaling()
    with mode, handling_marks(mode if handled else None):
        return scattered_onto_nodes(x) + owned_part(x + 1) + summed_over_ranks(x * 2)


@pytest.mark.parametrize("handled", [True, False])
def test_marks_reach_the_mode_in_compiled_code(handled: bool) -> None:
    x = torch.arange(4.0)
    eager = _forward(x, handled)
    assert torch.equal(eager, 2 * x + 3 * (x + 1) + 5 * (2 * x))
    compiled = torch.compile(_forward, backend="eager", fullgraph=True)(x, handled)
    assert torch.equal(compiled, eager) is handled
