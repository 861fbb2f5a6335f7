"""`HaloEngine`: one evaluation of an unchanged model on one rank's halo view.

The engine knows nothing of how the view was laid out (owned atoms that migrate, a
replicated full system, LAMMPS's rows): it takes every row's position, runs the model the
way its spec says and places the results where the layout's `Placement` says.
"""

from __future__ import annotations

from functools import partial

import torch

from nvdd_plugins.comm import Communicator
from nvdd_plugins.config import DomainConfig, StrategyKind
from nvdd_plugins.data import Batch
from nvdd_plugins.distributed_model.evaluation.derivatives import Leaves, Wanted
from nvdd_plugins.distributed_model.evaluation.heat_flux import FluxTaps
from nvdd_plugins.distributed_model.evaluation.results import (
    IntoRows,
    Placement,
    consolidate,
    redistribute,
)
from nvdd_plugins.distributed_model.evaluation.runner import SpecRunner
from nvdd_plugins.distributed_model.evaluation.shells import (
    Shell,
    ThickShell,
    refuse_global_sums,
    shell_for,
)
from nvdd_plugins.distributed_model.evaluation.thick_shell import ChunkedRows
from nvdd_plugins.distributed_model.rows.view import HaloView
from nvdd_plugins.errors import DistributionRuleError
from nvdd_plugins.models import BaseModelMixin
from nvdd_plugins.spec import MLIPSpec, OutputKind, policy_for

__all__ = ["HaloEngine"]


