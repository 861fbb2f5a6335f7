"""`HaloEngine`: one evaluation of an unchanged model on one rank's halo view.

The engine knows nothing of how the view was laid out (owned atoms that migrate, a
replicated full system, LAMMPS's rows): it takes every row's position, runs the model the
way its spec says and returns `RowResults`, which each layout maps back to its atoms.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import torch

from nvdd_plugins.comm import Communicator
from nvdd_plugins.config import DomainConfig
from nvdd_plugins.data import Batch
from nvdd_plugins.distributed_model.results import (
    RowResults,
    check_energies,
    consolidate,
    outputs_alike_on_every_rank,
)
from nvdd_plugins.distributed_model.runner import SpecRunner
from nvdd_plugins.distributed_model.view import HaloView
from nvdd_plugins.errors import DistributionRuleError
from nvdd_plugins.geometry import images_unambiguous
from nvdd_plugins.models import (
    BaseModelMixin,
    ChunkedEvaluator,
    apply_strain,
    atom_strain_shares,
    edge_vectors,
    energy_derivatives,
    new_pair_leaf,
    new_strain,
    pair_gradients_of,
    per_atom_stresses,
)
from nvdd_plugins.spec import AllReduceSum, MLIPSpec, OutputKind, policy_for

__all__ = ["HaloEngine"]


class HaloEngine:
    """Evaluate `model` on halo views under its halo spec.

    With `config.chunk_atoms` the view is evaluated in chunks one after another
    (`ChunkedEvaluator`): the ghost shell is then the model's layers x cutoff thick
    (`config` is that of the engine), so the owned atoms' energies need no exchange during
    the forward; one exchange sums the ghosts' gradients into their owners.

    Args:
        model: a `BaseModelMixin` wrapper with per-atom "energies" output.
        config: the `DomainConfig` (cutoff must cover the model's).
        comm: this rank's communicator.
    """

    def __init__(self, model: BaseModelMixin, config: DomainConfig, comm: Communicator) -> None:
        self.model = model.prepare_for_compile() if config.compile else model
        self.comm = comm
        self.spec = _validated_spec(model, config)
        self.chunks: ChunkedEvaluator | None = None
        if config.chunk_atoms is not None:
            self.chunks = _chunked_evaluator(self.model, self.spec, config)
            config = dataclasses.replace(config, halo_layers=self.chunks.n_layers)
        self.config = config
        self.runner = SpecRunner(self.model, self.spec, config, comm)
        neighbors = model.model_config.neighbor_config
        self._weighs_far_pairs_zero = bool(neighbors and neighbors.accepts_skin_pairs)
        self._accepts_skin_pairs = bool(
            neighbors
            and neighbors.accepts_skin_pairs
            and (config.compile or not neighbors.prune_skin_pairs)
        )
        # Hand the model the Verlet pairs unfiltered (decided again at each rebuild).
        self._skin_pairs = self._accepts_skin_pairs

    def rebuilt(self, cell: torch.Tensor, pbc: torch.Tensor) -> None:
        """A new view was built for `cell` (3, 3) and `pbc` (3,): check the next forward."""
        self.runner.rebuilt()
        if not (self._accepts_skin_pairs or self.config.compile):
            # Without a skin the list holds the pairs within the cutoff only, and any motion
            # rebuilds it: filtering would change nothing (but pairs at the cutoff to within
            # rounding, which such a model weighs zero).
            self._skin_pairs = self.config.skin == 0.0 and self._weighs_far_pairs_zero
            return
        unambiguous = images_unambiguous(cell, pbc, self.config.halo_width)
        self._skin_pairs = self._accepts_skin_pairs and unambiguous
        if self.config.compile and not unambiguous:
            raise ValueError(
                "compile=True passes Verlet pairs up to cutoff + skin unfiltered, which needs "
                f"every periodic cell width above 2 x (cutoff + skin) = "
                f"{2 * self.config.halo_width:g} Å: lower the skin or run without compile"
            )

    def wanted(self, properties: Iterable[str]) -> tuple[bool, bool, bool]:
        """Whether forces, stress and per-atom stresses ("stresses", from the edge vectors)
        are asked for and derived by autograd."""
        properties = set(properties)
        derived = self.model.model_config.autograd_outputs
        return (
            "forces" in properties and "forces" in derived,
            "stress" in properties and "stress" in derived,
            "stresses" in properties and "stress" in derived,
        )

    def evaluate(
        self,
        view: HaloView,
        leaf: torch.Tensor,
        rows: torch.Tensor,
        cell: torch.Tensor,
        pbc: torch.Tensor,
        want_stress: bool,
        want_stresses: bool = False,
    ) -> RowResults:
        """The model on `view` with every row's position `rows` (built from `leaf`, the
        positions forces are taken against); energy and stress are this rank's owned
        partials summed over ranks. `want_stresses`: also this rank's share of dE/dr per
        edge slot (`RowResults.pair_gradients`) and the per-atom "stresses" it gives (ghost
        rows owed to their owners)."""
        cell = cell.detach()
        if self.chunks is not None:
            if want_stresses:
                raise NotImplementedError(
                    "per-atom virials (stresses) of an autograd model are not computed chunk "
                    "by chunk: run without chunk_atoms"
                )
            return self._evaluate_in_chunks(view, leaf, rows, cell, want_stress)
        strain = new_strain(1, leaf, want_stress) if want_stress else None
        pairs = new_pair_leaf(view.edge_index.shape[1], leaf) if want_stresses else None
        with torch.enable_grad():
            run_cell = cell
            if strain is not None:
                rows, run_cell = apply_strain(rows, cell, view.row_batch, strain)
            batch = self.batch(view, rows, run_cell, pbc, pairs)
            out = self.runner.run(view, batch)
            energies = out.get("energies")
            check_energies(energies, view.n_rows)
            partial = energies[: view.n_owned].sum()
            derived = energy_derivatives(
                partial, leaf, strain, cell, leaf.requires_grad, want_stress, pairs
            )
        if pairs is not None:
            gradients = pair_gradients_of(derived.pop("pair_gradients"), pairs, self.model)
            derived["pair_gradients"] = gradients
            shares = atom_strain_shares(
                batch.edge_index, edge_vectors(batch), gradients, view.n_rows
            )
            derived["stresses"] = per_atom_stresses(shares, cell, view.row_batch)
        checking, self.runner.checking = self.runner.checking, False
        return consolidate(self.spec, self.comm, out, partial, derived, checking)

    def _evaluate_in_chunks(
        self,
        view: HaloView,
        leaf: torch.Tensor,
        rows: torch.Tensor,
        cell: torch.Tensor,
        want_stress: bool,
    ) -> RowResults:
        """`evaluate` chunk by chunk: the owned rows' outputs from chunks of the view's rows
        (the shell covers every owned atom's receptive field), then one backward through the
        ghost positions to their owners (collective)."""
        assert self.chunks is not None
        local = rows[: view.n_local]
        want_forces = leaf.requires_grad
        per_atom: dict[str, torch.Tensor] = {}
        derived = {
            "forces": torch.zeros_like(local.detach()),
            "stress": local.new_zeros(1, 3, 3),
        }
        if view.n_owned:  # chunks need atoms to place; an empty rank still joins the backward
            numbers = view.atomic_numbers[: view.n_local]
            per_atom, found = self.chunks.evaluate_rows(
                local, numbers, cell[0], view.wrapped_axes, view.n_owned, want_forces, want_stress
            )
            derived.update(found)
        per_atom = outputs_alike_on_every_rank(self.comm, per_atom, view.n_owned, local)
        energies = per_atom.pop("energies", local.new_zeros(view.n_owned))
        per_row = {"energies": energies, **per_atom}
        per_row = {
            name: torch.cat([value, value.new_zeros(view.n_rows - view.n_owned, *value.shape[1:])])
            for name, value in per_row.items()
        }
        reduced = {"energy": self.comm.all_reduce(energies.sum().reshape(1), "sum")}
        if want_forces:
            with torch.enable_grad():
                (gradient,) = torch.autograd.grad(local, leaf, derived["forces"])
            reduced["forces"] = gradient
        if want_stress or self.chunks.own_stress:
            reduced["stress"] = self.comm.all_reduce(derived["stress"], "sum")
        return RowResults(per_row, reduced, frozenset())

    def batch(
        self,
        view: HaloView,
        rows: torch.Tensor,
        cell: torch.Tensor,
        pbc: torch.Tensor,
        pairs: torch.Tensor | None = None,
    ) -> Batch:
        """`view` as the model's input batch (pairs beyond the cutoff hold the sentinel
        unless the model takes Verlet pairs as they are); `pairs`, a leaf added to the
        edge shifts (`new_pair_leaf`)."""
        shifts = view.edge_shifts(cell[0])
        if pairs is not None:
            shifts = shifts + pairs
        if self._skin_pairs:
            edge_index = view.edge_index
        else:
            edge_index = view.active_edges(rows, shifts, self.model.cutoff)
        return Batch(
            node={"positions": rows, "atomic_numbers": view.atomic_numbers},
            edge={
                "edge_index": edge_index,
                "shifts": shifts,
                "unit_shifts": view.edge_unit_shifts,
            },
            system={"cell": cell, "pbc": pbc},
            ptr=view.row_ptr,
            batch_idx=view.row_batch,
        )


def _chunked_evaluator(
    model: BaseModelMixin, spec: MLIPSpec, config: DomainConfig
) -> ChunkedEvaluator:
    """The chunked evaluation `config.chunk_atoms` asks for, or a clear error when the
    model's outputs cannot be summed chunk by chunk."""
    whole = {
        name
        for name, kind in spec.output_kinds.items()
        if kind is not OutputKind.PER_NODE and name not in ("energy", "stress")
    }
    n_layers = max(spec.n_layers or 0, config.halo_layers or 0)
    global_sums = any(
        isinstance(transform, AllReduceSum)
        for adapter in spec.distribution.custom_ops
        for transform in (*adapter.arg_transforms.values(), *adapter.output_transforms.values())
    )
    if global_sums:
        raise ValueError(
            f"chunk_atoms cannot evaluate {type(model).__name__}: its spec sums over the "
            "whole system during the forward (an OpAdapter with AllReduceSum, e.g. charge "
            "equilibration), which a chunk cannot see"
        )
    if whole or not n_layers:
        raise ValueError(
            "chunk_atoms evaluates per-atom outputs that depend only on atoms within the "
            "model's message-passing layers x cutoff; "
            + (
                f"{type(model).__name__} also has outputs {sorted(whole)} that are not per atom"
                if whole
                else "its spec does not declare its layers (MLIPSpec.n_layers): give "
                "DomainConfig(halo_layers=...)"
            )
        )
    max_atoms = None if config.chunk_atoms == "auto" else int(config.chunk_atoms)
    return ChunkedEvaluator(model, max_atoms=max_atoms, n_layers=n_layers)


