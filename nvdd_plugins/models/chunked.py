"""`ChunkedEvaluator`: one system evaluated in spatial chunks, one after another on one device.

Device memory is then bounded by one chunk, not by the system: a system larger than the
device holds runs at the model's own per-atom cost plus the redundant shell. Each chunk is a
sub-domain of a spatial grid plus every atom image within `n_layers` cutoffs of it (a thick
ghost shell: no exchange between chunks). The model runs on the chunk unchanged; the
chunk's partial energy is the sum of the per-atom energies of the atoms it owns, which are
exact because everything within their receptive field is in the chunk; forces and stress
are derivatives of that partial with respect to the system's positions and strain, so
contributions of ghost images flow back to their atoms, and the chunks' derivatives add up
to the system's. The ghost shell is recomputed work: `ChunkPlan.redundancy` reports it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from functools import partial

import torch

from nvdd_plugins.data import Batch
from nvdd_plugins.decomposition import DecompositionFrame, GhostImages, SpatialPartitioner
from nvdd_plugins.geometry import build_neighbor_list, rows_times_3x3
from nvdd_plugins.models.base import BaseModelMixin
from nvdd_plugins.models.chunk_grid import (
    ChunkPlan,
    chunk_rows,
    fitting_chunks,
    measured_row_limit,
    partitioned,
)
from nvdd_plugins.models.evaluate import apply_strain, energy_derivatives, new_strain
from nvdd_plugins.spec import ENERGY_KINDS, OutputKind

__all__ = ["ChunkedEvaluator"]

logger = logging.getLogger(__name__)


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
        spec = model.distribution_spec()
        if n_layers is None and spec is not None:
            n_layers = spec.n_layers
        if n_layers is None or n_layers < 1:
            raise ValueError(
                f"{type(model).__name__} does not declare its message-passing layers "
                "(MLIPSpec.n_layers): pass ChunkedEvaluator(model, n_layers=...), the number "
                "of cutoffs an atom's energy can see"
            )
        self.model = model
        self.grid = None if grid is None else tuple(int(g) for g in grid)
        self.max_atoms = max_atoms
        self.n_layers = int(n_layers)
        self.shell = self.n_layers * float(model.cutoff)
        kinds = spec.output_kinds if spec is not None else ENERGY_KINDS
        self._per_atom = frozenset(k for k, v in kinds.items() if v is OutputKind.PER_NODE)
        # a kernel model's stress is the sum of its per-atom stresses
        self.own_stress = (
            "stress" not in model.model_config.autograd_outputs and "stresses" in self._per_atom
        )
        self.last_plan: ChunkPlan | None = None  # of the last evaluation
        self._grid_hint: tuple[int, int, int] | None = None

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
        derived = self.model.model_config.autograd_outputs
        want_forces = "forces" in properties and "forces" in derived
        want_stress = "stress" in properties and "stress" in derived
        system = (batch.positions, batch.atomic_numbers, batch.cell[0], batch.pbc[0])
        per_atom, totals = self.evaluate_rows(*system, batch.num_nodes, want_forces, want_stress)
        energies = per_atom.get("energies", batch.positions.new_zeros(batch.num_nodes))
        out = {**per_atom, "energies": energies, "energy": energies.sum().reshape(1)}
        out.update(totals)
        if "stress" not in properties:
            out.pop("stress", None)
        return out

    def evaluate_rows(
        self,
        positions: torch.Tensor,
        atomic_numbers: torch.Tensor,
        cell: torch.Tensor,
        pbc: torch.Tensor,
        n_targets: int,
        want_forces: bool,
        want_stress: bool,
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Chunk by chunk, the atoms `positions[:n_targets]` among environment atoms (the
        rest, e.g. a rank's ghosts), in `cell` (3, 3) periodic along `pbc` (3,).

        Returns, detached: the model's per-atom outputs of the targets, and the derivatives
        of the targets' energy: "forces" (-dE/dx of every row) and "stress" (dE/dstrain /
        volume, (1, 3, 3)) when asked for; for a model computing its own per-atom stresses
        (`own_stress`), "stress" is always their sum over the targets.
        """
        positions = positions.detach().requires_grad_(want_forces)
        cell = cell.detach()
        partitioner, images = self._chunks(positions.detach(), atomic_numbers, cell, pbc, n_targets)
        self.last_plan = ChunkPlan.of(partitioner, images, n_targets)
        per_atom: dict[str, torch.Tensor] = {}
        totals: dict[str, torch.Tensor] = {}
        chunks = chunk_rows(partitioner, images, positions.detach(), n_targets)
        evaluate = partial(
            self._evaluate_chunk, positions, atomic_numbers, cell, want_forces, want_stress
        )
        start = time.perf_counter()
        for index, chunk in enumerate(chunks):
            atoms, _, n_owned = chunk
            if n_owned == 0:
                continue
            logger.debug(
                "chunk %d of grid %s: %d rows, %d own, at %.2f s",
                index,
                partitioner.grid,
                atoms.shape[0],
                n_owned,
                time.perf_counter() - start,
            )
            found, found_derived = evaluate(chunk, partitioner.wrapped_axes)
            for name, value in found.items():
                if name not in per_atom:
                    per_atom[name] = value.new_zeros(n_targets, *value.shape[1:])
                per_atom[name][atoms[:n_owned]] = value
            for name, value in found_derived.items():
                totals[name] = totals[name] + value if name in totals else value
        if want_forces and "forces" not in totals:
            totals["forces"] = torch.zeros_like(positions.detach())
        if self.own_stress and not want_stress and "stresses" in per_atom:
            totals["stress"] = per_atom["stresses"].sum(dim=0, keepdim=True)
        if (want_stress or self.own_stress) and "stress" not in totals:
            totals["stress"] = positions.new_zeros(1, 3, 3)
        return per_atom, totals

    def compute_view(self, batch: Batch) -> Batch:
        """`batch` itself (compute-stage hooks see the whole system)."""
        return batch

    # -- chunks -------------------------------------------------------------------------------
    def plan(self, batch: Batch) -> ChunkPlan:
        """The chunks the next evaluation of `batch` uses."""
        system = (batch.positions.detach(), batch.atomic_numbers, batch.cell[0], batch.pbc[0])
        partitioner, images = self._chunks(*system, batch.num_nodes)
        return ChunkPlan.of(partitioner, images, batch.num_nodes)

    def _chunks(
        self,
        positions: torch.Tensor,
        atomic_numbers: torch.Tensor,
        cell: torch.Tensor,
        pbc: torch.Tensor,
        n_targets: int,
    ) -> tuple[SpatialPartitioner, GhostImages]:
        """The fewest chunks whose rows all fit `max_atoms` (or the measured limit); chunks
        holding no target are not evaluated and not counted. Along open axes the chunks
        tile the span of the targets (the outermost reach past it, over their environment)."""
        open_axes = ~pbc.reshape(3, 1).bool().to(cell.device)
        spanned = torch.where(open_axes, torch.zeros_like(cell), cell)
        frame = DecompositionFrame.from_system(positions[:n_targets], spanned, pbc)
        if self.grid is not None:
            return partitioned(frame, positions, self.grid, self.shell)
        limit = self._row_limit(positions, atomic_numbers, cell, frame)
        try:
            partitioner, images = fitting_chunks(
                frame, positions, n_targets, limit, self.shell, self._grid_hint or (1, 1, 1)
            )
        except ValueError as err:
            raise ValueError(
                f"{err} (shell {self.n_layers} x {self.model.cutoff:g} Å): raise max_atoms"
            ) from None
        if self._grid_hint != tuple(partitioner.grid):
            logger.info("chunk grid %s for at most %d rows", partitioner.grid, limit)
        self._grid_hint = tuple(partitioner.grid)
        return partitioner, images

    def _row_limit(
        self,
        positions: torch.Tensor,
        atomic_numbers: torch.Tensor,
        cell: torch.Tensor,
        frame: DecompositionFrame,
    ) -> int:
        """`max_atoms`; unset: measured on a GPU (`measured_row_limit`), all rows on a CPU."""
        if self.max_atoms is None:
            if positions.device.type != "cuda":
                return max(positions.shape[0], 1)
            leaf = positions.detach().requires_grad_(True)
            probe = partial(self._evaluate_chunk, leaf, atomic_numbers, cell, True, False)
            self.max_atoms = measured_row_limit(frame, positions, self.shell, probe)
            logger.info("chunks of at most %d rows (from free device memory)", self.max_atoms)
        return self.max_atoms

    def _evaluate_chunk(
        self,
        positions: torch.Tensor,
        atomic_numbers: torch.Tensor,
        cell: torch.Tensor,
        want_forces: bool,
        want_stress: bool,
        chunk: tuple[torch.Tensor, torch.Tensor, int],
        wrapped: torch.Tensor,
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """One chunk (`chunk_rows`: rows the images `units` of `atoms`, the first `n_owned` of
        them its own atoms), periodic along the `wrapped` axes: the model's per-atom outputs
        of those, and the derivatives of their energies' sum with respect to `positions`
        (and a strain of `cell` (3, 3))."""
        atoms, units, n_owned = chunk
        cell = cell.detach().reshape(1, 3, 3)
        with torch.enable_grad():
            offsets = rows_times_3x3(units.to(positions.dtype), cell[0])
            rows, strain, run_cell = positions.index_select(0, atoms) + offsets, None, cell
            if want_stress:
                strain = new_strain(1, positions, True)
                rows, run_cell = apply_strain(rows, cell, torch.zeros_like(atoms), strain)
            neighbors = build_neighbor_list(rows.detach(), cell[0], wrapped, self.model.cutoff)
            shifts = rows_times_3x3(neighbors.unit_shifts.to(rows.dtype), run_cell[0])
            batch = Batch(
                node={"positions": rows, "atomic_numbers": atomic_numbers[atoms]},
                edge={
                    "edge_index": neighbors.edge_index,
                    "shifts": shifts,
                    "unit_shifts": neighbors.unit_shifts,
                },
                system={"cell": run_cell, "pbc": wrapped.reshape(1, 3)},
                ptr=torch.tensor([0, atoms.shape[0]], device=atoms.device),
            )
            out = self.model(batch)
            energies = out.get("energies")
            if energies is None or energies.shape != (atoms.shape[0],):
                raise ValueError(
                    f'{type(self.model).__name__} must return per-atom "energies" over all '
                    "rows for chunked evaluation"
                )
            derived = energy_derivatives(
                energies[:n_owned].sum(), positions, strain, cell, want_forces, want_stress
            )
        per_atom = {
            name: value[:n_owned].detach()
            for name, value in out.items()
            if name in self._per_atom and value.dim() > 0 and value.shape[0] == atoms.shape[0]
        }
        return per_atom, {k: v.detach() for k, v in derived.items()}
