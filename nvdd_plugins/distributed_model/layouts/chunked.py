"""`ChunkedEvaluator`: one system evaluated in spatial chunks, one after another on one device.

Device memory is then bounded by one chunk, not by the system: a system larger than the
device holds runs at the model's own per-atom cost plus the redundant shell. It is the
engine's thick ghost shell in one process: the system is one view whose every atom is
owned, cut into chunks (`ChunkedRows`), each a sub-domain of a spatial grid plus every atom
image within `n_layers` cutoffs of it; forces and stress are derivatives of the chunks'
partial energies, which add up to the system's.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from nvdd_plugins.comm import HaloPlan, LocalCommunicator
from nvdd_plugins.config import DomainConfig
from nvdd_plugins.data import Batch
from nvdd_plugins.distributed_model.evaluation.derivatives import Wanted
from nvdd_plugins.distributed_model.evaluation.engine import HaloEngine
from nvdd_plugins.distributed_model.evaluation.results import OwnedRows
from nvdd_plugins.distributed_model.evaluation.shells import ThickShell, refuse_global_sums
from nvdd_plugins.distributed_model.evaluation.thick_shell import ChunkedRows
from nvdd_plugins.distributed_model.rows.chunk_grid import ChunkPlan
from nvdd_plugins.distributed_model.rows.view_build import Padding, ViewRows, padded_view
from nvdd_plugins.models import BaseModelMixin
from nvdd_plugins.spec import ENERGY_KINDS, MLIPSpec

__all__ = ["ChunkedEvaluator"]


class ChunkedEvaluator:
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
        config = DomainConfig(cutoff=model.cutoff)
        self.engine = HaloEngine(model, config, LocalCommunicator(), shell, spec)
        self.engine.runner.checking = False  # no view is rebuilt: nothing to check
        self.model = self.engine.model
        chunks = self.engine.chunks
        assert chunks is not None  # a thick shell with a row limit
        chunks.grid = None if grid is None else tuple(grid)
        self.chunks: ChunkedRows = chunks

    @property
    def max_atoms(self) -> int | None:
        """Most rows per chunk: given, or once measured (None before the first call)."""
        return self.chunks.max_atoms

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
        leaf = batch.positions.detach().requires_grad_(wanted.forces)
        n_atoms, cell, pbc = batch.num_nodes, batch.cell, batch.pbc
        nothing = torch.empty(0, dtype=torch.long, device=leaf.device)
        plan = HaloPlan(n_atoms, n_atoms, *(nothing,) * 4)
        ids = torch.arange(n_atoms, device=leaf.device)
        # one system, every atom owned, no pairs (the chunks list theirs)
        numbers, pairs = batch.atomic_numbers, nothing.reshape(2, 0)
        rows = ViewRows(plan, leaf.detach(), numbers, ids, pairs, wrapped_axes=pbc[0])
        whole = padded_view(rows, Padding(0, self.model.cutoff, extra_rows=False))
        out = self.engine.evaluate(whole, leaf, leaf, cell, pbc, wanted, OwnedRows())
        if "stress" not in properties:
            out.pop("stress", None)
        return out

    def compute_view(self, batch: Batch) -> Batch:
        """`batch` itself (compute-stage hooks see the whole system)."""
        return batch

    def plan(self, batch: Batch) -> ChunkPlan:
        """The chunks the next evaluation of `batch` uses."""
        system = (batch.positions.detach(), batch.atomic_numbers, batch.cell[0], batch.pbc[0])
        return ChunkPlan.of(*self.chunks.cut(*system, batch.num_nodes), batch.num_nodes)
