"""One table of call rules: what the halo interception does with a call (refresh the ghost
rows, keep the owned rows, nothing) is what the validator's recorder reports for it, over
representative calls, and a rule added to the table is seen by both."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import torch
from torch.overrides import handle_torch_function, has_torch_function

import tests.torture.zoo  # noqa: F401  (registers torch.ops.torture.edge_scatter)
from nvdd_plugins.distributed_model.evaluation import call_rules
from nvdd_plugins.distributed_model.evaluation.interception import HaloInterceptionMode
from nvdd_plugins.spec import OpAdapter, ScatterOutputs, scattered_onto_nodes
from nvdd_plugins.validate import Handling
from nvdd_plugins.validate.recording import OpRecorder, RecordLog, op_name

N_ROWS, N_EDGES, N_SYSTEMS = 7, 11, 2


@dataclass
class _Layout:
    """A stand-in for `HaloContext` that records what the interception asked of it."""

    n_rows: int = N_ROWS
    in_place: bool = True
    exchanges: bool = True
    actions: list[str] = field(default_factory=list)

    def is_node_indexed(self, tensor: object) -> bool:
        return call_rules.has_rows(tensor, self.n_rows)

    def refresh(self, tensor: torch.Tensor) -> torch.Tensor:
        self.actions.append("refresh")
        return tensor.clone()

    def refresh_(self, tensor: torch.Tensor) -> torch.Tensor:
        self.actions.append("refresh")
        return tensor

    def refresh_rows(self, tensor: torch.Tensor) -> torch.Tensor:
        return self.refresh(tensor) if self.is_node_indexed(tensor) else tensor

    def mask_unowned(self, tensor: torch.Tensor) -> torch.Tensor:
        self.actions.append("keep owned")
        return tensor


def add_rows(target: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor):
    """A Python aggregation the table does not know (until a test adds it)."""
    if has_torch_function((target, index, source)):
        return handle_torch_function(add_rows, (target, index, source), target, dim, index, source)
    return target.index_add(dim, index, source)


_ADAPTED = torch.ops.torture.edge_scatter.default
ADAPTERS = (OpAdapter(op=_ADAPTED, output_transforms={0: ScatterOutputs()}),)


def _tensors() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return {
        "x": torch.randn(N_ROWS, 3, generator=generator, dtype=torch.float64),
        "edges": torch.randn(N_EDGES, 3, generator=generator, dtype=torch.float64),
        "receivers": torch.randint(0, N_ROWS, (N_EDGES,), generator=generator),
        "systems": torch.tensor([0] * 4 + [1] * (N_ROWS - 4)),
    }


# name: (the call, the op recorded for it, what the interception does, what the recorder says)
CASES: dict[str, tuple[Callable[[dict], object], object, str, Handling]] = {
    "index_add_ onto atoms": (
        lambda t: torch.zeros(N_ROWS, 3, dtype=torch.float64).index_add_(
            0, t["receivers"], t["edges"]
        ),
        torch.Tensor.index_add_,
        "refresh",
        Handling.AGGREGATION,
    ),
    "scatter_add onto atoms": (
        lambda t: torch.scatter_add(
            torch.zeros(N_ROWS, 3, dtype=torch.float64),
            0,
            t["receivers"][:, None].expand(-1, 3),
            t["edges"],
        ),
        torch.scatter_add,
        "refresh",
        Handling.AGGREGATION,
    ),
    "index_add along a feature axis": (
        lambda t: t["x"].index_add(1, torch.tensor([0, 0]), t["x"][:, :2]),
        torch.Tensor.index_add,
        "nothing",
        Handling.PER_ROW,
    ),
    "index_add atoms -> systems": (
        lambda t: torch.zeros(N_SYSTEMS, 3, dtype=torch.float64).index_add(0, t["systems"], t["x"]),
        torch.Tensor.index_add,
        "keep owned",
        Handling.OWNED_SUM,
    ),
    "index_put_ accumulate atoms -> systems": (
        lambda t: torch.zeros(N_SYSTEMS, 3, dtype=torch.float64).index_put_(
            (t["systems"],), t["x"], accumulate=True
        ),
        torch.Tensor.index_put_,
        "keep owned",
        Handling.OWNED_SUM,
    ),
    "scattered_onto_nodes": (
        lambda t: scattered_onto_nodes(t["x"] * 2.0),
        scattered_onto_nodes,
        "refresh",
        Handling.MARKED,
    ),
    "adapted opaque op": (
        lambda t: _ADAPTED(t["edges"], t["receivers"], N_ROWS),
        _ADAPTED,
        "refresh",
        Handling.ADAPTER,
    ),
    "opaque op without adapter": (
        lambda t: torch.ops.torture.edge_scatter.default(t["x"], torch.arange(N_ROWS), N_ROWS),
        "unadapted",
        "nothing",
        Handling.UNKNOWN_OPAQUE,
    ),
    "sum over atoms": (
        lambda t: t["x"].sum(dim=0),
        torch.Tensor.sum,
        "nothing",
        Handling.ATOM_REDUCTION,
    ),
    "gather": (
        lambda t: t["x"][t["receivers"]],
        torch.Tensor.__getitem__,
        "nothing",
        Handling.PER_ROW,
    ),
}


def _intercepted(call: Callable[[dict], object], adapters=ADAPTERS) -> list[str]:
    layout = _Layout()
    with HaloInterceptionMode(layout, adapters):
        call(_tensors())
    return layout.actions or ["nothing"]


def _recorded(call: Callable[[dict], object], op: object, adapters=ADAPTERS) -> set[Handling]:
    log = RecordLog()
    with OpRecorder(N_ROWS, adapters, log):
        call(_tensors())
    return {record.handling for record in log.records() if record.op == op_name(op)}


@pytest.mark.parametrize("name", CASES)
def test_the_recorder_reports_what_the_interception_does(name: str) -> None:
    call, op, action, handling = CASES[name]
    adapters = ADAPTERS
    if op == "unadapted":
        op, adapters = torch.ops.torture.edge_scatter.default, ()
    assert _intercepted(call, adapters) == [action]
    assert _recorded(call, op, adapters) == {handling}


def test_a_rule_added_to_the_table_is_seen_by_both_modes(monkeypatch) -> None:
    def onto_atoms(t):
        return add_rows(torch.zeros(N_ROWS, 3, dtype=torch.float64), 0, t["receivers"], t["edges"])

    def onto_systems(t):
        return add_rows(torch.zeros(N_SYSTEMS, 3, dtype=torch.float64), 0, t["systems"], t["x"])

    assert _intercepted(onto_atoms) == ["nothing"]
    assert _recorded(onto_atoms, add_rows) == {Handling.PER_ROW}
    rule = call_rules.Aggregation((3, "source"), False, add_rows, "sum")
    monkeypatch.setitem(call_rules.AGGREGATIONS, add_rows, rule)
    assert _intercepted(onto_atoms) == ["refresh"]
    assert _recorded(onto_atoms, add_rows) == {Handling.AGGREGATION}
    assert _intercepted(onto_systems) == ["keep owned"]
    assert _recorded(onto_systems, add_rows) == {Handling.OWNED_SUM}
