"""`ChunkedRows`: rows in a thick ghost shell evaluated in spatial chunks, one after another.

Each chunk is a sub-domain of a spatial grid over the target atoms plus every atom image
within `n_layers` cutoffs of it, so the targets' energies need no exchange between chunks.
The chunk runs through the runner's forward without exchange (node -> system sums keep the
chunk's own atoms); its partial energy is the sum of its own atoms' energies, and forces,
stress and per-atom stresses are derivatives of that partial (`Leaves`), so contributions
of ghost images flow back to their atoms and the chunks' derivatives add up to the rows'.
The ghost shell is recomputed work: `ChunkPlan.redundancy` reports it.
"""

from __future__ import annotations

import logging
from functools import partial

import torch

from nvdd_plugins.data import Batch
from nvdd_plugins.decomposition import DecompositionFrame, GhostImages, SpatialPartitioner
from nvdd_plugins.distributed_model.evaluation.derivatives import Leaves, Wanted
from nvdd_plugins.distributed_model.evaluation.runner import SpecRunner
from nvdd_plugins.distributed_model.evaluation.shells import ThickShell
from nvdd_plugins.distributed_model.rows.chunk_grid import (
    ChunkPlan,
    chunk_rows,
    fitting_chunks,
    measured_row_limit,
    partitioned,
)
from nvdd_plugins.distributed_model.rows.view_build import padded_pairs, slot_count
from nvdd_plugins.geometry import build_neighbor_list, rows_times_3x3
from nvdd_plugins.spec import OutputKind

__all__ = ["ChunkedRows"]

logger = logging.getLogger(__name__)

Chunk = tuple[torch.Tensor, torch.Tensor, int]
"""A chunk's rows: the atoms they are images of, the images' lattice units, own atoms (first)."""


