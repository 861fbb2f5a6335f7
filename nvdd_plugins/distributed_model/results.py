"""From a model's outputs on one rank's view to the results of the step, by `OutputKind`."""

from __future__ import annotations

from collections.abc import Callable

import torch

from nvdd_plugins.comm import Communicator, sum_ghosts_into_owners
from nvdd_plugins.distributed_model.view import HaloView
from nvdd_plugins.errors import DistributionRuleError
from nvdd_plugins.spec import AllReduceSum, MLIPSpec, OutputKind, SliceOwned, Transform

__all__ = ["check_energies", "consolidate"]


def check_energies(energies: torch.Tensor | None, n_rows: int) -> None:
    """Raise unless the model returned per-atom energies over all `n_rows` local rows."""
    if energies is None:
        raise DistributionRuleError(
            'the model must return per-atom "energies" over all local atoms '
            "(owned + ghost); the framework sums the owned rows"
        )
    if energies.dim() != 1 or energies.shape[0] != n_rows:
        raise DistributionRuleError(
            f"per-atom energies have shape {tuple(energies.shape)} but the local view has "
            f"{n_rows} atoms: emit energies over ALL local atoms (owned + ghost), do not "
            "pre-slice to owned atoms"
        )


def consolidate(
    spec: MLIPSpec,
    comm: Communicator,
    view: HaloView,
    out: dict[str, torch.Tensor],
    partial: torch.Tensor,
    derived: dict[str, torch.Tensor],
    local_rows: bool,
    checking: bool,
) -> dict[str, torch.Tensor]:
    """Detached results, each consolidated by its OutputKind's collective; per-atom ones for
    owned rows, or for all local rows (ghost rows zero unless the output is a gradient) when
    `local_rows`. `checking`: also check that a model differentiating its own energy sums its
    per-atom energies."""
    if spec.gradient_outputs and "energy" in out and checking:
        model_energy = out["energy"].detach().sum()
        if not torch.allclose(model_energy, partial.detach(), rtol=1e-6, atol=1e-8):
            raise DistributionRuleError(
                "the model differentiates an energy that is not the scatter-sum of its "
                "per-atom energies over systems (batch index); its own gradients would "
                "count ghost atoms"
            )
    collectives = _collectives(spec, comm, view, local_rows)

    def by_kind(kind: OutputKind, name: str, value: torch.Tensor) -> torch.Tensor:
        step = collectives.get(type(kind.collective))
        return value.detach() if step is None else step(name, value)

    result: dict[str, torch.Tensor] = {}
    for name, value in out.items():
        if name in ("energy", "energies") or name in derived:
            continue
        kind = spec.output_kinds.get(name)
        if kind is None:
            raise DistributionRuleError(
                f"output {name!r} has no OutputKind in the spec's output_kinds"
            )
        result[name] = by_kind(kind, name, value)
    result["energies"] = by_kind(OutputKind.PER_NODE, "energies", out["energies"])
    result["energy"] = by_kind(OutputKind.PER_GRAPH, "energy", partial.reshape(1))
    if "forces" in derived:  # autograd of the owned partial energy: complete on owned rows
        result["forces"] = derived["forces"].detach()
    if "stress" in derived:
        result["stress"] = by_kind(OutputKind.PER_GRAPH, "stress", derived["stress"])
    return result


def _collectives(
    spec: MLIPSpec, comm: Communicator, view: HaloView, local_rows: bool
) -> dict[type[Transform], Callable[[str, torch.Tensor], torch.Tensor]]:
    """How each collective consolidates a named output of this rank's view."""

    def owned_rows(name: str, value: torch.Tensor) -> torch.Tensor:
        if name in spec.gradient_outputs:
            if local_rows:
                return value[: view.n_local].detach()
            value = sum_ghosts_into_owners(value.detach(), view.slot(comm))
        if not local_rows:
            return value[: view.n_owned].detach()
        rows = torch.zeros_like(value[: view.n_local])
        rows[: view.n_owned] = value[: view.n_owned]
        return rows.detach()

    return {
        SliceOwned: owned_rows,
        AllReduceSum: lambda name, value: comm.all_reduce(value.detach(), "sum"),
    }
