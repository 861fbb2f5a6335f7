"""SumModel in one process: the sum of its parts, each on the pairs within its own cutoff,
and the union of their specs."""

from __future__ import annotations

import pytest
import torch

from nvdd_plugins import Batch
from nvdd_plugins.models import SumModel, evaluate_model, spec_union
from nvdd_plugins.spec import GLOBAL_SUM_ADAPTERS, DistributionSpec, MLIPSpec, OutputKind
from tests.helpers.oracle import properties_for
from tests.helpers.systems import SYSTEMS, ShiftPairModel, lj_model, mpnn_model


def _parts() -> list:
    """An MPNN (cutoff 4.5 Å) and a pair potential with a longer cutoff (7 Å)."""
    return [mpnn_model(), ShiftPairModel(7.0)]


@pytest.mark.parametrize("system", ["bulk", "slab", "cluster"])
def test_a_sum_model_is_the_sum_of_its_parts(system: str) -> None:
    atoms = SYSTEMS[system]()
    properties = properties_for(atoms)
    parts = _parts()
    total = evaluate_model(SumModel(*parts), Batch.from_atoms(atoms), properties)
    alone = [evaluate_model(part, Batch.from_atoms(atoms), properties) for part in parts]
    for name in properties:
        expected = sum(result[name] for result in alone)
        assert float((total[name] - expected).abs().max()) < 1e-12, name
    assert float((alone[1]["energies"]).abs().max()) > 1e-4  # both parts contribute


def test_the_cutoff_and_spec_are_the_widest_and_the_union() -> None:
    model = SumModel(*_parts())
    assert model.cutoff == 7.0
    assert model.distribution_spec().n_layers is None  # the MPNN declares none
    a = MLIPSpec(n_layers=2, output_kinds={"charges": OutputKind.PER_NODE})
    b = MLIPSpec(n_layers=1, distribution=DistributionSpec(custom_ops=GLOBAL_SUM_ADAPTERS))
    union = spec_union([a, b], [4.0, 10.0])
    assert union.n_layers == 1 and union.output_kinds["charges"] is OutputKind.PER_NODE
    assert union.distribution.custom_ops == GLOBAL_SUM_ADAPTERS
    assert spec_union([a, b], [6.0, 10.0]).n_layers == 2  # 2 x 6 Å reach more than 10 Å
    with pytest.raises(ValueError, match="declare output 'charges'"):
        spec_union([a, MLIPSpec(output_kinds={"charges": OutputKind.PER_GRAPH})], [1.0, 1.0])


def test_parts_that_cannot_be_summed_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one"):
        SumModel()
    with pytest.raises(ValueError, match="not an nvdd model"):
        SumModel(torch.nn.Linear(1, 1))
    with pytest.raises(ValueError, match="computes its own forces"):
        SumModel(mpnn_model(), lj_model())  # the LJ kernel returns its forces


def test_two_parts_returning_the_same_output_are_refused() -> None:
    atoms = SYSTEMS["bulk"]()
    with pytest.raises(ValueError, match="return 'charges'"):
        evaluate_model(SumModel(_Charged(), _Charged()), Batch.from_atoms(atoms), ("energy",))


class _Charged(ShiftPairModel):
    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        out = super().forward(batch)
        return {**out, "charges": torch.zeros_like(out["energies"])}
