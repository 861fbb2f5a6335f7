"""ForwardPlan: the spec's shortcuts are taken eagerly only, the collective "every rank owns
atoms" is asked only for a marked plan, the Verlet pairs beyond the cutoff reach the model
only where it weighs them zero and images are unambiguous; require_compilable names what
compile=True needs."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from nvdd_plugins import DomainConfig
from nvdd_plugins.distributed_model.evaluation.forward_plan import ForwardPlan, require_compilable
from nvdd_plugins.models import NeighborConfig
from nvdd_plugins.spec import SPEC_MPNN_HALO
from tests.helpers.systems import lj_model

MARKED = dataclasses.replace(
    SPEC_MPNN_HALO,
    distribution=dataclasses.replace(
        SPEC_MPNN_HALO.distribution, aggregations_marked=True, edge_target_row=1
    ),
)


def _asked(answer: bool) -> tuple[list[int], object]:
    calls: list[int] = []

    def every_rank_owns() -> bool:
        calls.append(1)
        return answer

    return calls, every_rank_owns


@pytest.mark.parametrize("compile_", [False, True])
def test_compiled_forwards_drop_ghost_edges_but_do_not_mark(compile_: bool) -> None:
    """Marks refresh in place, which a compiled graph cannot; dropping the edges into ghost
    rows keeps fixed shapes (`PairCapacity`), so compiled forwards take it too."""
    calls, every_rank_owns = _asked(True)
    config = DomainConfig(cutoff=3.0, compile=compile_)
    plan = ForwardPlan.of(lj_model(), MARKED, config).owned_by_all(every_rank_owns)
    assert plan.compiled is compile_
    assert plan.shortcuts
    assert plan.marked is plan.owned_rows is (not compile_)
    assert plan.target_row == 1
    assert len(calls) == (0 if compile_ else 1)


def test_owned_rows_need_every_rank_to_own_atoms() -> None:
    _, nobody = _asked(False)
    config = DomainConfig(cutoff=3.0)
    assert not ForwardPlan.of(lj_model(), MARKED, config).owned_by_all(nobody).owned_rows
    calls, every_rank_owns = _asked(True)
    plan = ForwardPlan.of(lj_model(), SPEC_MPNN_HALO, config).owned_by_all(every_rank_owns)
    assert not (plan.shortcuts or plan.owned_rows) and not calls


def _with_neighbors(accepts: bool, prune: bool = False):
    model = lj_model()
    neighbors = NeighborConfig(model.cutoff, accepts_skin_pairs=accepts, prune_skin_pairs=prune)
    model.model_config = dataclasses.replace(model.model_config, neighbor_config=neighbors)
    return model


@pytest.mark.parametrize(
    ("accepts", "prune", "skin", "width", "expected"),
    [
        (True, False, 0.5, 24.0, True),  # weighs them zero, images unambiguous
        (True, False, 0.5, 6.0, False),  # a skin pair could fold onto another image
        (False, False, 0.5, 24.0, False),  # counts every pair it is given
        (True, True, 0.5, 24.0, False),  # prunes them itself when eager
        (True, True, 0.0, 24.0, True),  # no skin: the list holds none to prune
        (False, False, 0.0, 24.0, False),
    ],
)
def test_skin_pairs_are_decided_at_each_rebuild(
    accepts: bool, prune: bool, skin: float, width: float, expected: bool
) -> None:
    model = _with_neighbors(accepts, prune)
    config = DomainConfig(cutoff=model.cutoff, skin=skin)
    cell, pbc = width * torch.eye(3, dtype=torch.float64), torch.ones(3, dtype=torch.bool)
    assert ForwardPlan.of(model, SPEC_MPNN_HALO, config, cell, pbc).skin_pairs is expected
    # before any view is built: what the model's neighbours declare
    unbuilt = ForwardPlan.of(model, SPEC_MPNN_HALO, config).skin_pairs
    assert unbuilt is (accepts and not prune)


def test_a_compiled_plan_needs_unambiguous_images() -> None:
    model = lj_model()
    config = DomainConfig(cutoff=model.cutoff, skin=0.5, compile=True)
    narrow, pbc = 6.0 * torch.eye(3, dtype=torch.float64), torch.ones(3, dtype=torch.bool)
    assert ForwardPlan.of(model, SPEC_MPNN_HALO, config, 4 * narrow, pbc).skin_pairs
    # at fixed shapes a model that prunes skin pairs when eager gets them too
    pruning = _with_neighbors(accepts=True, prune=True)
    assert ForwardPlan.of(pruning, SPEC_MPNN_HALO, config, 4 * narrow, pbc).skin_pairs
    with pytest.raises(ValueError, match="lower the skin or run without compile"):
        ForwardPlan.of(model, SPEC_MPNN_HALO, config, narrow, pbc)


def test_compile_preconditions() -> None:
    model = lj_model()
    narrow, pbc = 6.0 * torch.eye(3, dtype=torch.float64), torch.ones(3, dtype=torch.bool)
    wide = 4.0 * narrow
    config = DomainConfig(cutoff=model.cutoff, skin=0.5, compile=True)
    require_compilable(model, config, wide, pbc)
    with pytest.raises(ValueError, match="lower the skin or run without compile"):
        require_compilable(model, config, narrow, pbc)
    require_compilable(model, dataclasses.replace(config, compile=False), narrow, pbc)
    # a model that does not weigh skin pairs zero gets them as the far padding pair instead:
    # no image condition
    model.model_config = dataclasses.replace(
        model.model_config, neighbor_config=NeighborConfig(model.cutoff, accepts_skin_pairs=False)
    )
    require_compilable(model, config, narrow, pbc)