def _validated_spec(model: BaseModelMixin, config: DomainConfig) -> MLIPSpec:
    """The model's spec for `config.strategy`, or a clear error when it cannot run under
    `config`."""
    spec = model.distribution_spec(config.strategy)
    if spec is None:
        raise DistributionRuleError(
            f"{type(model).__name__}.distribution_spec({config.strategy}) returned None: "
            "return SPEC_MPNN_HALO (autograd/scatter models) or an MLIPSpec"
        )
    policy = policy_for(config.strategy)
    if not isinstance(spec.distribution.policy, policy):
        raise DistributionRuleError(
            f"the {config.strategy.value} strategy needs a {policy.__name__} spec "
            "(nvdd_plugins.spec.for_strategy turns a halo spec into one)"
        )
    if spec.output_kinds.get("energies") is not OutputKind.PER_NODE:
        raise DistributionRuleError(
            'the spec must declare per-atom "energies" as OutputKind.PER_NODE'
        )
    neighbors = model.model_config.neighbor_config
    if config.compile and not (neighbors and neighbors.accepts_skin_pairs):
        raise ValueError(
            "compile=True runs at fixed shapes without filtering pairs, so it needs a model "
            "that weighs pairs beyond its cutoff exactly zero (NeighborConfig("
            "accepts_skin_pairs=True))"
        )
    if model.cutoff > config.cutoff:
        raise ValueError(
            f"DomainConfig.cutoff ({config.cutoff} Å) is smaller than the model's "
            f"cutoff ({model.cutoff} Å)"
        )
    return spec
