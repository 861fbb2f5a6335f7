"""`trace_and_validate` passes a model that follows the rules and, for each broken rule,
fails with the exact fix; a suggested adapter spec is verified to work."""

from __future__ import annotations

import dataclasses
import inspect
import threading

import pytest
import torch
from ase.build import bulk

from nvdd_plugins.config import StrategyKind
from nvdd_plugins.distributed_model.evaluation.context import HaloContext
from nvdd_plugins.spec import (
    GLOBAL_SUM_ADAPTERS,
    SPEC_MPNN_HALO,
    AllReduceSum,
    DistributionSpec,
    OpAdapter,
    ScatterOutputs,
    summed_over_ranks,
)
from nvdd_plugins.validate import Handling, trace_and_validate
from nvdd_plugins.validate.diagnose import GLOBAL_SUM, MINIMUM_IMAGE, PRE_SLICED, SENTINELS
from tests.helpers.ionic import PartialSumsOnly, nacl_model, triclinic_nacl
from tests.helpers.systems import NotReboundInteraction, PreSlicedMPNN
from tests.validate import defects


def _line_of(function, text: str) -> int:
    lines, first = inspect.getsourcelines(function)
    return first + next(k for k, line in enumerate(lines) if text in line)


def test_a_model_following_the_rules_is_ok() -> None:
    model = defects.mpnn()
    report = trace_and_validate(model)
    assert report.ok, report
    assert report.next_action is None and report.spec == model.distribution_spec()
    assert all(report.errors[k] <= report.tolerances[k] for k in report.tolerances)
    assert set(report.errors) == {"energy", "energies", "forces", "stress"}
    aggregations = {r.op for r in report.ops if r.handling is Handling.AGGREGATION}
    assert aggregations == {"index_add_", "scatter_add_"}
    assert any(r.handling is Handling.OWNED_SUM for r in report.ops)
    assert "OK (2 simulated rank(s), cpu, float64" in str(report)


def test_wrong_numbers_fail_the_comparison(monkeypatch) -> None:
    """Negative control: without halo refreshes the same model is not ok."""
    monkeypatch.setattr(HaloContext, "refresh", lambda self, x: x)
    monkeypatch.setattr(HaloContext, "refresh_", lambda self, x: x)
    report = trace_and_validate(defects.mpnn())
    assert not report.ok
    assert report.errors["forces"] > 1e3 * report.tolerances["forces"]
    assert "differ from the single-process run" in report.problem
    assert "too large" in str(report)


def test_pre_sliced_energies() -> None:
    report = trace_and_validate(defects.mpnn(cls=PreSlicedMPNN))
    assert not report.ok and report.next_action == PRE_SLICED
    assert report.spec is None


def test_unfiltered_sentinel_edges() -> None:
    report = trace_and_validate(defects.mpnn(cls=defects.NoSentinelFilter))
    assert not report.ok and report.next_action.startswith(SENTINELS)
    assert "mpnn.py:" in report.next_action  # where the model indexes with them


def test_a_scatter_not_rebound_under_compile() -> None:
    report = trace_and_validate(defects.not_rebound())
    assert not report.ok
    line = _line_of(NotReboundInteraction.forward, "index_add_")
    assert report.next_action.startswith(
        f"rebind the result of index_add_ at tests/helpers/systems.py:{line}"
    ), report.next_action
    assert report.errors["forces"] < report.tolerances["forces"]  # exact eagerly


def test_pair_vectors_without_minimum_image() -> None:
    report = trace_and_validate(defects.mpnn(cls=defects.NoMinimumImage))
    assert not report.ok and report.next_action == MINIMUM_IMAGE
    assert report.errors["forces"] > report.tolerances["forces"]


def _validated_fix(model: defects.WithSpec, expected_line: str) -> None:
    report = trace_and_validate(model)
    assert not report.ok and expected_line in report.next_action, report.next_action
    assert report.errors["forces"] > report.tolerances["forces"]
    model.spec = report.spec
    fixed = trace_and_validate(model)
    assert fixed.ok, fixed
    assert "float64" in fixed.setting  # a model holding a spec converts
    assert any(r.handling is Handling.ADAPTER for r in fixed.ops)


def test_an_opaque_aggregation_gets_scatter_outputs() -> None:
    model = defects.mpnn(defects.OpaqueAggregationLayer, cls=defects.WithSpec)
    op = "torch.ops.torture.edge_scatter.default"
    _validated_fix(model, f"OpAdapter(op={op}, output_transforms={{0: ScatterOutputs()}})")
    assert model.spec.distribution.custom_ops == (
        OpAdapter(
            op=torch.ops.torture.edge_scatter.default, output_transforms={0: ScatterOutputs()}
        ),
    )


def test_an_opaque_per_row_op_gets_a_plain_adapter() -> None:
    model = defects.mpnn(defects.OpaqueActivationLayer, cls=defects.WithSpec)
    report = trace_and_validate(model)
    assert not report.ok  # the numbers agree, but the op must be declared
    assert "add OpAdapter(op=torch.ops.validate_tests.silu_rows.default) " in report.next_action
    model.spec = report.spec
    assert trace_and_validate(model).ok


