"""`OneProcessEvaluator`: the one-rank domain-decomposition engine as an integrator's
evaluator in one process (the default, registered by the package facade with
`nvdd_plugins.dynamics.set_default_evaluator`).

An integrator run without `DomainParallel` evaluates its model through the same engine as
`DomainParallel` at one rank: a `DistributedModel` over a single-process communicator whose
rows are the integrator's batch itself (`OneRankModel`), with its Verlet list (rebuilt only
when an atom moved more than half the skin), its native kernels and its per-step work. What
that engine does not take is evaluated by the single-process `ModelEvaluator`, as before: a
batch of several systems, a batch that carries its own neighbour list (`NeighborListHook`,
or one the caller built), and a model without a distribution spec.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import torch

from nvdd_plugins.comm import LocalCommunicator
from nvdd_plugins.config import DomainConfig, StrategyKind
from nvdd_plugins.data import Batch
from nvdd_plugins.distributed_model.layouts.model import DistributedModel
from nvdd_plugins.models import BaseModelMixin, ModelEvaluator

__all__ = ["OneProcessEvaluator", "OneRankModel"]


class OneProcessEvaluator:
    """Evaluate a model in one process through the one-rank `DistributedModel` engine.

    The engine is built lazily from the first single-system batch (its frame, and its
    Verlet state), and set up again when a different system arrives (another batch, or
    other atoms). Compute-stage hooks see the batch itself.

    Args:
        model: the model wrapper.
        skin: Verlet skin, Å.
        captured_steps: the dynamics' step may be captured as a CUDA graph (when
            `cuda_graphs` allows it).
    """

    #: the engine's `DomainConfig.cuda_graphs`: "auto" (default: NVE steps replayed as CUDA
    #: graphs for a model on a GPU while they pay) or False (eager steps); set it on the
    #: class or an instance before the first step.
    cuda_graphs: bool | Literal["auto"] = "auto"

    # a neighbour list on the batch is used (and then `ModelEvaluator` evaluates it)
    uses_batch_neighbors = True

    def __init__(
        self, model: BaseModelMixin, skin: float = 0.0, captured_steps: bool = False
    ) -> None:
        self.model = model
        self.skin = float(skin)
        self.captured_steps = captured_steps
        self.fallback = ModelEvaluator(model, skin)
        self.distributable = model.distribution_spec(StrategyKind.HALO) is not None
        self.engine: OneRankModel | None = None

    def __call__(
        self, batch: Batch, properties: Iterable[str] = ("energy", "forces")
    ) -> dict[str, torch.Tensor]:
        """Evaluate `batch`; returns detached outputs as `evaluate_model` does."""
        if not self.takes(batch):
            return self.fallback(batch, properties)
        return self._engine(batch)(batch, properties)

    def compute_view(self, batch: Batch) -> Batch:
        """`batch` itself: in one process it is the whole system."""
        return batch

    def takes(self, batch: Batch) -> bool:
        """Whether the engine evaluates `batch` (else `ModelEvaluator` does): one system,
        no neighbour list of its own, and a model with a distribution spec."""
        return self.distributable and batch.num_graphs == 1 and "edge_index" not in batch

    # -- steps captured as CUDA graphs (nvdd_plugins.dynamics.graphed) --------------------
    def graph_token(self, batch: Batch) -> tuple[int, int, int] | None:
        """The engine's `graph_token` for `batch` (None when the engine does not take it or
        has not evaluated this system yet)."""
        if self.engine is None or not self.takes(batch) or not self.engine.holds(batch):
            return None
        return self.engine.graph_token(batch)

    def graphs_required(self) -> bool:
        """False: the one-process engine's graphs are "auto"."""
        return False

    def stale_for(self, batch: Batch) -> torch.Tensor:
        """The engine's `stale_for` `batch`'s positions."""
        return self._engine(batch).stale_for(batch)

    def evaluate_fixed(
        self, batch: Batch, properties: Iterable[str] = ("energy", "forces")
    ) -> dict[str, torch.Tensor]:
        """The engine's `evaluate_fixed` on `batch`."""
        return self._engine(batch).evaluate_fixed(batch, properties)

    def _engine(self, batch: Batch) -> OneRankModel:
        """The engine, set up for `batch`'s system."""
        if self.engine is None:
            config = DomainConfig(
                cutoff=self.model.cutoff,
                skin=self.skin,
                mesh=LocalCommunicator(),
                cuda_graphs=self.cuda_graphs,
            )
            self.engine = OneRankModel(self.model, config, captured_steps=self.captured_steps)
        if not self.engine.holds(batch):
            self.engine.set_up_for(batch)
        return self.engine


class OneRankModel(DistributedModel):
    """The one-rank engine over a batch as its integrator holds it: every atom owned, with
    global ids 0..n-1, so at one rank the atoms never move (they stay sorted by id) and the
    batch's own tensors are the owned rows."""

    _ids: torch.Tensor | None = None  # of the system set up for
    _system: tuple[torch.Tensor, torch.Tensor, int, int, torch.dtype] | None = None

    def set_up_for(self, batch: Batch) -> None:
        """Set the engine up for `batch`'s system (its frame and Verlet state)."""
        self._ids = torch.arange(batch.num_nodes, device=batch.positions.device)
        numbers, pbc = batch.atomic_numbers, batch.pbc
        self._system = (numbers, pbc, numbers._version, pbc._version, batch.positions.dtype)
        self.setup(self.owned_rows(batch))

    def holds(self, batch: Batch) -> bool:
        """Whether `batch` holds the atoms the engine was set up for: the same species and
        periodic axes (the same tensors, not written since) and positions of the same
        dtype and device. Positions and cell may change: the engine follows them."""
        if self._system is None or self._ids is None:
            return False
        numbers, pbc, numbers_version, pbc_version, dtype = self._system
        return (
            batch.atomic_numbers is numbers
            and batch.pbc is pbc
            and (numbers._version, pbc._version) == (numbers_version, pbc_version)
            and batch.positions.dtype == dtype
            and batch.positions.device == self._ids.device
        )

    def owned_rows(self, batch: Batch) -> Batch:
        """The fields of `batch` the engine reads, sharing its tensors, with the ids."""
        return Batch(
            {
                "positions": batch.positions,
                "atomic_numbers": batch.atomic_numbers,
                "global_ids": self._ids,
            },
            {},
            {"cell": batch.cell, "pbc": batch.pbc},
            ptr=batch.ptr,
            batch_idx=batch.batch_idx,
        )

    def moved_rows(self, batch: Batch) -> Batch:
        """The owned rows: nothing migrates at one rank."""
        return self.owned_rows(batch)
