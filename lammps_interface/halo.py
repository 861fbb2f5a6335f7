"""Handle mode: LAMMPS's owned + ghost rows through `GivenRowsModel`, with a per-layer halo
exchange over a ghost -> owner plan built from LAMMPS atom ids and LAMMPS's communicator.

A ghost shell of one cutoff (LAMMPS's default) is then exact for any number of
message-passing layers. Rows, pairs and the per-layer exchange stay on the model's device;
the exchange between ranks goes through host memory (`MPICommunicator`).

The model's pairs are listed on the device from the rows' positions, within cutoff +
`VERLET_SKIN`, and kept while LAMMPS's rows stay the same atoms and none moved more than
half that skin: the model sees a graph that changes only at rebuilds, as under
`DomainParallel` (ML-IAP's own pair list, new at every step, is used only on steps that
need forces per listed pair, and is then checked to hold every pair within the cutoff, so
that `neigh_modify exclude group all all`, which spares ML-IAP's C++ side its pair list on
the other steps, cannot give wrong per-atom virials).

Between rebuilds the model call can replay from a captured CUDA graph (`ReplayedCalls`), as
`DomainParallel` replays its steps: the held view is returned only while LAMMPS's rows are
the same and none moved more than half the skin, so a replay is valid whenever the view is
the captured one. Its views then have fixed shapes (empty pair slots hold padding pairs, not
the sentinel a host-side filter would remove, which a capture skips). Only a rank that
exchanges nothing can replay (one rank: its ghosts are self-images, copied by index on the
device); an exchange through MPI runs on the host, which a graph cannot hold.
"""

from __future__ import annotations

import torch

from lammps_interface.handle import read_atoms, require_metal_units
from lammps_interface.lammps_python import lammps
from lammps_interface.messages import notify
from lammps_interface.rows import LocalRows, RowResults
from nvdd_plugins.comm import LocalCommunicator, MPICommunicator, Staging
from nvdd_plugins.distributed_model import PAIR_GRADIENTS, GivenRows, GivenRowsModel
from nvdd_plugins.dynamics import CudaStepGraph, ReplayedCalls
from nvdd_plugins.geometry import build_neighbor_list
from nvdd_plugins.models import BaseModelMixin

__all__ = ["EAGER_CALLS", "VERLET_SKIN", "HaloBridge"]

_PER_ROW = frozenset({"energy", "energies", "forces"})

VERLET_SKIN = 0.5
"""Skin (Å) of the pair list the bridge keeps between rebuilds; a matter of speed only
(results are exact for any skin: a row that moved more than half of it rebuilds the list)."""

EAGER_CALLS = 1
"""Calls of a new view that run eagerly before its capture, after the checked forward that
follows a rebuild (which `GivenRowsModel.replayed` never captures): the first forward on the
shortcut path verifies the spec's shortcuts and fills the view's lazy index caches (a cache
made inside a capture would live in its memory pool)."""


