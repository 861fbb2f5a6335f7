"""MLIPSpec: presets, versioned JSON round trips, clear errors."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from nvdd_plugins.config import StrategyKind
from nvdd_plugins.models import RadiusGraphMPNN, SimpleMPNN
from nvdd_plugins.models.aimnet2 import aimnet2_spec
from nvdd_plugins.models.mace import mace_spec
from nvdd_plugins.models.sevennet import sevennet_spec
from nvdd_plugins.ops import (
    AllReduceSum,
    GatherInputs,
    HaloStoragePolicy,
    ScatterOutputs,
    SliceOwned,
)
from nvdd_plugins.spec import (
    SPEC_LJ_HALO,
    SPEC_MPNN_GRAPH,
    SPEC_MPNN_HALO,
    DistributionSpec,
    JitAdapter,
    MethodAdapter,
    MLIPSpec,
    OpAdapter,
    OutputKind,
    PythonAdapter,
    for_strategy,
)
from tests.helpers.systems import lj_model


def replacement_scatter(*args, **kwargs):
    """A module-level replacement, so it has a qualified name."""
    return None


@pytest.mark.parametrize("spec", [SPEC_MPNN_HALO, SPEC_LJ_HALO, SPEC_MPNN_GRAPH])
def test_presets_round_trip(spec: MLIPSpec, tmp_path) -> None:
    path = tmp_path / "spec.json"
    spec.save(path)
    assert MLIPSpec.load(path) == spec


def test_presets_import_from_spec_and_from_models() -> None:
    import nvdd_plugins.models
    import nvdd_plugins.spec

    assert nvdd_plugins.models.SPEC_LJ_HALO is nvdd_plugins.spec.SPEC_LJ_HALO
    adapter = SPEC_LJ_HALO.distribution.custom_ops[0]
    assert adapter.resolved_op() is torch.ops.nvdd.lennard_jones.default


def _cueq_spec(strategy: StrategyKind) -> MLIPSpec:
    pytest.importorskip("cuequivariance_torch")
    from nvdd_plugins.models.cueq import cueq_mace_spec

    return for_strategy(cueq_mace_spec(n_layers=2), strategy)


# each wrapper's distribution_spec (built from the spec functions where a model is slow to
# build: MACEWrapper returns for_strategy(mace_spec(n_layers=interactions), strategy))
SHIPPED_SPECS = {
    "lj": lambda strategy: lj_model().distribution_spec(strategy),
    "mpnn": lambda strategy: SimpleMPNN(hidden=4, n_layers=2).distribution_spec(strategy),
    "radius_graph": lambda strategy: RadiusGraphMPNN().distribution_spec(strategy),
    "mace": lambda strategy: for_strategy(mace_spec(n_layers=2), strategy),
    "mace_cueq": _cueq_spec,
    "aimnet2": aimnet2_spec,
    "sevennet": lambda strategy: for_strategy(sevennet_spec(n_layers=2), strategy),
}


@pytest.mark.parametrize("strategy", list(StrategyKind))
@pytest.mark.parametrize("wrapper", sorted(SHIPPED_SPECS))
def test_every_shipped_wrappers_spec_round_trips(wrapper, strategy, tmp_path) -> None:
    spec = SHIPPED_SPECS[wrapper](strategy)
    if spec is None:
        pytest.skip(f"{wrapper} does not run under {strategy}")
    path = tmp_path / "spec.json"
    spec.save(path)
    loaded = MLIPSpec.load(path)
    assert loaded == spec
    for mine, theirs in zip(
        spec.distribution.third_party_helpers, loaded.distribution.third_party_helpers, strict=True
    ):
        assert theirs.resolved_replacement() is mine.resolved_replacement()
    for mine, theirs in zip(
        spec.distribution.custom_ops, loaded.distribution.custom_ops, strict=True
    ):
        assert theirs.resolved_op() is mine.resolved_op()


def test_adapters_compare_by_what_they_name() -> None:
    by_object = PythonAdapter(target="torch.nn.functional:silu", replacement=replacement_scatter)
    by_name = PythonAdapter(
        target="torch.nn.functional:silu", replacement="tests.spec.test_spec:replacement_scatter"
    )
    assert by_object == by_name and hash(by_object) == hash(by_name)
    assert by_object != MethodAdapter(target=by_object.target, replacement=replacement_scatter)
    assert by_object != PythonAdapter(target="torch:tanh", replacement=replacement_scatter)
    op = OpAdapter(op=torch.ops.nvdd.lennard_jones.default, output_transforms={0: SliceOwned()})
    assert op == OpAdapter(op="nvdd::lennard_jones.default", output_transforms={0: SliceOwned()})
    assert op != OpAdapter(op="nvdd::lennard_jones.default", output_transforms={1: SliceOwned()})
    assert (
        len({op, OpAdapter(op="nvdd::lennard_jones.default", output_transforms={0: SliceOwned()})})
        == 1
    )


def test_every_field_round_trips(tmp_path) -> None:
    spec = MLIPSpec(
        distribution=DistributionSpec(
            policy=HaloStoragePolicy(),
            custom_ops=(
                OpAdapter(
                    op=torch.ops.nvdd.lennard_jones.default,
                    arg_transforms={0: GatherInputs()},
                    output_transforms={0: ScatterOutputs(), 1: SliceOwned(), 2: AllReduceSum()},
                ),
            ),
            third_party_helpers=(
                MethodAdapter(target="torch.nn:Linear.forward", replacement=replacement_scatter),
                PythonAdapter(target="torch.nn.functional:silu", replacement=replacement_scatter),
                JitAdapter(
                    target="some.module:scripted",
                    replacement="tests.spec.test_spec:replacement_scatter",
                ),
            ),
        ),
        output_kinds={
            "energies": OutputKind.PER_NODE,
            "energy": OutputKind.PER_GRAPH,
            "forces": OutputKind.PER_NODE,
            "charge": OutputKind.GLOBAL,
        },
        gradient_outputs=frozenset({"forces"}),
    )
    path = tmp_path / "spec.json"
    spec.save(path)
    loaded = MLIPSpec.load(path)
    assert loaded.to_dict() == spec.to_dict()
    assert loaded.distribution.custom_ops[0].op is torch.ops.nvdd.lennard_jones.default
    for helper in loaded.distribution.third_party_helpers:  # the function, not its name
        assert helper.replacement is replacement_scatter
    assert json.loads(path.read_text())["version"] == 1


def test_newer_versions_and_unknown_ops_are_refused(tmp_path) -> None:
    data = SPEC_LJ_HALO.to_dict()
    with pytest.raises(ValueError, match="newer"):
        MLIPSpec.from_dict({**data, "version": 99})
    with pytest.raises(ValueError, match="not an MLIPSpec"):
        MLIPSpec.from_dict({**data, "format": "other"})
    data["distribution"]["custom_ops"][0]["op"] = "nowhere::missing.default"
    with pytest.raises(ValueError, match="not registered"):
        MLIPSpec.from_dict(data)


def test_gradient_outputs_must_be_per_node() -> None:
    with pytest.raises(ValueError, match="PER_NODE"):
        MLIPSpec(output_kinds={"forces": OutputKind.PER_GRAPH}, gradient_outputs={"forces"})


def test_gradient_outputs_need_op_interception() -> None:
    with pytest.raises(ValueError, match="aggregations_marked"):
        MLIPSpec(
            distribution=DistributionSpec(aggregations_marked=True),
            output_kinds={"forces": OutputKind.PER_NODE},
            gradient_outputs={"forces"},
        )


def test_local_functions_cannot_be_saved() -> None:
    def local(x):
        return x

    spec = MLIPSpec(
        distribution=DistributionSpec(
            third_party_helpers=(PythonAdapter(target="a.b:c", replacement=local),)
        )
    )
    with pytest.raises(ValueError, match="module level"):
        spec.to_dict()


def test_each_output_kind_carries_the_transform_that_consolidates_it() -> None:
    assert OutputKind.PER_NODE.collective == SliceOwned()
    assert OutputKind.PER_GRAPH.collective == AllReduceSum()
    assert OutputKind.GLOBAL.collective is None
    assert OutputKind("per_graph") is OutputKind.PER_GRAPH and OutputKind.PER_NODE == "per_node"


def test_a_model_holding_a_spec_deep_copies() -> None:
    """Specs and adapters are immutable: a deep copy of a model holding one shares it."""
    adapter = OpAdapter(
        op=torch.ops.aten.index_add.default, output_transforms={0: ScatterOutputs()}
    )
    spec = MLIPSpec(distribution=DistributionSpec(custom_ops=(adapter,)))
    holder = torch.nn.Module()
    holder.spec = spec
    copied = copy.deepcopy(holder)
    assert copied is not holder and copied.spec is spec
    assert copy.deepcopy(adapter) is adapter
