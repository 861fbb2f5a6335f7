"""`ChunkedEvaluator`: one system evaluated in spatial chunks, one after another on one device.

Device memory is then bounded by one chunk, not by the system: a system larger than the
device holds runs at the model's own per-atom cost plus the redundant shell. It is the
thick ghost shell's evaluation (`ChunkedRows`) in one process: each chunk is a sub-domain
of a spatial grid plus every atom image within `n_layers` cutoffs of it, and forces and
stress are derivatives of the chunks' partial energies, which add up to the system's.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from nvdd_plugins.comm import LocalCommunicator
from nvdd_plugins.config import DomainConfig
from nvdd_plugins.data import Batch
from nvdd_plugins.distributed_model.evaluation.derivatives import Wanted
from nvdd_plugins.distributed_model.evaluation.runner import SpecRunner
from nvdd_plugins.distributed_model.evaluation.shells import ThickShell, refuse_global_sums
from nvdd_plugins.distributed_model.evaluation.thick_shell import ChunkedRows
from nvdd_plugins.distributed_model.rows.chunk_grid import ChunkPlan
from nvdd_plugins.models import BaseModelMixin
from nvdd_plugins.spec import ENERGY_KINDS, MLIPSpec

__all__ = ["ChunkedEvaluator"]


class ChunkedEvaluator(ChunkedRows):
    """Evaluate a model on one system chunk by chunk (an `Evaluator` for the dynamics).

    Args:
        model: a wrapper returning per-atom "energies" that depend only on atoms within
            `n_layers` cutoffs (message passing with local aggregations).
        max_atoms: most rows (owned atoms + ghost images) per chunk; None: chosen from the
            free device memory and the model's bytes per row, measured on the first call
            (on a CPU: one chunk, unless the system needs periodic self-images anyway).
        n_layers: message-passing layers; default: the model's spec's `n_layers`.
        grid: chunks per axis, fixed (then `max_atoms` is not used).

    Exact (the sum of the chunks is the system's energy, forces and stress) for any chunk
    size; use `plan(batch)` to see the chunks and their redundant work.
    """

    uses_batch_neighbors = False

    def __init__(
        self,
        model: BaseModelMixin,
        max_atoms: int | None = None,
        n_layers: int | None = None,
        grid: tuple[int, int, int] | None = None,
    ) -> None:
        if max_atoms is not None and max_atoms < 1:
            raise ValueError(f"max_atoms must be a positive number of rows, got {max_atoms}")
        spec = model.distribution_spec() or MLIPSpec(output_kinds=ENERGY_KINDS)
        n_layers = spec.n_layers if n_layers is None else n_layers
        if n_layers is None or n_layers < 1:
            raise ValueError(
                f"{type(model).__name__} does not declare its message-passing layers "
                "(MLIPSpec.n_layers): pass ChunkedEvaluator(model, n_layers=...), the number "
                "of cutoffs an atom's energy can see"
            )
        refuse_global_sums(model, spec, "ChunkedEvaluator")
        shell = ThickShell(int(n_layers), "auto" if max_atoms is None else max_atoms)
        runner = SpecRunner(model, spec, DomainConfig(cutoff=model.cutoff), LocalCommunicator())
        runner.checking = False  # no view is rebuilt: nothing to check
        super().__init__(runner, shell, None if grid is None else tuple(grid))

    # -- Evaluator protocol -------------------------------------------------------------------
    def __call__(
        self, batch: Batch, properties: Iterable[str] = ("energy", "forces")
    ) -> dict[str, torch.Tensor]:
        """Energy (1,), the model's per-atom outputs ("energies", and e.g. "forces" and
        "stresses" of a model computing them itself), and "forces" and "stress" derived by
        autograd when asked for; detached."""
        if batch.num_graphs != 1:
            raise ValueError(f"ChunkedEvaluator takes one system, got {batch.num_graphs}")
        properties = set(properties)
        wanted = Wanted.of(self.model, properties)
        positions = batch.positions.detach().requires_grad_(wanted.forces)
        system = (positions, batch.atomic_numbers, batch.cell[0], batch.pbc[0])
        found, derived = self.evaluate(*system, batch.num_nodes, wanted)
        energies = found.get("energies", batch.positions.new_zeros(batch.num_nodes))
        out = {**found, **derived, "energies": energies, "energy": energies.sum().reshape(1)}
        if "stress" not in properties:
            out.pop("stress", None)
        return out

    def compute_view(self, batch: Batch) -> Batch:
        """`batch` itself (compute-stage hooks see the whole system)."""
        return batch

    def plan(self, batch: Batch) -> ChunkPlan:
        """The chunks the next evaluation of `batch` uses."""
        system = (batch.positions.detach(), batch.atomic_numbers, batch.cell[0], batch.pbc[0])
        return ChunkPlan.of(*self._chunks(*system, batch.num_nodes), batch.num_nodes)
