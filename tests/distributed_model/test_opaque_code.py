"""Code the interception cannot see into: TorchScript helpers (JitAdapter), opaque custom ops
(OpAdapter, `scattered_onto_nodes`, or a warning naming the missing adapter), and compiled
in-place aggregations whose result is not rebound (an error naming the rule)."""

from __future__ import annotations

import logging
import time

import pytest
import torch

import tests.torture.zoo  # noqa: F401  (registers torch.ops.torture.edge_scatter)
from nvdd_plugins import Batch, DomainConfig, ReplicatedModel
from nvdd_plugins.comm import run_simulated
from nvdd_plugins.errors import DistributionRuleError
from nvdd_plugins.models import SimpleMPNN
from nvdd_plugins.models.mpnn import _Interaction
from nvdd_plugins.ops import HaloStoragePolicy, ScatterOutputs, scattered_onto_nodes
from nvdd_plugins.spec import (
    SPEC_MPNN_HALO,
    DistributionSpec,
    JitAdapter,
    MLIPSpec,
    OpAdapter,
)
from tests.helpers.oracle import errors, reference
from tests.helpers.systems import SYSTEMS, NotReboundInteraction


@torch.jit.script
def scripted_aggregate(h: torch.Tensor, index: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """A TorchScript aggregation: invisible to torch-function interception."""
    return torch.zeros_like(h).index_add(0, index, m)


def eager_aggregate(h: torch.Tensor, index: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """The eager twin a JitAdapter swaps in."""
    return torch.zeros_like(h).index_add(0, index, m)


@torch.library.custom_op("nvdd_tests::edge_sum", mutates_args=())
def edge_sum(h: torch.Tensor, index: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """An opaque aggregation kernel: sums edge messages `m` onto rows `index`."""
    return torch.zeros_like(h).index_add(0, index, m)


@edge_sum.register_fake
def _(h, index, m):
    return torch.empty_like(h)


def _edge_sum_context(ctx, inputs, output):
    ctx.save_for_backward(inputs[1])


def _edge_sum_backward(ctx, grad):
    (index,) = ctx.saved_tensors
    return None, None, grad.index_select(0, index)


edge_sum.register_autograd(_edge_sum_backward, setup_context=_edge_sum_context)


class _Through(_Interaction):
    """A layer aggregating through `aggregate(h, receivers, messages)`."""

    aggregate = staticmethod(eager_aggregate)

    def forward(self, h, radial, envelope, receivers, senders):
        weight = self.filter(radial) * envelope.unsqueeze(-1)
        messages = torch.nn.functional.silu(self.message(h[senders])) * weight
        aggregated = self.aggregate(h, receivers, messages)
        return h + torch.nn.functional.silu(self.update(torch.cat([h, aggregated], dim=-1)))


class _ScriptedLayer(_Through):
    def forward(self, h, radial, envelope, receivers, senders):
        # Looked up on the module at call time, where a JitAdapter patches it.
        self.aggregate = globals()["scripted_aggregate"]
        return super().forward(h, radial, envelope, receivers, senders)


class _OpLayer(_Through):
    aggregate = staticmethod(torch.ops.nvdd_tests.edge_sum)


def marked_edge_sum(h: torch.Tensor, index: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """The opaque kernel, its result marked as a node aggregation by the calling code."""
    return scattered_onto_nodes(torch.ops.nvdd_tests.edge_sum(h, index, m))


def fused_scatter(h: torch.Tensor, index: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """An opaque kernel that reads only per-edge tensors and writes per-atom rows."""
    return torch.ops.torture.edge_scatter.default(m, index, h.shape[0])


class _WriteOnlyOpLayer(_Through):
    aggregate = staticmethod(fused_scatter)


class _MarkedOpLayer(_Through):
    aggregate = staticmethod(marked_edge_sum)


def _mpnn(layer: type, spec: MLIPSpec) -> SimpleMPNN:
    model = SimpleMPNN(cutoff=4.5, hidden=16, n_layers=3, seed=7).double()
    for interaction in model.layers:
        interaction.__class__ = layer
    model.distribution_spec = lambda strategy=None: spec
    return model


def _spec(custom_ops=(), helpers=(), marked: bool = False) -> MLIPSpec:
    return MLIPSpec(
        distribution=DistributionSpec(
            policy=HaloStoragePolicy(),
            custom_ops=custom_ops,
            third_party_helpers=helpers,
            aggregations_marked=marked,
        ),
        output_kinds=SPEC_MPNN_HALO.output_kinds,
    )


def _worst_force_error(model, world_size: int, strict: bool = False, steps: int = 1) -> float:
    """Worst force error over `steps` evaluations of the same atoms (no rebuild after the
    first)."""
    atoms = SYSTEMS["bulk"]()
    ref = reference(model, atoms, ("energy", "forces"))

    def run(comm):
        config = DomainConfig(cutoff=model.cutoff, mesh=comm, strict=strict)
        distributed = ReplicatedModel(model, config)
        batch = Batch.from_atoms(atoms)
        return [distributed(batch, ("energy", "forces")) for _ in range(steps)]

    results = run_simulated(world_size, run, timeout=60)
    return max(errors(r, ref, len(atoms))["forces"] for rank in results for r in rank)


JIT_ADAPTER = JitAdapter(
    target="tests.distributed_model.test_opaque_code:scripted_aggregate",
    replacement="tests.distributed_model.test_opaque_code:eager_aggregate",
)


@pytest.mark.parametrize("world_size", [2, 3])
def test_jit_adapter_on_several_virtual_ranks(world_size: int) -> None:
    model = _mpnn(_ScriptedLayer, _spec(helpers=(JIT_ADAPTER,)))
    assert _worst_force_error(model, world_size) < 1e-10


def test_without_the_jit_adapter_the_scripted_helper_is_wrong() -> None:
    assert _worst_force_error(_mpnn(_ScriptedLayer, _spec()), 2) > 1e-4


def test_opaque_op_with_its_adapter_is_exact() -> None:
    adapter = OpAdapter(
        op=torch.ops.nvdd_tests.edge_sum.default, output_transforms={0: ScatterOutputs()}
    )
    assert _worst_force_error(_mpnn(_OpLayer, _spec(custom_ops=(adapter,))), 3) < 1e-10


def test_opaque_op_marked_by_its_caller_is_exact() -> None:
    per_row = OpAdapter(op=torch.ops.nvdd_tests.edge_sum.default)  # the mark does the scatter
    model = _mpnn(_MarkedOpLayer, _spec(custom_ops=(per_row,)))
    assert _worst_force_error(model, 3) < 1e-10
    assert _worst_force_error(_mpnn(_OpLayer, _spec(custom_ops=(per_row,))), 3) > 1e-4


def test_a_marked_model_claiming_so_is_exact_without_interception() -> None:
    per_row = OpAdapter(op=torch.ops.nvdd_tests.edge_sum.default)
    model = _mpnn(_MarkedOpLayer, _spec(custom_ops=(per_row,), marked=True))
    assert _worst_force_error(model, 3, steps=3) < 1e-10


def test_a_false_aggregations_marked_claim_is_refused() -> None:
    model = _mpnn(_Through, _spec(marked=True))  # its index_add is not marked
    with pytest.raises(RuntimeError, match="aggregations_marked"):
        _worst_force_error(model, 2)


def test_scattered_onto_nodes_is_the_identity_outside_a_distributed_forward() -> None:
    tensor = torch.arange(6.0).reshape(3, 2)
    assert scattered_onto_nodes(tensor) is tensor


def test_opaque_op_without_adapter_is_reported(caplog) -> None:
    model = _mpnn(_OpLayer, _spec())
    with caplog.at_level(logging.WARNING):
        assert _worst_force_error(model, 2) > 1e-4  # the warning is all that saves the user
    reports = [r.getMessage() for r in caplog.records if "nvdd_tests.edge_sum" in r.getMessage()]
    assert reports, "the unknown opaque op must be reported"
    assert "OpAdapter(op=torch.ops.nvdd_tests.edge_sum.default" in reports[0]
    assert "ScatterOutputs()" in reports[0]
    with pytest.raises(RuntimeError, match="no OpAdapter in the spec covers it"):
        _worst_force_error(model, 2, strict=True)


def test_opaque_op_that_only_writes_per_atom_rows_is_refused_when_strict() -> None:
    """Its inputs are per-edge messages and indices: only its output shows the op is
    per-atom."""
    model = _mpnn(_WriteOnlyOpLayer, _spec())
    with pytest.raises(RuntimeError, match=r"torture\.edge_scatter writes per-atom") as failure:
        _worst_force_error(model, 2, strict=True)
    suggested = "OpAdapter(op=torch.ops.torture.edge_scatter.default, output_transforms={0: "
    assert suggested + "ScatterOutputs()})" in str(failure.value)
    adapter = OpAdapter(
        op=torch.ops.torture.edge_scatter.default, output_transforms={0: ScatterOutputs()}
    )
    fixed = _mpnn(_WriteOnlyOpLayer, _spec(custom_ops=(adapter,)))
    assert _worst_force_error(fixed, 2, strict=True) < 1e-10


def test_compiled_run_refuses_a_scatter_that_is_not_rebound() -> None:
    model = _mpnn(NotReboundInteraction, SPEC_MPNN_HALO)
    atoms = SYSTEMS["bulk"]()

    def run(comm):
        config = DomainConfig(cutoff=model.cutoff, mesh=comm, compile=True)
        ReplicatedModel(model, config)(Batch.from_atoms(atoms))

    with pytest.raises(RuntimeError, match="rebind the result") as failure:
        run_simulated(2, run, timeout=60)
    assert isinstance(failure.value.__cause__, DistributionRuleError)


def test_a_simulated_rank_exception_surfaces_at_once() -> None:
    def run(comm):
        if comm.rank == 1:
            raise ValueError("rank 1 broke before sending")
        comm.exchange({}, {1: 3}, template=torch.empty(0, 3))  # waits for rank 1

    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"simulated rank 1 failed.*rank 1 broke") as failure:
        run_simulated(2, run, timeout=60)
    assert time.monotonic() - start < 5.0
    assert isinstance(failure.value.__cause__, ValueError)