def test_an_undeclared_sum_over_atoms_is_named_with_the_all_reduce_fix() -> None:
    report = trace_and_validate(defects.mpnn(defects.GlobalSumLayer))
    assert not report.ok
    site = f"tests/validate/defects.py:{_line_of(defects.GlobalSumLayer.forward, '.sum(')}"
    assert report.next_action.startswith(f"make the sum over the atoms at {site} a sum over")
    assert report.next_action.endswith(GLOBAL_SUM)
    assert (Handling.ATOM_REDUCTION, site) in {(r.handling, r.site) for r in report.ops}
    assert site in str(report)
    # the fix it describes validates
    model = defects.mpnn(defects.SummedOverRanksLayer, cls=defects.WithSpec)
    adapter = OpAdapter(op=summed_over_ranks, output_transforms={0: AllReduceSum()})
    model.spec = dataclasses.replace(
        SPEC_MPNN_HALO, distribution=DistributionSpec(custom_ops=(adapter,))
    )
    fixed = trace_and_validate(model)
    assert fixed.ok, fixed
    assert not any(r.handling is Handling.ATOM_REDUCTION for r in fixed.ops)


def test_a_model_weighing_skin_pairs_is_told_its_claim_is_wrong() -> None:
    """Pairs beyond the cutoff weigh non-zero under accepts_skin_pairs=True: the report names
    the claim (checked with the pairs filtered), not the model's harmless sum over atoms."""
    report = trace_and_validate(defects.mpnn(defects.SkinWeightedLayer))
    assert not report.ok
    assert "declares NeighborConfig(accepts_skin_pairs=True)" in report.problem
    assert report.next_action.startswith("set NeighborConfig(accepts_skin_pairs=False)")
    assert "sum" not in report.next_action
    # control: the same weights with the default declaration validate
    fixed = trace_and_validate(defects.without_skin_pairs(defects.mpnn(defects.SkinWeightedLayer)))
    assert fixed.ok, fixed


def test_a_model_without_an_energy_output_is_validated() -> None:
    report = trace_and_validate(defects.mpnn(cls=defects.EnergiesOnly))
    assert report.ok, report
    assert report.errors["energy"] <= report.tolerances["energy"]


def test_a_model_without_spec_is_not_ok() -> None:
    model = defects.mpnn()
    model.distribution_spec = lambda strategy=None: None
    report = trace_and_validate(model)
    assert not report.ok and "SPEC_MPNN_HALO" in report.next_action


def test_a_halo_spec_under_graph_partition_gets_the_policy_fix() -> None:
    model = defects.mpnn(cls=defects.WithSpec)
    model.spec = SPEC_MPNN_HALO  # for any strategy
    report = trace_and_validate(model, strategy=StrategyKind.GRAPH_PARTITION)
    assert not report.ok and "GraphParallelPolicy" in report.next_action


def test_graph_partition_is_validated_eagerly() -> None:
    report = trace_and_validate(defects.mpnn(), strategy=StrategyKind.GRAPH_PARTITION)
    assert report.ok, report
    assert any("graph partition runs eagerly" in note for note in report.notes)


def test_a_model_that_cannot_be_copied_is_validated_in_its_own_precision() -> None:
    model = defects.mpnn()
    model.lock = threading.Lock()  # deepcopy fails
    report = trace_and_validate(model)
    assert report.ok and "float32" in report.setting
    assert any("float64 copy failed" in note for note in report.notes)


def test_marked_aggregations_and_adapters_are_recorded_as_handled() -> None:
    model = defects.mpnn(defects.MarkedAggregationLayer, cls=defects.WithSpec)
    model.spec = dataclasses.replace(
        SPEC_MPNN_HALO,
        distribution=DistributionSpec(
            custom_ops=(OpAdapter(op=torch.ops.torture.edge_scatter.default),)
        ),
    )
    report = trace_and_validate(model)
    assert report.ok, report
    aggregate = defects.MarkedAggregationLayer.aggregate
    marked = f"tests/validate/defects.py:{_line_of(aggregate, 'scattered_onto_nodes(')}"
    adapted = f"tests/validate/defects.py:{_line_of(aggregate, 'edge_scatter')}"
    handled = {(r.handling, r.site) for r in report.ops}
    assert {(Handling.MARKED, marked), (Handling.ADAPTER, adapted)} <= handled


@pytest.mark.parametrize("method", ["ewald", "pme"])
def test_global_sums_without_their_adapters_get_global_sum_adapters(method: str) -> None:
    atoms = triclinic_nacl()
    report = trace_and_validate(nacl_model(method, atoms, PartialSumsOnly), atoms)
    assert not report.ok
    assert "summed_over_ranks" in report.problem, report.problem
    assert "add GLOBAL_SUM_ADAPTERS" in report.next_action, report.next_action
    assert all(a in report.spec.distribution.custom_ops for a in GLOBAL_SUM_ADAPTERS)
    assert trace_and_validate(nacl_model(method, atoms), atoms).ok


def test_compile_is_not_checked_where_it_cannot_run() -> None:
    """The reasons are the engine's own compile preconditions (`require_compilable`)."""
    # widths 9.6 Å: above the MPNN's 2 x cutoff, below 2 x (cutoff + skin) = 10 Å
    narrow = bulk("Ar", "fcc", a=4.8, cubic=True).repeat(2)
    report = trace_and_validate(defects.mpnn(), sample=narrow)
    assert report.ok, report
    assert any("lower the skin or run without compile" in note for note in report.notes)
