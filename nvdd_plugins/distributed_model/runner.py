"""`SpecRunner`: runs a model's forward on one rank's view the way its spec says.

The first forward after each rebuild runs eagerly under op interception with the checks on
(sentinel indices, stale in-place targets, opaque ops). Later forwards run compiled
(`compile=True`), without interception when the spec's aggregations are all marked (and the
claim held once), or eagerly under interception.
"""

from __future__ import annotations

from typing import Any

import torch

from nvdd_plugins.comm import Communicator, HaloSlot
from nvdd_plugins.config import DomainConfig
from nvdd_plugins.data import Batch
from nvdd_plugins.distributed_model.context import HaloContext
from nvdd_plugins.distributed_model.helpers import replaced_helpers
from nvdd_plugins.distributed_model.interception import (
    REBIND_RULE,
    SENTINEL_RULE,
    HaloInterceptionMode,
)
from nvdd_plugins.distributed_model.view import HaloView
from nvdd_plugins.errors import DistributionRuleError
from nvdd_plugins.models import BaseModelMixin
from nvdd_plugins.spec import MLIPSpec, refreshing_marks

__all__ = ["SpecRunner"]


class SpecRunner:
    """Run `model` on halo views under `spec`.

    Attributes:
        checking: the next forward is the checked one (set by `rebuilt`, cleared by the
            caller once the step's results are consolidated).
    """

    def __init__(
        self, model: BaseModelMixin, spec: MLIPSpec, config: DomainConfig, comm: Communicator
    ) -> None:
        self.model = model
        self.spec = spec
        self.config = config
        self.comm = comm
        self.checking = True
        # eager forwards skip op interception once the spec's aggregations_marked claim held
        self._marks_verified = False
        self._compiled: Any = None
        self._slot = HaloSlot()

    def rebuilt(self) -> None:
        """The view changed: check the next forward."""
        self.checking = True

    def run(self, view: HaloView, batch: Batch) -> dict[str, torch.Tensor]:
        """The model's outputs on `view` (`batch` is the view as model input)."""
        ctx = HaloContext(
            view.n_rows,
            view.n_owned,
            view.owned_mask,
            self._slot.bind(view.plan, self.comm),
            in_place=not self.config.compile,
            exchanges=view.plan.exchanges,
        )
        try:
            with replaced_helpers(self.spec.distribution.third_party_helpers):
                if self.config.compile and not self.checking:
                    return self._compiled_forward(batch.device)(batch, ctx)
                if self._marks_verified and not self.checking:
                    with refreshing_marks(ctx.refresh_rows):
                        return self.model(batch)
                out = self._forward_in_mode(batch, ctx, check_indices=self.checking)
                if self.spec.distribution.aggregations_marked and not self._marks_verified:
                    self._verify_marks(batch, ctx, out["energies"][: view.n_owned])
                return out
        except IndexError as err:
            if str(view.n_rows) in str(err):
                raise DistributionRuleError(f"{err}: {SENTINEL_RULE}") from err
            raise

    def _verify_marks(self, batch: Batch, ctx: HaloContext, owned_energies: torch.Tensor) -> None:
        """Check a spec's `aggregations_marked` claim (collective): the owned per-atom energies
        of a forward without interception must equal the intercepted ones."""
        with torch.no_grad(), refreshing_marks(ctx.refresh_rows):
            energies = self.model(batch)["energies"][: ctx.n_owned]
        owned = owned_energies.detach()
        differs = ctx.n_owned > 0 and bool(
            (energies - owned).abs().max() > 1e-5 * owned.abs().max().clamp_min(1.0)
        )
        wrong = torch.tensor([float(differs)], device=owned.device)
        if float(self.comm.all_reduce(wrong, "sum")) > 0:
            raise DistributionRuleError(
                "the spec says aggregations_marked, but per-atom energies without op "
                "interception differ from the intercepted ones: an aggregation onto atoms is "
                "not passed through scattered_onto_nodes (or energies use per-system sums)"
            )
        self._marks_verified = True

    def _compiled_forward(self, device: torch.device) -> Any:
        """The compiled `_forward_in_mode` (made on first use, fixed shapes)."""
        if self._compiled is None:
            # torch 2.13's vectorised C++ code generation fails on small index_add_ targets
            # (per-system energy sums); scalar C++ code is correct. GPUs use Triton.
            options = {"cpp.vec_isa_ok": False} if device.type == "cpu" else None
            self._compiled = torch.compile(
                self._forward_in_mode,
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
        with mode:
            out = self.model(batch)
        if check_indices and any(mode.is_stale(value) for value in out.values()):
            raise DistributionRuleError(f"the model returns a stale tensor: {REBIND_RULE}")
        return out
