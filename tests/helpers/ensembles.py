"""Runs of a global-reduction integrator single-process and under `DomainParallel`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from nvdd_plugins import Batch, DomainConfig, DomainParallel
from nvdd_plugins.comm import Communicator
from nvdd_plugins.dynamics import BaseDynamics
from nvdd_plugins.models import BaseModelMixin
from tests.helpers.oracle import on_the_oracle
from tests.helpers.systems import MD_SKIN, lj_model

Factory = Callable[[BaseModelMixin], BaseDynamics]


def final_state(batch: Batch, dynamics: BaseDynamics) -> dict[str, Any]:
    """Positions, velocities (if any) and cell of the whole system, the integrator's state."""
    state = {
        "positions": batch.positions.clone(),
        "cell": batch.cell.clone(),
        "steps": dynamics.step_count,
        "state": dynamics.state_dict(),
    }
    if "velocities" in batch:
        state["velocities"] = batch.velocities.clone()
    return state


def single_process(factory: Factory, system: Callable[[], Batch], n_steps: int) -> dict:
    """The integrator run on the whole system in one process, on the oracle."""
    batch = system()
    dynamics = on_the_oracle(factory(lj_model()))
    dynamics.run(batch, n_steps)
    return final_state(batch, dynamics)


def domain_parallel(
    comm: Communicator, factory: Factory, system: Callable[[], Batch], n_steps: int
) -> dict:
    """The integrator under `DomainParallel` on `comm`; the gathered final state (every
    rank), plus the all-reduces its `MeshSums` issued."""
    model = lj_model()
    dynamics = factory(model)
    config = DomainConfig(cutoff=model.cutoff, skin=MD_SKIN, mesh=comm)
    with DomainParallel(dynamics, config, n_steps) as dd:
        dd.partition(system() if comm.rank == 0 else None)
        dd.run()
        state = final_state(dd.gather(dd.batch), dynamics)
        state["reductions"] = dd.sums.reductions
        state["owned"] = dd.batch.num_nodes
    return state


def max_deviation(result: dict, reference: dict) -> float:
    """Largest absolute difference of positions, velocities and cell."""
    names = [n for n in ("positions", "velocities", "cell") if n in reference]
    return max(float((result[n] - reference[n]).abs().max()) for n in names)


def identical(a: Any, b: Any) -> bool:
    """Bit-identical nested state (dicts, lists, tensors, numbers)."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(identical(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(identical(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    return a == b


def same_replicated_state(results: list[dict]) -> bool:
    """Whether every rank holds bit-identical integrator state and cell."""
    first = results[0]
    return all(
        identical(r["state"], first["state"]) and torch.equal(r["cell"], first["cell"])
        for r in results
    )
