"""`SpecRunner`: runs a model's forward on one rank's view the way its spec says.

The first forward after each rebuild runs eagerly under op interception with the checks on
(sentinel indices, stale in-place targets, opaque ops). Later forwards take the spec's
shortcuts once they held in one checked forward: without the edges into ghost rows when its
aggregations all write onto one row of `edge_index` (compiled forwards too, at a fixed
capacity), and, eagerly, without interception when they are all marked. Compiled forwards
(`compile=True`) and eager ones without marks run under interception.
Which of these apply, and whether the model sees the Verlet pairs beyond its cutoff, is one
`ForwardPlan`, decided at each rebuild.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import torch

from nvdd_plugins.comm import Communicator, HaloSlot, all_to_all_rows
from nvdd_plugins.config import DomainConfig
from nvdd_plugins.data import Batch
from nvdd_plugins.distributed_model.evaluation.context import HaloContext
from nvdd_plugins.distributed_model.evaluation.derivatives import Leaves, edge_stresses
from nvdd_plugins.distributed_model.evaluation.forward_plan import ForwardPlan
from nvdd_plugins.distributed_model.evaluation.heat_flux import FluxTaps
from nvdd_plugins.distributed_model.evaluation.helpers import replaced_helpers
from nvdd_plugins.distributed_model.evaluation.interception import (
    REBIND_RULE,
    SENTINEL_RULE,
    HaloInterceptionMode,
)
from nvdd_plugins.distributed_model.evaluation.pair_capacity import PairCapacity
from nvdd_plugins.distributed_model.evaluation.results import check_energies
from nvdd_plugins.distributed_model.rows.view import HaloView
from nvdd_plugins.errors import DistributionRuleError
from nvdd_plugins.models import BaseModelMixin, edge_vectors
from nvdd_plugins.spec import (
    MeshRanks,
    MLIPSpec,
    forward_on_ranks,
    handling_marks,
    refreshing_marks,
)

__all__ = ["SpecRunner"]


class SpecRunner:
    """Run `model` on halo views under `spec`.

    Attributes:
        checking: the next forward is the checked one (set by `rebuilt`, cleared by the
            caller once the step's results are consolidated).
        plan: what the forwards on the current view may skip and which pairs they see,
            decided when it was built (`rebuilt`).
    """

    def __init__(
        self, model: BaseModelMixin, spec: MLIPSpec, config: DomainConfig, comm: Communicator
    ) -> None:
        self.model = model
        self.spec = spec
        self.config = config
        self.comm = comm
        self.checking = True
        self.plan = ForwardPlan.of(model, spec, config)
        # eager forwards take the spec's shortcuts once a forward taking them agreed with
        # the reference one
        self._claims_verified = False
        self._compiled: Any = None
        self._slot = HaloSlot()
        # for a model that keeps a global array distributed itself (PME's mesh in slabs)
        self._ranks = None
        if comm.size > 1:
            exchange = partial(all_to_all_rows, comm=comm)
            self._ranks = MeshRanks(comm.rank, comm.size, exchange, comm.all_gather)
        neighbors = model.model_config.neighbor_config
        # at fixed shapes, the claimed slots (and the pairs within the cutoff) in a capacity
        self.edge_slots = PairCapacity()
        self._prunes = bool(neighbors and neighbors.prune_skin_pairs)

    def rebuilt(self, cell: torch.Tensor, pbc: torch.Tensor) -> None:
        """A new view was built in `cell` (3, 3) periodic along `pbc` (3,): decide its plan
        and check the next forward."""
        self.checking = True
        self.plan = ForwardPlan.of(self.model, self.spec, self.config, cell, pbc)
        self.edge_slots.reset(resize=not self.plan.compiled)

    def run(
        self, view: HaloView, batch: Batch, taps: FluxTaps | None = None
    ) -> dict[str, torch.Tensor]:
        """The model's outputs on `view` (`batch` is the view as model input; eager forwards
        may replace its "edge_index"); `taps` record its refreshes, for the heat flux."""
        if self.checking:
            self.plan = self.plan.owned_by_all(partial(self._all_own, view))
        plan = self.plan
        ctx = HaloContext(
            view.n_rows,
            view.n_owned,
            view.owned_mask,
            self._slot.bind(view.plan, self.comm),
            in_place=not plan.compiled,
            exchanges=view.plan.exchanges,
            taps=taps,
        )
        with self._model_scope(batch), forward_on_ranks(self._ranks):
            if plan.compiled and not self.checking:
                return self._run_compiled(self._claimed(batch, ctx), ctx)
            if plan.shortcuts and not self._claims_verified:
                return self._verified_forward(batch, ctx)
            return self._eager_forward(batch, ctx, self.checking)

    def run_alone(self, batch: Batch, n_owned: int) -> dict[str, torch.Tensor]:
        """The model's outputs on rows that need no exchange (a thick shell's: every owned
        atom's receptive field is among them), under interception that keeps the first
        `n_owned` rows in node -> system sums."""
        n_rows = batch.num_nodes
        owned = torch.arange(n_rows, device=batch.device) < n_owned
        ctx = HaloContext(n_rows, n_owned, owned, slot=-1, exchanges=False)
        with self._model_scope(batch):
            return self._forward_in_mode(batch, ctx, check_indices=self.checking)

    @contextmanager
    def _model_scope(self, batch: Batch) -> Iterator[None]:
        """Where the model runs on `batch`: the spec's third-party helpers replaced, and an
        IndexError from a sentinel index named as the rule the model breaks."""
        try:
            with replaced_helpers(self.spec.distribution.third_party_helpers):
                yield
        except IndexError as err:
            # the only out-of-range indices the framework hands a model are its sentinels
            if bool((batch.edge_index >= batch.num_nodes).any()):
                raise DistributionRuleError(f"{err}: {SENTINEL_RULE}") from err
            raise

    def derived(
        self,
        leaves: Leaves,
        rows: torch.Tensor,
        cell: torch.Tensor,
        batch_of: Callable[[torch.Tensor, torch.Tensor], Batch],
        n_owned: int,
        view: HaloView | None = None,
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """The model's outputs on `batch_of(rows, cell)` after the strain of `leaves` and the
        derivatives of the first `n_owned` rows' energy, per-atom "stresses" included; run
        on `view`, or without one alone."""
        with torch.enable_grad():
            rows, run_cell = leaves.strained(rows, cell)
            batch = batch_of(rows, run_cell)
            if view is None:
                out = self.run_alone(batch, n_owned)
            else:
                out = self.run(view, batch, leaves.flux)
            check_energies(out.get("energies"), batch.num_nodes)
            derived = leaves.derive(out["energies"][:n_owned], cell, self.model)
        if "pair_gradients" in derived:
            gradients = derived["pair_gradients"]
            derived["stresses"] = edge_stresses(batch, gradients, cell, batch.num_nodes)
        return out, derived

    def _all_own(self, view: HaloView) -> bool:
        """Whether no rank's view is empty of owned atoms (collective)."""
        empty = torch.tensor([float(view.n_owned == 0)], device=view.owned_mask.device)
        return float(self.comm.all_reduce(empty, "sum")) == 0

    def _claimed(self, batch: Batch, ctx: HaloContext) -> Batch:
        """`batch` without the edges into ghost rows, when the spec says every aggregation
        writes onto one row of `edge_index`: their slots hold the sentinel (in `batch`
        itself), or at fixed shapes (`DomainConfig.fixed_shapes`: no data-dependent
        filtering) a copy of `batch` keeps the others, and of them the pairs within the
        cutoff when the model prunes the rest, first in a capacity (`PairCapacity`; compiled:
        its shape outlives rebuilds)."""
        target_row = self.plan.target_row
        eager_without_ghosts = not self.config.fixed_shapes and ctx.n_owned == ctx.n_rows
        if target_row is None or eager_without_ghosts:
            return batch
        edge_index = batch.edge_index
        into_owned = edge_index[target_row] < ctx.n_owned
        if not self.config.fixed_shapes:
            batch.edge_index = torch.where(into_owned, edge_index, ctx.n_rows)
            return batch
        if self._prunes:
            into_owned = into_owned & (edge_vectors(batch).norm(dim=-1) < self.model.cutoff)
        return self.edge_slots.kept(batch, into_owned)

    def _eager_forward(
        self, batch: Batch, ctx: HaloContext, checking: bool
    ) -> dict[str, torch.Tensor]:
        """An eager forward taking the plan's shortcuts (`checking`: the checked one)."""
        batch = self._claimed(batch, ctx)
        if self.plan.marked and not checking:
            owned_rows = ctx.owned_rows() if self.plan.owned_rows else None
            with refreshing_marks(ctx.refresh_rows, owned_rows):
                return self.model(batch)
        return self._forward_in_mode(batch, ctx, check_indices=checking)

    def _verified_forward(self, batch: Batch, ctx: HaloContext) -> dict[str, torch.Tensor]:
        """A checked forward that also tests the spec's shortcuts (collective): the reference
        forward (under interception with the checks on, every edge) without gradients, then
        the forward taking the shortcuts, whose outputs are returned once their owned
        per-atom energies agree. Without gradients the reference's memory is free before
        the returned forward builds its autograd graph, so this step needs no more memory
        than the later ones."""
        with torch.no_grad():
            reference = self._forward_in_mode(batch, ctx, check_indices=True)["energies"]
        out = self._eager_forward(batch, ctx, checking=False)
        owned = reference[: ctx.n_owned]
        claimed = out["energies"][: ctx.n_owned].detach()
        differs = ctx.n_owned > 0 and bool(
            (claimed - owned).abs().max() > 1e-5 * owned.abs().max().clamp_min(1.0)
        )
        wrong = torch.tensor([float(differs)], device=owned.device)
        if float(self.comm.all_reduce(wrong, "sum")) > 0:
            raise DistributionRuleError(
                "per-atom energies computed the way the spec allows (aggregations_marked: "
                "without op interception; edge_target_row: without the edges into ghost "
                "rows) differ from the intercepted ones on every edge: an aggregation onto "
                "atoms is not passed through scattered_onto_nodes, energies use per-system "
                "sums, or an aggregation writes onto the other row of edge_index"
            )
        self._claims_verified = True
        return out

    def _run_compiled(self, batch: Batch, ctx: HaloContext) -> dict[str, torch.Tensor]:
        """The compiled forward; a ValueError naming the model when torch.compile cannot
        capture its forward as one graph (a data-dependent shape, a host read)."""
        try:
            return self._compiled_forward(batch.device)(batch, ctx)
        except (torch._dynamo.exc.Unsupported, torch._dynamo.exc.UserError) as err:
            reason = str(err).strip().splitlines()[0]
            raise ValueError(
                f"compile=True needs a forward torch.compile captures as one graph; "
                f"{type(self.model).__name__}'s breaks it ({reason}): run it with "
                "compile=False"
            ) from err

    def _compiled_forward(self, device: torch.device) -> Any:
        """The compiled `_forward_in_mode` (made on first use, fixed shapes)."""
        if self._compiled is None:
            # torch 2.13's vectorised C++ code generation fails on small index_add_ targets
            # (per-system energy sums); scalar C++ code is correct. GPUs use Triton.
            options = {"cpp.vec_isa_ok": False} if device.type == "cpu" else None
            # one graph, or an error: where dynamo breaks the graph, the code after the break
            # runs without the interception the graph was traced under (wrong results)
            self._compiled = torch.compile(
                self._forward_in_mode,
                fullgraph=True,
                dynamic=False,
                mode=self.config.compile_mode,
                options=options,
            )
        return self._compiled

    def _forward_in_mode(
        self, batch: Batch, ctx: HaloContext, check_indices: bool = False
    ) -> dict[str, torch.Tensor]:
        """The model forward under op interception (the part `compile=True` compiles)."""
        mode = HaloInterceptionMode(
            ctx, self.spec.distribution.custom_ops, check_indices, strict=self.config.strict
        )
        with mode, handling_marks(mode):
            out = self.model(batch)
        if check_indices and any(mode.is_stale(value) for value in out.values()):
            raise DistributionRuleError(f"the model returns a stale tensor: {REBIND_RULE}")
        return out
