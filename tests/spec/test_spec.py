"""MLIPSpec: presets, versioned JSON round trips, clear errors."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from nvdd_plugins.models import SPEC_LJ_HALO
from nvdd_plugins.ops import (
    AllReduceSum,
    GatherInputs,
    HaloStoragePolicy,
    ScatterOutputs,
    SliceOwned,
)
from nvdd_plugins.spec import (
    SPEC_MPNN_HALO,
    DistributionSpec,
    JitAdapter,
    MethodAdapter,
    MLIPSpec,
    OpAdapter,
    OutputKind,
    PythonAdapter,
)


def replacement_scatter(*args, **kwargs):
    """A module-level replacement, so it has a qualified name."""
    return None


@pytest.mark.parametrize("spec", [SPEC_MPNN_HALO, SPEC_LJ_HALO])
def test_presets_round_trip(spec: MLIPSpec, tmp_path) -> None:
    path = tmp_path / "spec.json"
    spec.save(path)
    assert MLIPSpec.load(path) == spec


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
    assert loaded.distribution.third_party_helpers[0].resolved_replacement() is replacement_scatter
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
