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
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch

from nvdd_plugins.data import Batch
from nvdd_plugins.decomposition import (
    DecompositionFrame,
    GhostImages,
    SpatialPartitioner,
    choose_rank_grid,
)
from nvdd_plugins.geometry import build_neighbor_list, rows_times_3x3
from nvdd_plugins.models.base import BaseModelMixin
from nvdd_plugins.models.evaluate import apply_strain, energy_derivatives, new_strain
from nvdd_plugins.spec import ENERGY_KINDS, OutputKind

__all__ = ["ChunkPlan", "ChunkedEvaluator"]

logger = logging.getLogger(__name__)

# Share of the free device memory a chunk may use when the chunk size is chosen for the user.
_MEMORY_FRACTION = 0.8
_PROBE_ROWS = 4096


@dataclass(frozen=True)
class ChunkPlan:
    """How a system is cut into chunks.

    Attributes:
        grid: chunks per axis.
        rows: rows (owned atoms + ghost images) of each chunk.
        n_atoms: atoms of the system.
    """

    grid: tuple[int, int, int]
    rows: tuple[int, ...]
    n_atoms: int

    @property
    def redundancy(self) -> float:
        """Rows evaluated per atom of the system, minus one: the shell's extra work."""
        return sum(self.rows) / max(self.n_atoms, 1) - 1.0


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
        if n_layers is None:
            spec = model.distribution_spec()
            n_layers = spec.n_layers if spec is not None else None
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
        spec = model.distribution_spec()
        kinds = spec.output_kinds if spec is not None else ENERGY_KINDS
        self._per_atom = frozenset(k for k, v in kinds.items() if v is OutputKind.PER_NODE)

    # -- Evaluator protocol -------------------------------------------------------------------
    def __call__(
        self, batch: Batch, properties: Iterable[str] = ("energy", "forces")
    ) -> dict[str, torch.Tensor]:
        """Energy (1,), the model's per-atom outputs ("energies", and e.g. "forces" and
        "stresses" of a model computing them itself), and "forces" and "stress" derived by
        autograd when asked for; detached. A model's own stress is the sum of its per-atom
        "stresses"."""
        if batch.num_graphs != 1:
            raise ValueError(f"ChunkedEvaluator takes one system, got {batch.num_graphs}")
        properties = set(properties)
        derived = self.model.model_config.autograd_outputs
        want_forces = "forces" in properties and "forces" in derived
        want_stress = "stress" in properties and "stress" in derived
        positions = batch.positions.detach().requires_grad_(want_forces)
        partitioner, images = self._chunks(batch)
        per_atom: dict[str, torch.Tensor] = {}
        totals: dict[str, torch.Tensor] = {}
        for atoms, units, n_owned in _chunk_rows(partitioner, images, positions.detach()):
            if n_owned == 0:
                continue
            chunk_per_atom, chunk_derived = self._evaluate_chunk(
                batch,
                positions,
                atoms,
                units,
                n_owned,
                partitioner.wrapped_axes,
                want_forces,
                want_stress,
            )
            for name, value in chunk_per_atom.items():
                if name not in per_atom:
                    per_atom[name] = value.new_zeros(positions.shape[0], *value.shape[1:])
                per_atom[name][atoms[:n_owned]] = value
            for name, value in chunk_derived.items():
                totals[name] = totals[name] + value if name in totals else value
        energies = per_atom.get("energies", positions.new_zeros(positions.shape[0]))
        out = {**per_atom, "energies": energies, "energy": energies.sum().reshape(1)}
        if want_forces:
            out["forces"] = totals.get("forces", torch.zeros_like(positions))
        if want_stress:
            out["stress"] = totals.get("stress", positions.new_zeros(1, 3, 3))
        elif "stress" in properties and "stresses" in per_atom:
            out["stress"] = per_atom["stresses"].sum(dim=0, keepdim=True)
        return {name: value.detach() for name, value in out.items()}

    def compute_view(self, batch: Batch) -> Batch:
        """`batch` itself (compute-stage hooks see the whole system)."""
        return batch

    # -- chunks -------------------------------------------------------------------------------
    def plan(self, batch: Batch) -> ChunkPlan:
        """The chunks the next evaluation of `batch` uses."""
        partitioner, images = self._chunks(batch)
        rows = torch.bincount(images.ranks, minlength=partitioner.world_size)
        return ChunkPlan(tuple(partitioner.grid), tuple(rows.tolist()), batch.num_nodes)

    def _partitioned(
        self,
        frame: DecompositionFrame,
        positions: torch.Tensor,
        n_chunks: int,
        grid: tuple[int, int, int] | None = None,
    ) -> tuple[SpatialPartitioner, GhostImages]:
        """`n_chunks` chunks of `frame` (on `grid`, default the minimal-surface one) and the
        images of `positions` each holds."""
        grid = grid or choose_rank_grid(n_chunks, frame.widths.tolist())
        partitioner = SpatialPartitioner(frame, n_chunks, grid, halo_width=self.shell)
        return partitioner, partitioner.domain_images(positions)

    def _chunks(self, batch: Batch) -> tuple[SpatialPartitioner, GhostImages]:
        """The fewest chunks whose rows all fit `max_atoms` (or the measured limit)."""
        positions = batch.positions.detach()
        frame = DecompositionFrame.from_system(positions, batch.cell[0], batch.pbc[0])
        if self.grid is not None:
            return self._partitioned(frame, positions, math.prod(self.grid), self.grid)
        limit = self._row_limit(batch, frame)
        n_chunks = max(1, math.ceil(positions.shape[0] / limit))
        smallest = math.inf
        while True:
            partitioner, images = self._partitioned(frame, positions, n_chunks)
            largest = int(torch.bincount(images.ranks, minlength=n_chunks).max())
            if largest <= limit:
                return partitioner, images
            if largest >= smallest:  # more chunks no longer help: the shell alone is too big
                raise ValueError(
                    f"chunks of at most {limit} rows are not possible: a chunk with its ghost "
                    f"shell ({self.n_layers} x {self.model.cutoff:g} Å) keeps {largest} rows; "
                    "raise max_atoms"
                )
            smallest = largest
            n_chunks = max(n_chunks + 1, math.ceil(n_chunks * largest / limit))

    def _row_limit(self, batch: Batch, frame: DecompositionFrame) -> int:
        if self.max_atoms is None:
            if batch.positions.device.type != "cuda":
                return max(batch.num_nodes, 1)
            self.max_atoms = self._measured_row_limit(batch, frame)
            logger.info("chunks of at most %d rows (from free device memory)", self.max_atoms)
        return self.max_atoms

    def _measured_row_limit(self, batch: Batch, frame: DecompositionFrame) -> int:
        """Rows that fit in a share of the free device memory, from the peak memory of one
        probe chunk of about `_PROBE_ROWS` rows."""
        device = batch.positions.device
        positions = batch.positions.detach().requires_grad_(True)
        n_probe = max(1, batch.num_nodes // _PROBE_ROWS)
        partitioner, images = self._partitioned(frame, positions.detach(), n_probe)
        atoms, units, n_owned = next(_chunk_rows(partitioner, images, positions.detach()))
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        self._evaluate_chunk(
            batch, positions, atoms, units, n_owned, partitioner.wrapped_axes, True, False
        )
        per_row = (torch.cuda.max_memory_allocated(device) - base) / max(atoms.shape[0], 1)
        free, _ = torch.cuda.mem_get_info(device)
        return max(_PROBE_ROWS, int(_MEMORY_FRACTION * free / max(per_row, 1.0)))

    def _evaluate_chunk(
        self,
        batch: Batch,
        positions: torch.Tensor,
        atoms: torch.Tensor,
        units: torch.Tensor,
        n_owned: int,
        pbc: torch.Tensor,
        want_forces: bool,
        want_stress: bool,
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """One chunk whose rows are the images `units` of `atoms`, the first `n_owned` of
        them its own atoms: the model's per-atom outputs of those, and the derivatives of
        their energies' sum with respect to the system's `positions` (and a strain)."""
        cell = batch.cell.detach()
        with torch.enable_grad():
            rows = positions.index_select(0, atoms) + rows_times_3x3(
                units.to(positions.dtype), cell[0]
            )
            strain = new_strain(1, positions, True) if want_stress else None
            run_cell = cell
            if strain is not None:
                row_batch = torch.zeros_like(atoms)
                rows, run_cell = apply_strain(rows, cell, row_batch, strain)
            neighbors = build_neighbor_list(rows.detach(), cell[0], pbc, self.model.cutoff)
            shifts = rows_times_3x3(neighbors.unit_shifts.to(rows.dtype), run_cell[0])
            chunk = Batch(
                node={"positions": rows, "atomic_numbers": batch.atomic_numbers[atoms]},
                edge={
                    "edge_index": neighbors.edge_index,
                    "shifts": shifts,
                    "unit_shifts": neighbors.unit_shifts,
                },
                system={"cell": run_cell, "pbc": pbc.reshape(1, 3)},
                ptr=torch.tensor([0, atoms.shape[0]], device=atoms.device),
            )
            out = self.model(chunk)
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


def _chunk_rows(
    partitioner: SpatialPartitioner, images: GhostImages, positions: torch.Tensor
) -> Iterator[tuple[torch.Tensor, torch.Tensor, int]]:
    """Per chunk: its rows' atoms and image units, owned atoms' home images first, and the
    number of owned rows."""
    owner = partitioner.rank_of(positions)
    _, wrap = partitioner.home_fractional(positions)
    home = (owner.index_select(0, images.rows) == images.ranks) & (
        images.units == -wrap.index_select(0, images.rows)
    ).all(dim=1)
    counts = torch.bincount(images.ranks, minlength=partitioner.world_size).tolist()
    start = 0
    for count in counts:
        members = slice(start, start + count)
        start += count
        owned = home[members]
        order = torch.argsort((~owned).to(torch.int8), stable=True)
        yield images.rows[members][order], images.units[members][order], int(owned.sum())