class HaloBridge:
    """Evaluate a model on one rank's LAMMPS rows with halo exchanges between ranks.

    Args:
        model: the nvdd model wrapper.
        lmp: the attached LAMMPS instance (ids, positions, box, communicator).
        compute: the dtype the model computes in, and the atomic number given to padding
            rows (one the model knows).
        staging: the host buffers of the model's device (the model is already there).
        cuda_graphs: `MLIAPModel`'s `cuda_graphs` (False, True or "auto").

    Attributes:
        comm: LAMMPS's ranks (a local communicator for one rank whose calls replay).
        graphs: the model call's captured graphs where asked for and where they can replay:
            on a GPU, with one rank (else None).
        layout: the `GivenRowsModel` of the rows (its `graphs_required` is
            `cuda_graphs=True`: capture every new view even when replays do not pay, and
            raise when a capture fails).
    """

    def __init__(
        self,
        model: BaseModelMixin,
        lmp: lammps,
        compute: tuple[torch.dtype, int],
        staging: Staging,
        cuda_graphs: bool | str = False,
    ) -> None:
        self.lmp = lmp
        self.dtype, padding_species = compute
        self.staging = staging
        self.cutoff = float(model.cutoff)
        mpi = lmp.get_mpi_comm()
        replayable = mpi.Get_size() == 1 and staging.device.type == "cuda"
        if cuda_graphs is True and not replayable:
            raise ValueError(
                "cuda_graphs=True needs one LAMMPS rank on a GPU (exchanges between ranks run "
                'through MPI on the host, which a graph cannot hold): use "auto" or False'
            )
        graphs = bool(cuda_graphs) and replayable
        # a replayed rank exchanges nothing: its ghosts are self-images, copied on the device
        self.comm = LocalCommunicator() if graphs else MPICommunicator(mpi)
        self.model, self.padding_species = model, padding_species
        # replayed calls need views of fixed shapes (no host-side filtering in a capture)
        self.layout = self._layout(fixed_shapes=graphs, required=cuda_graphs is True)
        what = "the LAMMPS bridge's model call"
        self.graphs = ReplayedCalls(CudaStepGraph, what, EAGER_CALLS) if graphs else None
        self._noted_pairs = False

    def _layout(self, fixed_shapes: bool, required: bool) -> GivenRowsModel:
        """A new layout of this bridge's rows (`fixed_shapes`: as a capture replays them;
        `required`: every new view captured, a failed capture an error)."""
        return GivenRowsModel(
            self.model,
            self.comm,
            self.padding_species,
            VERLET_SKIN,
            fixed_shapes=fixed_shapes,
            graphs_required=required,
        )

    def replay_through(self, graphs: ReplayedCalls, required: bool) -> None:
        """Replay the model calls through `graphs` (`required`: capture every new view and
        raise when a capture fails), on views of fixed shapes (no host-side filtering,
        which a capture cannot hold); the layout starts anew (a new view at the next call)."""
        self.graphs = graphs
        self.layout = self._layout(fixed_shapes=True, required=required)

    def evaluate(self, rows: LocalRows, pair_forces: bool = False) -> RowResults:
        """Energies and forces of every row, and with `pair_forces` the force of every
        listed pair (collective: all ranks call it each step)."""
        require_metal_units(self.lmp)
        if not pair_forces:
            self._note_unread_pairs(rows)
        atoms = read_atoms(self.lmp, rows.nlocal, rows.ntotal)
        # forces per listed pair need ML-IAP's own pairs as the view's first edges
        edges = rows.edges(ghost_pairs=False)[0] if pair_forces else None
        exact = self.staging.to_device("positions", atoms.positions)
        if pair_forces:
            self._require_every_pair(rows, exact)
        positions = exact.to(self.dtype)
        ids = self.staging.to_device("ids", atoms.ids).long()
        cell = torch.from_numpy(atoms.cell).to(positions.device, self.dtype).unsqueeze(0)
        given = self.layout.prepare(
            GivenRows(rows.nlocal, positions, rows.numbers, ids, cell, edges)
        )
        if edges is not None:
            out = self.layout.evaluate_fixed(given, _PER_ROW | {PAIR_GRADIENTS})
            return RowResults.of(out, rows, self.staging, ghost_pairs=False)

        out = None
        if self.graphs is not None:  # the view holds the rows' other tensors
            out = self.layout.replayed(self.graphs, given, _PER_ROW, (positions, cell))
        if out is None:
            out = self.layout.evaluate_fixed(given, _PER_ROW)
        return RowResults.of(out, rows, self.staging)

    def _note_unread_pairs(self, rows: LocalRows) -> None:
        """Say once (rank 0) what an input without `neigh_modify exclude group all all`
        costs: ML-IAP's C++ side lists pairs at every step that this mode does not read."""
        if self._noted_pairs or rows.listed_pairs == 0:
            return
        self._noted_pairs = True
        notify(
            f"ML-IAP lists {rows.listed_pairs} pairs on rank 0 at every step that halo mode "
            "does not read (LAMMPS builds and walks them on the CPU: a MACE step at 108,000 "
            "atoms took 2.9x as long on an H200, docs/benchmarks.md); add `neigh_modify "
            "exclude group all all` to the input unless it needs per-atom virials or a "
            "compute that uses neighbour lists (rdf, coord/atom)"
        )

    def _require_every_pair(self, rows: LocalRows, positions: torch.Tensor) -> None:
        """Refuse an ML-IAP pair list that misses pairs within the cutoff centred on owned
        rows (`neigh_modify exclude`): forces per listed pair would miss theirs."""
        listed = int((rows.pair_i < rows.nlocal).sum())
        within = build_neighbor_list(
            positions, None, (False,) * 3, self.cutoff, touching=rows.nlocal
        )
        expected = int((within.edge_index[0] < rows.nlocal).sum())
        if listed != expected:
            raise ValueError(
                f"per-atom virials (compute stress/atom, centroid/stress/atom, heat/flux) are "
                f"tallied per ML-IAP pair, and ML-IAP lists {listed} pairs centred on this "
                f"rank's atoms where {expected} lie within the model's cutoff: remove "
                "`neigh_modify exclude` from the input for runs with per-atom virials"
            )
