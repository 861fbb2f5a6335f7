"""`OneProcessEvaluator`: the one-rank domain-decomposition engine as an integrator's
evaluator in one process (the default, registered by the package facade with
`nvdd_plugins.dynamics.set_default_evaluator`).

An integrator run without `DomainParallel` evaluates its model through the same engine as
`DomainParallel` at one rank: a `DistributedModel` over a single-process communicator, with
its Verlet list (rebuilt only when an atom moved more than half the skin), its native
kernels and its per-step work. What that engine does not take is evaluated by the
single-process `ModelEvaluator`, as before: a batch of several systems, a batch that
carries its own neighbour list (`NeighborListHook`, or one the caller built), and a model
without a distribution spec.
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

__all__ = ["OneProcessEvaluator"]


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
        self.engine: DistributedModel | None = None
        self._owned: Batch | None = None  # the engine's input for the last system
        self._versions: tuple[int, int] = (-1, -1)  # its species' and pbc's in-place versions

    def __call__(
        self, batch: Batch, properties: Iterable[str] = ("energy", "forces")
    ) -> dict[str, torch.Tensor]:
        """Evaluate `batch`; returns detached outputs as `evaluate_model` does."""
        if not self.takes(batch):
            return self.fallback(batch, properties)
        owned = self._owned_view(batch)
        return self._engine()(owned, properties)

    def compute_view(self, batch: Batch) -> Batch:
        """`batch` itself: in one process it is the whole system."""
        return batch

    def takes(self, batch: Batch) -> bool:
        """Whether the engine evaluates `batch` (else `ModelEvaluator` does): one system,
        no neighbour list of its own, and a model with a distribution spec."""
        return self.distributable and batch.num_graphs == 1 and "edge_index" not in batch

    def _engine(self) -> DistributedModel:
        if self.engine is None:
            config = DomainConfig(
                cutoff=self.model.cutoff,
                skin=self.skin,
                mesh=LocalCommunicator(),
                cuda_graphs=self.cuda_graphs,
            )
            self.engine = DistributedModel(self.model, config, captured_steps=self.captured_steps)
        return self.engine

    # -- steps captured as CUDA graphs (nvdd_plugins.dynamics.graphed) --------------------
    def graph_token(self, batch: Batch) -> tuple[int, int, int | None] | None:
        """The engine's `graph_token` for `batch` (None when the engine does not take it or
        has not evaluated this system yet)."""
        if self.engine is None or self._owned is None or not self.takes(batch):
            return None
        if not self._same_system(batch, self._owned):
            return None
        return self.engine.graph_token(self._owned)

    def graphs_required(self) -> bool:
        """False: the one-process engine's graphs are "auto"."""
        return False

    def stale_for(self, batch: Batch) -> torch.Tensor:
        """The engine's `stale_for` `batch`'s positions."""
        return self._engine().stale_for(self._owned_view(batch))

    def evaluate_fixed(
        self, batch: Batch, properties: Iterable[str] = ("energy", "forces")
    ) -> dict[str, torch.Tensor]:
        """The engine's `evaluate_fixed` on `batch`."""
        return self._engine().evaluate_fixed(self._owned_view(batch), properties)

    def _owned_view(self, batch: Batch) -> Batch:
        """The engine's input for `batch`: its positions, species and cell, with global ids
        0..n-1, so that at one rank the atoms never move (they stay sorted by id). The
        engine is set up again for a system other than the last one."""
        last = self._owned
        if last is not None and self._same_system(batch, last):
            self._owned = _engine_batch(batch, last.global_ids)
            return self._owned
        ids = torch.arange(batch.num_nodes, device=batch.positions.device)
        self._owned = _engine_batch(batch, ids)
        self._engine().setup(self._owned)
        self._versions = (batch.atomic_numbers._version, batch.pbc._version)
        return self._owned

    def _same_system(self, batch: Batch, last: Batch) -> bool:
        """Whether `batch` holds the atoms the engine was set up for: the same species and
        periodic axes (the same tensors, not written since) and positions of the same
        dtype and device. Positions and cell may change: the engine follows them."""
        return (
            batch.atomic_numbers is last.atomic_numbers
            and batch.pbc is last.pbc
            and (batch.atomic_numbers._version, batch.pbc._version) == self._versions
            and batch.positions.dtype == last.positions.dtype
            and batch.positions.device == last.positions.device
        )


def _engine_batch(batch: Batch, ids: torch.Tensor) -> Batch:
    """The fields of `batch` the engine reads, sharing its tensors."""
    return Batch(
        {"positions": batch.positions, "atomic_numbers": batch.atomic_numbers, "global_ids": ids},
        {},
        {"cell": batch.cell, "pbc": batch.pbc},
        ptr=batch.ptr,
        batch_idx=batch.batch_idx,
    )
