"""From a model's outputs on one rank's view to the results of the step, by `OutputKind`."""

from __future__ import annotations

import torch

from nvdd_plugins.comm import Communicator, sum_ghosts_into_owners
from nvdd_plugins.distributed_model.view import HaloView
from nvdd_plugins.errors import DistributionRuleError
from nvdd_plugins.spec import MLIPSpec, OutputKind

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
    """Detached results by OutputKind; per-atom ones for owned rows, or for all local rows
    (ghost rows zero unless the output is a gradient) when `local_rows`. `checking`: also
    check that a model differentiating its own energy sums its per-atom energies."""
    kinds = spec.output_kinds
    if spec.gradient_outputs and "energy" in out and checking:
        model_energy = out["energy"].detach().sum()
        if not torch.allclose(model_energy, partial.detach(), rtol=1e-6, atol=1e-8):
            raise DistributionRuleError(
                "the model differentiates an energy that is not the scatter-sum of its "
                "per-atom energies over systems (batch index); its own gradients would "
                "count ghost atoms"
            )
    result: dict[str, torch.Tensor] = {}
    for name, value in out.items():
        if name in ("energy", "energies") or name in derived:
            continue
        kind = kinds.get(name)
        if kind is None:
            raise DistributionRuleError(
                f"output {name!r} has no OutputKind in the spec's output_kinds"
            )
        if kind is OutputKind.PER_NODE:
            result[name] = _per_node(spec, comm, name, value, view, local_rows)
        elif kind is OutputKind.PER_GRAPH:
            result[name] = comm.all_reduce(value.detach(), "sum")
        else:
            result[name] = value.detach()
    result["energies"] = _per_node(spec, comm, "energies", out["energies"], view, local_rows)
    result["energy"] = comm.all_reduce(partial.detach().reshape(1), "sum")
    if "forces" in derived:
        result["forces"] = derived["forces"].detach()
    if "stress" in derived:
        result["stress"] = comm.all_reduce(derived["stress"].detach(), "sum")
    return result


def _per_node(
    spec: MLIPSpec,
    comm: Communicator,
    name: str,
    value: torch.Tensor,
    view: HaloView,
    local_rows: bool,
) -> torch.Tensor:
    gradient = name in spec.gradient_outputs
    if not local_rows:
        if gradient:
            value = sum_ghosts_into_owners(value.detach(), view.slot(comm))
        return value[: view.n_owned].detach()
    if gradient:
        return value[: view.n_local].detach()
    rows = torch.zeros_like(value[: view.n_local])
    rows[: view.n_owned] = value[: view.n_owned]
    return rows.detach()
