"""From a model's outputs on one rank's view to the results of the step: consolidated by
`OutputKind` (`consolidate`), then placed where the layout's `Placement` says
(`redistribute`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch

from nvdd_plugins.comm import Communicator, sum_ghosts_into_owners
from nvdd_plugins.distributed_model.rows.view import HaloView
from nvdd_plugins.errors import DistributionRuleError
from nvdd_plugins.models import HEAT_FLUX_TENSORS
from nvdd_plugins.spec import AllReduceSum, MLIPSpec, OutputKind, SliceOwned

__all__ = [
    "IntoRows",
    "OwnedRows",
    "PartialRows",
    "Placement",
    "Replicated",
    "RowResults",
    "check_energies",
    "consolidate",
    "redistribute",
]


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


@dataclass(frozen=True)
class RowResults:
    """One rank's results on its view, before `redistribute` places them.

    Attributes:
        per_row: detached per-atom (`OutputKind.PER_NODE`) outputs over every row of the view.
        reduced: the rest, complete: energy and stress summed over ranks, per-system and
            global outputs by their kind, and "forces" on the rows forces were taken against.
        gradient_outputs: per-row outputs whose ghost rows hold contributions to their owners
            (per-atom "stresses" derived from the edge vectors and "heat_flux_tensors" among
            them).
        pair_gradients: when per-atom stresses were derived, this rank's share of dE/dr per
            edge slot of the view (E, 3); the shares of all ranks' copies of an edge add up
            to dE/dr.
        partials: outputs summed over ranks (energy, stress, per-system sums), this rank's
            partials, when the placement sums them (else they are in `reduced`, summed).
    """

    per_row: dict[str, torch.Tensor]
    reduced: dict[str, torch.Tensor]
    gradient_outputs: frozenset[str]
    pair_gradients: torch.Tensor | None = None
    partials: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass(frozen=True)
class OwnedRows:
    """Placement of per-atom results on the owned rows, complete (`DistributedModel`):
    ghost rows of gradient outputs are summed into their owners first (collective)."""

    partial_sums: ClassVar[bool] = False  # the engine all-reduces the sums over ranks


@dataclass(frozen=True)
class PartialRows:
    """Placement of per-atom results on every local row, owned then ghosts, partial over
    ghost rows and over ranks (a front end that adds both itself: LAMMPS). Gradient outputs
    as computed (a ghost row's share is owed to its owner), values zero on ghost rows;
    energy, stress and per-system sums are this rank's partials (no collective); with this
    rank's share of dE/dr per edge slot ("pair_gradients") when derived."""

    partial_sums: ClassVar[bool] = True


@dataclass(frozen=True)
class Replicated:
    """Placement of every atom's per-atom results on every rank (`ReplicatedModel`): the
    owned rows, complete, of every rank gathered and put in `order`, and the sums over
    ranks taken from the same gather (one collective).

    Attributes:
        order: the rows of all ranks' owned atoms, concatenated by rank, in global id order.
        per_atom: the outputs gathered (the others are complete on every rank).
    """

    order: torch.Tensor
    per_atom: frozenset[str]
    partial_sums: ClassVar[bool] = True  # summed from the gather


@dataclass(frozen=True)
class IntoRows:
    """Placement of a chunk's results in `into`, over the `n_rows` rows of the view it was
    cut from, added to the earlier chunks': per-atom values of its own rows at the rows they
    image (its `global_ids`), gradient outputs of every row added to theirs, sums and
    derivatives added, the rest as given (no collective)."""

    into: dict[str, torch.Tensor]
    n_rows: int
    partial_sums: ClassVar[bool] = True


Placement = OwnedRows | PartialRows | Replicated | IntoRows
"""Where a step's results go: the layouts' placements, each converted by `redistribute`."""


def redistribute(
    results: RowResults, to: Placement, view: HaloView, comm: Communicator
) -> dict[str, torch.Tensor]:
    """`results` of `view` placed as `to` says (collective for `OwnedRows` and `Replicated`
    when a gradient output is per atom, and for `Replicated`)."""
    placed = {**results.reduced, **results.partials}
    if isinstance(to, IntoRows):
        into, images = to.into, view.global_ids[: view.n_local]
        for name, value in placed.items():
            added = name in results.partials or name == "forces"
            into[name] = into[name] + value if added and name in into else value
        for name, value in results.per_row.items():
            if name not in into:
                into[name] = value.new_zeros(to.n_rows, *value.shape[1:])
            if name in results.gradient_outputs:
                into[name].index_add_(0, images, value[: view.n_local])
            else:
                into[name][images[: view.n_owned]] = value[: view.n_owned]
        return into
    if isinstance(to, PartialRows):
        for name, value in results.per_row.items():
            if name in results.gradient_outputs:
                placed[name] = value[: view.n_local]
            else:
                placed[name] = torch.zeros_like(value[: view.n_local])
                placed[name][: view.n_owned] = value[: view.n_owned]
        if results.pair_gradients is not None:
            placed["pair_gradients"] = results.pair_gradients
        return placed
    for name, value in results.per_row.items():
        if name in results.gradient_outputs:
            value = sum_ghosts_into_owners(value, view.slot(comm))
        placed[name] = value[: view.n_owned]
    if isinstance(to, Replicated):
        rows = {k: v for k, v in placed.items() if k in to.per_atom}
        gathered = comm.all_gather_rows(rows, results.partials)
        placed.update({k: v[to.order] if k in rows else v for k, v in gathered.items()})
    return placed


def consolidate(
    spec: MLIPSpec,
    comm: Communicator,
    out: dict[str, torch.Tensor],
    partial: torch.Tensor,
    derived: dict[str, torch.Tensor],
    checking: bool,
    summed_over_ranks: bool = True,
) -> RowResults:
    """Detached results, each output by its OutputKind: per-atom ones kept per row, the rest
    consolidated by the kind's collective. `checking`: also check that a model
    differentiating its own energy sums its per-atom energies. Without `summed_over_ranks`
    the sums over ranks are left to the placement: energy, stress and per-system sums are
    this rank's partials (`RowResults.partials`), which a gather sums with the rows it
    gathers, or a front end that adds them itself (LAMMPS) takes as they are."""
    if spec.gradient_outputs and "energy" in out and checking:
        model_energy = out["energy"].detach().sum()
        if not torch.allclose(model_energy, partial.detach(), rtol=1e-6, atol=1e-8):
            raise DistributionRuleError(
                "the model differentiates an energy that is not the scatter-sum of its "
                "per-atom energies over systems (batch index); its own gradients would "
                "count ghost atoms"
            )
    per_row: dict[str, torch.Tensor] = {}
    reduced: dict[str, torch.Tensor] = {}
    summed: dict[str, torch.Tensor] = {}  # summed over ranks in one collective at the end

    def add(kind: OutputKind, name: str, value: torch.Tensor) -> None:
        if isinstance(kind.collective, SliceOwned):  # each layout picks its rows
            per_row[name] = value.detach()
        elif isinstance(kind.collective, AllReduceSum):
            summed[name] = value.detach()
        else:
            reduced[name] = value.detach()

    for name, value in out.items():
        if name in ("energy", "energies") or name in derived:
            continue
        kind = spec.output_kinds.get(name)
        if kind is None:
            raise DistributionRuleError(
                f"output {name!r} has no OutputKind in the spec's output_kinds"
            )
        add(kind, name, value)
    add(OutputKind.PER_NODE, "energies", out["energies"])
    add(OutputKind.PER_GRAPH, "energy", partial.reshape(1))
    if "forces" in derived:  # autograd of the owned partial energy: complete on its rows
        reduced["forces"] = derived["forces"].detach()
    if "stress" in derived:
        add(OutputKind.PER_GRAPH, "stress", derived["stress"])
    gradient_outputs = spec.gradient_outputs
    for name in ("stresses", HEAT_FLUX_TENSORS):  # per-atom derivatives: ghost rows are owed
        if name in derived:
            per_row[name] = derived[name].detach()
            gradient_outputs = gradient_outputs | {name}
    if summed and summed_over_ranks:
        reduced.update(comm.all_reduce_sums(summed))
    partials = {} if summed_over_ranks else summed
    pair_gradients = derived.get("pair_gradients")
    pair_gradients = None if pair_gradients is None else pair_gradients.detach()
    return RowResults(per_row, reduced, gradient_outputs, pair_gradients, partials)