class ChunkedRows:
    """Evaluate rows chunk by chunk in a `ThickShell` through `runner`'s forward.

    Args:
        runner: the runner of the model and its spec.
        shell: the thick shell (its `chunk_rows` bounds the rows per chunk).
        grid: chunks per axis, fixed (then `chunk_rows` is not used).
    """

    def __init__(
        self, runner: SpecRunner, shell: ThickShell, grid: tuple[int, int, int] | None = None
    ) -> None:
        self.runner = runner
        self.model = runner.model
        self.n_layers = shell.n_layers
        self.width = shell.n_layers * float(self.model.cutoff)
        self.grid = grid
        self.max_atoms = shell.chunk_rows if isinstance(shell.chunk_rows, int) else None
        self._measure = shell.chunk_rows == "auto"
        self.last_plan: ChunkPlan | None = None  # of the last evaluation
        self._grid_hint: tuple[int, int, int] | None = None
        # a kernel model's stress is the sum of its per-atom stresses
        kinds = runner.spec.output_kinds
        self._own_stress = "stress" not in self.model.model_config.autograd_outputs and (
            kinds.get("stresses") is OutputKind.PER_NODE
        )

    def evaluate(
        self,
        positions: torch.Tensor,
        atomic_numbers: torch.Tensor,
        cell: torch.Tensor,
        pbc: torch.Tensor,
        n_targets: int,
        wanted: Wanted,
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """The atoms `positions[:n_targets]` among environment atoms (the rest, e.g. a rank's
        ghosts), in `cell` (3, 3) periodic along `pbc` (3,); forces are taken against
        `positions` when they require grad. With no target, the rows are evaluated once as
        they are (so every rank's outputs are alike).

        Returns, detached: the model's outputs by kind (per-atom ones over every row, the
        targets' filled; per-system ones summed over chunks), and the derivatives of the
        targets' energy: "forces" (-dE/dx of every row), "stress" (1, 3, 3) and per-atom
        "stresses" (every row; an environment row's share is owed to its atom) as wanted.
        """
        cell = cell.detach()
        n_rows = positions.shape[0]
        if n_targets:
            partitioner, images = self._chunks(
                positions.detach(), atomic_numbers, cell, pbc, n_targets
            )
            self.last_plan = ChunkPlan.of(partitioner, images, n_targets)
            chunks = chunk_rows(partitioner, images, positions.detach(), n_targets)
            wrapped = partitioner.wrapped_axes
        else:
            whole = torch.arange(n_rows, device=positions.device)
            chunks = [(whole, torch.zeros_like(positions, dtype=torch.long), 0)] if n_rows else []
            wrapped = torch.zeros(3, dtype=torch.bool, device=positions.device)
        out: dict[str, torch.Tensor] = {}
        shapes = {"forces": (n_rows, 3), "stress": (1, 3, 3), "stresses": (n_rows, 3, 3)}
        asked = (positions.requires_grad, wanted.stress, wanted.stresses)
        derived = {
            name: positions.new_zeros(shapes[name])
            for name, on in zip(shapes, asked, strict=True)
            if on
        }
        evaluate = partial(self._evaluate_chunk, positions, atomic_numbers, cell, wanted)
        for chunk in chunks:
            atoms, _, n_owned = chunk
            if n_owned == 0 and n_targets:
                continue
            found, found_derived = evaluate(chunk, wrapped)
            self._gather(out, found, atoms, n_owned, n_rows)
            for name, value in found_derived.items():
                if name == "stresses":  # of the chunk's rows
                    derived[name].index_add_(0, atoms, value)
                else:
                    derived[name] += value
        if self._own_stress and "stresses" in out:
            out["stress"] = out["stresses"][:n_targets].sum(dim=0, keepdim=True)
        return out, derived

    def _gather(
        self,
        out: dict[str, torch.Tensor],
        found: dict[str, torch.Tensor],
        atoms: torch.Tensor,
        n_owned: int,
        n_rows: int,
    ) -> None:
        """Add one chunk's outputs `found` to `out`: per-atom ones at the chunk's own atoms
        (rows `atoms[:n_owned]` of `n_rows`), per-system sums added, the rest as given."""
        kinds = self.runner.spec.output_kinds
        for name, value in found.items():
            kind = OutputKind.PER_GRAPH if name == "energy" else kinds.get(name)
            if kind is OutputKind.PER_NODE:
                if not value.dim() or value.shape[0] != atoms.shape[0]:
                    continue
                if name not in out:
                    out[name] = value.new_zeros(n_rows, *value.shape[1:])
                out[name][atoms[:n_owned]] = value[:n_owned]
            elif kind is OutputKind.PER_GRAPH and name in out:
                out[name] = out[name] + value
            else:
                out[name] = value

    def _chunks(
        self,
        positions: torch.Tensor,
        atomic_numbers: torch.Tensor,
        cell: torch.Tensor,
        pbc: torch.Tensor,
        n_targets: int,
    ) -> tuple[SpatialPartitioner, GhostImages]:
        """The fewest chunks whose rows all fit the row limit; chunks holding no target are
        not evaluated and not counted. Along open axes the chunks tile the span of the
        targets (the outermost reach past it, over their environment)."""
        open_axes = ~pbc.reshape(3, 1).bool().to(cell.device)
        spanned = torch.where(open_axes, torch.zeros_like(cell), cell)
        frame = DecompositionFrame.from_system(positions[:n_targets], spanned, pbc)
        if self.grid is not None:
            return partitioned(frame, positions, self.grid, self.width)
        limit = self._row_limit(positions, atomic_numbers, cell, frame)
        try:
            partitioner, images = fitting_chunks(
                frame, positions, n_targets, limit, self.width, self._grid_hint or (1, 1, 1)
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
        """The rows per chunk: given, measured on a GPU (`measured_row_limit`), or all."""
        if self.max_atoms is None and self._measure and positions.device.type == "cuda":
            leaf = positions.detach().requires_grad_(True)
            probe = partial(self._evaluate_chunk, leaf, atomic_numbers, cell, Wanted(True, False))
            self.max_atoms = measured_row_limit(frame, positions, self.width, probe)
            logger.info("chunks of at most %d rows (from free device memory)", self.max_atoms)
        return self.max_atoms if self.max_atoms is not None else max(positions.shape[0], 1)

    def _evaluate_chunk(
        self,
        positions: torch.Tensor,
        atomic_numbers: torch.Tensor,
        cell: torch.Tensor,
        wanted: Wanted,
        chunk: Chunk,
        wrapped: torch.Tensor,
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """One chunk, periodic along the `wrapped` axes: the model's outputs on its rows,
        and the derivatives of its own atoms' energy with respect to `positions` (when they
        require grad), a strain of `cell` (3, 3) and its edge vectors, as `wanted`."""
        atoms, units, n_owned = chunk
        cell = cell.detach().reshape(1, 3, 3)
        with torch.enable_grad():
            offsets = rows_times_3x3(units.to(positions.dtype), cell[0])
            rows = positions.index_select(0, atoms) + offsets
        edge_index, unit_shifts = _pairs(rows.detach(), cell[0], wrapped, self.model.cutoff)
        leaves = Leaves(positions, wanted.stress, edge_index.shape[1] if wanted.stresses else None)

        def batch_of(rows: torch.Tensor, run_cell: torch.Tensor) -> Batch:
            shifts = rows_times_3x3(unit_shifts.to(rows.dtype), run_cell[0])
            return Batch(
                node={"positions": rows, "atomic_numbers": atomic_numbers[atoms]},
                edge={
                    "edge_index": edge_index,
                    "shifts": leaves.shifted(shifts),
                    "unit_shifts": unit_shifts,
                },
                system={"cell": run_cell, "pbc": wrapped.reshape(1, 3)},
                ptr=torch.tensor([0, atoms.shape[0]], device=atoms.device),
            )

        out, derived = self.runner.derived(leaves, rows, cell, batch_of, n_owned)
        derived.pop("pair_gradients", None)
        found = {name: value.detach() for name, value in out.items()}
        return found, {name: value.detach() for name, value in derived.items()}


def _pairs(
    rows: torch.Tensor, cell: torch.Tensor, wrapped: torch.Tensor, cutoff: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The pairs of `rows` within `cutoff` and their lattice units, in the edge slots a view
    of those rows would have (`slot_count`)."""
    neighbors = build_neighbor_list(rows, cell, wrapped, cutoff)
    n_rows, n_pairs = rows.shape[0], neighbors.edge_index.shape[1]
    return padded_pairs(
        neighbors.edge_index, neighbors.unit_shifts, n_rows, slot_count(n_pairs, n_rows)
    )