class HaloEngine:
    """Evaluate `model` on halo views under its halo spec.

    The ghost shell (`shell`) is a `PerLayerRefresh`, or with `config.chunk_atoms` a
    `ThickShell`: the model's layers x cutoff of ghosts (`config` is that of the engine),
    evaluated in chunks one after another without exchange during the forward; one
    exchange sums the ghosts' gradients into their owners.

    Args:
        model: a `BaseModelMixin` wrapper with per-atom "energies" output.
        config: the `DomainConfig` (cutoff must cover the model's).
        comm: this rank's communicator.
        shell: the ghost shell, instead of the one `config` selects; a `ThickShell`
            without `chunk_rows` evaluates the view at once without exchange, for views
            whose pairs include those between ghosts (a front end's rows).
        spec: the spec to run the model under, instead of its own.
    """

    def __init__(
        self,
        model: BaseModelMixin,
        config: DomainConfig,
        comm: Communicator,
        shell: Shell | None = None,
        spec: MLIPSpec | None = None,
    ) -> None:
        self.model = model.prepare_for_compile() if config.compile else model
        self.comm = comm
        self.spec = spec or _validated_spec(model, config)
        self.shell = shell if shell is not None else shell_for(model, self.spec, config)
        self.config = config
        self.runner = SpecRunner(self.model, self.spec, config, comm)
        self.chunks: ChunkedRows | None = None
        if isinstance(self.shell, ThickShell) and self.shell.chunk_rows is not None:
            self.chunks = ChunkedRows(self.shell, self.model.cutoff, self.evaluate)

    def rebuilt(self, cell: torch.Tensor, pbc: torch.Tensor) -> None:
        """A new view was built for `cell` (3, 3) and `pbc` (3,): decide its forward plan and
        check the next forward."""
        self.runner.rebuilt(cell, pbc)

    def evaluate(
        self,
        view: HaloView,
        leaf: torch.Tensor,
        rows: torch.Tensor,
        cell: torch.Tensor,
        pbc: torch.Tensor,
        wanted: Wanted,
        to: Placement,
    ) -> dict[str, torch.Tensor]:
        """The model on `view` with every row's position `rows` (built from `leaf`, the
        positions forces are taken against when it requires grad), its detached results
        placed as `to` says; energy and stress are this rank's owned partials, summed over
        ranks unless `to` leaves them partial. `wanted.stresses`: also this rank's share of
        dE/dr per edge slot and the per-atom "stresses" it gives (ghost rows owed to their
        owners); `wanted.heat_flux`: per-atom heat-flux tensors, likewise (the view must
        image every periodic axis). With chunks, each is a view of its own evaluated
        this way and placed `IntoRows` of `view`."""
        cell = cell.detach()
        flux = self._flux_taps(view, rows, cell) if wanted.heat_flux else None
        if self.chunks is not None and not isinstance(to, IntoRows):
            out, derived = self._in_chunks(view, leaf, rows, cell, wanted)
        else:
            pairs = view.edge_index.shape[1] if wanted.stresses else None
            leaves = Leaves(leaf, wanted.stress, pairs, flux)
            refreshed = None if isinstance(self.shell, ThickShell) else view
            batch_of = partial(self.batch, view, pbc=pbc, leaves=leaves)
            out, derived = self.runner.derived(
                leaves, rows, cell, batch_of, view.n_owned, refreshed
            )
        owned_energy = out["energies"][: view.n_owned].sum()
        checking = self.runner.checking
        if not isinstance(to, IntoRows):  # the step's last consolidation
            self.runner.checking = False
        results = consolidate(
            self.spec, self.comm, out, owned_energy, derived, checking, not to.partial_sums
        )
        return redistribute(results, to, view, self.comm)

    def _flux_taps(self, view: HaloView, rows: torch.Tensor, cell: torch.Tensor) -> FluxTaps:
        """The heat flux's record of the forward on `view`, or a clear error where it is
        not computed (collective)."""
        if isinstance(self.shell, ThickShell) or self.config.compile:
            raise ValueError(
                "the heat flux is computed in eager forwards with the per-layer refresh: "
                "not with compile=True or chunk_atoms"
            )
        refuse_global_sums(self.model, self.spec, "the heat flux")
        if bool(view.wrapped_axes.any()):
            if self.config.strategy is StrategyKind.GRAPH_PARTITION:
                raise ValueError(
                    "the heat flux needs every periodic image of an atom as a row of its "
                    "own; the graph partition reaches them through pair shifts: use the "
                    "halo strategy"
                )
            raise RuntimeError(
                "the heat flux needs a view imaging every periodic axis, but its pairs wrap "
                "across a periodic face (HaloDomain.image_periodic_axes before its rebuild)"
            )
        return FluxTaps.of(view, rows, cell[0], self.comm)

    def _in_chunks(
        self,
        view: HaloView,
        leaf: torch.Tensor,
        rows: torch.Tensor,
        cell: torch.Tensor,
        wanted: Wanted,
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """The model's outputs on the view's rows and the derivatives of their owned partial
        energy, from the chunks of its rows (the thick shell covers every owned atom's
        receptive field), each evaluated as a view of its own and placed `IntoRows` of
        these; one backward through the ghost positions to their owners (collective)."""
        assert self.chunks is not None
        # a rank owning nothing evaluates its padded rows once, so its outputs match its peers'
        n_rows = view.n_local if view.n_owned else view.n_rows
        local = rows[:n_rows]
        inner = local.detach().requires_grad_(leaf.requires_grad)
        numbers, wrapped = view.atomic_numbers[:n_rows], view.wrapped_axes
        into = IntoRows({}, view.n_rows)
        for chunk, chunk_rows in self.chunks.views(inner, numbers, cell[0], wrapped, view.n_owned):
            self.evaluate(chunk, inner, chunk_rows, cell, chunk.wrapped_axes[None], wanted, into)
        out = into.into
        # a kernel model's stress: the sum of its owned per-atom stresses, not of the chunks'
        if "stress" not in self.model.model_config.autograd_outputs and "stresses" in out:
            out["stress"] = out["stresses"][: view.n_owned].sum(dim=0, keepdim=True)
        asked = {"stress": wanted.stress, "stresses": wanted.stresses}
        derived = {name: out.pop(name) for name, on in asked.items() if on}
        if leaf.requires_grad:
            with torch.enable_grad():
                (derived["forces"],) = torch.autograd.grad(local, leaf, out.pop("forces"))
        return out, derived

    def batch(
        self,
        view: HaloView,
        rows: torch.Tensor,
        cell: torch.Tensor,
        pbc: torch.Tensor,
        leaves: Leaves | None = None,
    ) -> Batch:
        """`view` as the model's input batch (pairs beyond the cutoff hold the sentinel, at
        fixed shapes the view's far padding pair, unless the model takes Verlet pairs as
        they are); the edge shifts carry the pair leaf of `leaves`, if any."""
        shifts = view.edge_shifts(cell[0])
        if leaves is not None:
            shifts = leaves.shifted(shifts)
        edge_index, units = view.edge_index, view.edge_unit_shifts
        cutoff = self.model.cutoff
        if not self.runner.plan.skin_pairs and self.config.fixed_shapes:
            edge_index, shifts, units = view.within_cutoff(rows, shifts, cutoff)
        elif not self.runner.plan.skin_pairs:
            edge_index = view.active_edges(rows, shifts, cutoff)
        return Batch(
            node={"positions": rows, "atomic_numbers": view.atomic_numbers},
            edge={"edge_index": edge_index, "shifts": shifts, "unit_shifts": units},
            system={"cell": cell, "pbc": pbc},
            ptr=view.row_ptr,
            batch_idx=view.row_batch,
        )


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
    if model.cutoff > config.cutoff:
        raise ValueError(
            f"DomainConfig.cutoff ({config.cutoff} Å) is smaller than the model's "
            f"cutoff ({model.cutoff} Å)"
        )
    return spec
