"""The single-process oracle and the float64 tolerances of docs/torture.md."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from ase import Atoms

from nvdd_plugins import Batch, DomainConfig, DomainParallel, ReplicatedModel
from nvdd_plugins.comm import Communicator, run_simulated
from nvdd_plugins.config import StrategyKind
from nvdd_plugins.dynamics import BaseDynamics
from nvdd_plugins.models import BaseModelMixin, ModelEvaluator, evaluate_model

ENERGY_PER_ATOM_TOL = 1e-10
FORCES_TOL = 1e-8
STRESS_TOL = 1e-9


def properties_for(atoms: Atoms) -> tuple[str, ...]:
    """Energy and forces, plus stress for systems with a cell volume."""
    has_volume = atoms.cell.rank == 3
    return ("energy", "forces", "stress") if has_volume else ("energy", "forces")


def reference(
    model: BaseModelMixin, atoms: Atoms, properties: Iterable[str]
) -> dict[str, torch.Tensor]:
    """The model run single-process on the full system (requested outputs + energies)."""
    return requested(evaluate_model(model, Batch.from_atoms(atoms), properties), properties)


def on_the_oracle(dynamics: BaseDynamics) -> BaseDynamics:
    """`dynamics` evaluating its model with the single-process oracle (`evaluate_model` on
    an exact-cutoff list built at every step) instead of its default one-rank engine: the
    independent reference a distributed trajectory is compared with."""
    dynamics.evaluator = ModelEvaluator(dynamics.model)
    return dynamics


def requested(
    result: dict[str, torch.Tensor], properties: Iterable[str]
) -> dict[str, torch.Tensor]:
    """The requested outputs plus per-atom energies and stresses."""
    keep = {*properties, "energies", "stresses"}
    return {k: v for k, v in result.items() if k in keep}


def replicated(
    comm: Communicator,
    model: BaseModelMixin,
    atoms: Atoms,
    properties: Iterable[str],
    grid: tuple[int, int, int] | None = None,
    skin: float = 0.3,
    strategy: StrategyKind = StrategyKind.HALO,
    **options: object,
) -> dict[str, torch.Tensor]:
    """The model through ReplicatedModel (every rank holding the full system); `options` are
    further `DomainConfig` fields. Besides the outputs: "n_owned", and with chunks the rows
    of each chunk evaluated ("chunk_rows")."""
    config = DomainConfig(
        cutoff=model.cutoff, skin=skin, mesh=comm, grid=grid, strategy=strategy, **options
    )
    distributed = ReplicatedModel(model, config)
    result = requested(distributed(Batch.from_atoms(atoms), properties), properties)
    result["n_owned"] = torch.tensor(distributed.domain.view.n_owned)
    chunks = distributed.engine.chunks
    if chunks is not None and chunks.last_plan is not None and result["n_owned"]:
        result["chunk_rows"] = torch.tensor(chunks.last_plan.rows)
    return result


def errors(
    result: dict[str, torch.Tensor], ref: dict[str, torch.Tensor], n_atoms: int
) -> dict[str, float]:
    """Max deviations: energy per atom, per-atom energies, forces, stress (if present)."""
    out = {
        "energy": float((result["energy"] - ref["energy"]).abs().max()) / n_atoms,
        "energies": float((result["energies"] - ref["energies"]).abs().max()),
        "forces": float((result["forces"] - ref["forces"]).abs().max()),
    }
    if "stress" in ref:
        out["stress"] = float((result["stress"] - ref["stress"]).abs().max())
    return out


def assert_close(errs: dict[str, float], label: str = "") -> None:
    """Assert the float64 tolerances (docs/torture.md)."""
    assert errs["energy"] < ENERGY_PER_ATOM_TOL, (label, errs)
    assert errs["energies"] < ENERGY_PER_ATOM_TOL, (label, errs)
    assert errs["forces"] < FORCES_TOL, (label, errs)
    if "stress" in errs:
        assert errs["stress"] < STRESS_TOL, (label, errs)


def assert_every_rank_close(
    world_size: int,
    model: BaseModelMixin,
    atoms: Atoms,
    ref: dict[str, torch.Tensor],
    label: str = "",
    **options,
) -> None:
    """`replicated` on `world_size` simulated ranks (`options`: its grid, skin, strategy),
    every rank's results within the float64 tolerances of `ref`."""
    properties = properties_for(atoms)
    results = run_simulated(
        world_size, lambda comm: replicated(comm, model, atoms, properties, **options)
    )
    for rank, result in enumerate(results):
        assert_close(errors(result, ref, len(atoms)), f"{label}/rank{rank}")


def assert_trajectory_matches(
    model: BaseModelMixin,
    full: Batch,
    steps: int,
    integrator: Callable[[BaseModelMixin], BaseDynamics],
    skin: float,
    world_size: int = 2,
    tolerance: float = 1e-8,
    **options: object,
) -> None:
    """`steps` of `integrator(model)` (with Verlet `skin`) under DomainParallel on
    `world_size` simulated ranks (`options`: further `DomainConfig` fields) stay on the
    single-process trajectory (`on_the_oracle`), with more than one rebuild (atoms migrate)."""
    dynamics, batch = on_the_oracle(integrator(model)), full.copy()
    for _ in range(steps):
        dynamics.step(batch)

    def per_rank(comm: Communicator) -> tuple[torch.Tensor, int]:
        config = DomainConfig(model.cutoff, skin, comm, **options)
        with DomainParallel(integrator(model), config, steps) as dd:
            dd.partition(full.copy() if comm.rank == 0 else None)
            dd.run()
            return dd.gather(dd.batch).positions.detach(), dd.model.domain.rebuilds

    for positions, rebuilds in run_simulated(world_size, per_rank, timeout=600):
        assert float((positions - batch.positions).abs().max()) < tolerance
        assert rebuilds > 1
