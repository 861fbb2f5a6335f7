"""`MLIAPModel`: any nvdd model wrapper as a LAMMPS `pair_style mliap unified` model."""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from ase.data import atomic_numbers

from lammps_interface.device import DeviceRequest, parse_device, resolve_device
from lammps_interface.fallback import RedundantBridge
from lammps_interface.halo import HaloBridge
from lammps_interface.handle import attached
from lammps_interface.lammps_python import MLIAPUnified
from lammps_interface.messages import abort_on_error, notify, world
from lammps_interface.rows import LocalRows, RowResults
from nvdd_plugins.comm import Communicator, Staging
from nvdd_plugins.distributed_model import (
    NON_FINITE,
    agreed_status,
    non_finite_error,
    non_finite_kinds,
)
from nvdd_plugins.models import BaseModelMixin, model_dtype

__all__ = ["MLIAPModel"]

_RUNTIME = ("_halo", "_fallback", "_staging")
FORMAT_VERSION = 2
"""The model file's layout: 2 (this release) records it as `format_version`; files without
it are 1 (the releases before), which load with their runtime fields set afresh."""
_PERSISTENT = ("model", "dtype", "n_layers", "_numbers", "element_types", "rcutfac")
# fields newer than format 1, with what older files mean
_ADDED_SINCE_1 = {"device": None, "cuda_graphs": False}  # format 1 had no graphs
_REGENERATE = (
    "write it again with this release: `python -m lammps_interface ... -o FILE` or "
    "`MLIAPModel(model, elements).pickle(FILE)`"
)
_VIRIAL_PER_ATOM = 0x04 | 0x08
"""LAMMPS's VIRIAL_ATOM | VIRIAL_CENTROID bits of `data.vflag` (force.h): a compute wants
per-atom virials this step (`compute stress/atom`, `centroid/stress/atom`, `heat/flux`)."""


def _device_of(model: torch.nn.Module) -> torch.device:
    tensors = [*model.parameters(), *model.buffers()]
    return tensors[0].device if tensors else torch.device("cpu")


class MLIAPModel(MLIAPUnified):
    """An nvdd model wrapper for `pair_style mliap unified <file> {0|1}` (units metal).

    `.pickle(path)` writes the file. With the LAMMPS handle attached (`attach`), each rank
    evaluates its owned + ghost atoms through `DistributedModel` with a per-layer halo
    exchange, exact with LAMMPS's default ghost shell. Without it, each rank computes its
    rows redundantly with no exchange (exact only with a ghost shell of `n_layers` cutoffs and
    `ghostneigh` 1; see `lammps_interface.fallback`). Forces go straight into LAMMPS's force
    array (ghost rows included, summed into owners by LAMMPS), so the global virial and
    pressure are right (LAMMPS's f . r). On a step where a compute wants per-atom virials
    (`compute stress/atom`, `heat/flux`), the forces go in per listed pair instead,
    dE/drij through `data.update_pair_forces`, and LAMMPS tallies each pair's virial half
    onto each of its two atoms (-rij (x) dE/drij; see `nvdd_plugins.models.virials`).

    Halo mode uses ML-IAP's own pair list only on such steps; `neigh_modify exclude group
    all all` in the input spares ML-IAP's C++ side that list (its cost grows faster than the
    atom count), leaves LAMMPS's ghost shell as it is, and is refused on a step that needs
    per-atom virials. Not in fallback mode, which computes from ML-IAP's pairs (nor with
    computes that list pairs, `rdf`, `coord/atom`: LAMMPS excludes them from every list).

    Args:
        model: the nvdd model wrapper (energies in eV, positions in Å).
        element_types: element symbols, in the order `pair_coeff * * <elements>` names them.
        dtype: compute in this dtype (the model is converted); default: the model's own
            (float64 for a model without floating-point tensors).
        n_layers: message-passing layers, needed only in fallback mode; default: what the
            model's spec declares (1 for the shipped Lennard-Jones).
        device: where each rank computes: None (default) for the rank's own GPU when CUDA
            is present (its rank among the ranks on its node, modulo the node's GPU count),
            else the CPU; "cpu"; "cuda" (the rank's own GPU); "cuda:K"; or a
            `torch.device`. Resolved on each rank at its first step, so a file written on
            a CPU machine runs on a GPU one (the file holds the model on the CPU).
        cuda_graphs: replay the model call from a captured CUDA graph between rebuilds in
            halo mode on a GPU with one LAMMPS rank (exchanges between ranks run through MPI
            on the host, which a graph cannot hold): "auto" (default) while the replays pay,
            as `DomainParallel` does, and eager calls where they cannot replay; True always
            (an error where it cannot); False never.
    """

    def __init__(
        self,
        model: BaseModelMixin,
        element_types: Sequence[str],
        dtype: torch.dtype | None = None,
        n_layers: int | None = None,
        device: DeviceRequest = None,
        cuda_graphs: bool | str = "auto",
    ) -> None:
        unknown = [e for e in element_types if e not in atomic_numbers]
        if not (isinstance(cuda_graphs, bool) or cuda_graphs == "auto"):
            raise ValueError(f'cuda_graphs must be True, False or "auto", got {cuda_graphs!r}')
        if unknown or not element_types:
            raise ValueError(f"element_types must be element symbols, got {list(element_types)}")
        if not model.model_config.edge_energy:
            raise ValueError(
                f"{type(model).__name__} has a reciprocal-space term (a sum over the periodic "
                "cell, such as Ewald or PME), and ML-IAP hands a model only atoms and their "
                "neighbour pairs, so it cannot run through `pair_style mliap unified`. Run it "
                "with DomainParallel or the ASE calculator; for fixed point charges, LAMMPS "
                "itself can take the short-range part as the pair style and the "
                "electrostatics into its own kspace (`pair_style hybrid/overlay ... "
                "coul/long` with `kspace_style ewald` or `pppm`); learned charges (AIMNet2) "
                "have no such split"
            )
        neighbors = model.model_config.neighbor_config
        if neighbors is not None and neighbors.ghost_pair_cutoff is not None:
            raise ValueError(  # real45 (issue 45): CHGNet's bond graph
                f"{type(model).__name__} reads pairs between two ghost atoms (a bond graph: "
                "NeighborConfig.ghost_pair_cutoff), which ML-IAP does not list, so it cannot "
                "run through `pair_style mliap unified` yet: run it with DomainParallel or the "
                "ASE calculator"
            )
        # ML-IAP lists pairs closer than 2 x rcutfac.
        super().__init__(None, list(element_types), 1, 1, model.cutoff / 2)
        self.dtype = dtype or model_dtype(model) or torch.float64
        self.model = model.to(self.dtype)
        spec = model.distribution_spec()
        self.n_layers = n_layers if n_layers is not None else getattr(spec, "n_layers", None)
        self.device = parse_device(device)
        self.cuda_graphs = cuda_graphs
        self._numbers = np.array([atomic_numbers[e] for e in element_types], dtype=np.int64)
        self._halo: HaloBridge | None = None
        self._fallback: RedundantBridge | None = None
        self._staging: Staging | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(dict.fromkeys(_RUNTIME), interface=None, format_version=FORMAT_VERSION)
        if _device_of(self.model).type != "cpu":  # the file pins no device
            state["model"] = copy.deepcopy(self.model).to("cpu")
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Load a model file of this release or an older one (runtime fields start empty);
        a newer or incomplete file is refused with what to do."""
        state = {**_ADDED_SINCE_1, **state}
        version = state.pop("format_version", 1)
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise ValueError(
                f"this nvdd model file has format version {version!r}, newer than this "
                f"release reads ({FORMAT_VERSION}): update nvdd, or {_REGENERATE}"
            )
        missing = [name for name in _PERSISTENT if name not in state]
        if missing:
            raise ValueError(
                f"this nvdd model file (format version {version}) lacks {missing}: {_REGENERATE}"
            )
        self.__dict__.update(state)
        self.__dict__.update(dict.fromkeys(_RUNTIME))

    def compute_descriptors(self, data: Any) -> None:
        """Not used: the model maps positions to energies and forces in one pass."""

    def compute_gradients(self, data: Any) -> None:
        """Not used: the model maps positions to energies and forces in one pass."""

    def compute_forces(self, data: Any) -> None:
        """Add this rank's forces to LAMMPS's force array and set its energies (every step);
        per pair when LAMMPS asks for per-atom virials."""
        with abort_on_error():
            lmp = attached()
            staging = self._staging_for(lmp)
            per_atom_virials = bool(int(getattr(data, "vflag", 0)) & _VIRIAL_PER_ATOM)
            # the fallback rebuilds positions from the pair vectors; halo mode reads them
            # through the handle, and ML-IAP's pairs only to give forces per listed pair
            fallback = lmp is None
            rows = LocalRows.from_data(
                data, self._numbers, staging, vectors=fallback, pairs=fallback or per_atom_virials
            )
            bridge = self._bridge(lmp, staging)
            results = bridge.evaluate(rows, pair_forces=per_atom_virials)
            _check_finite(bridge.comm, results, rows)
            self._write(data, rows, results)

    def _bridge(self, lmp: Any, staging: Staging) -> HaloBridge | RedundantBridge:
        # A Kokkos build's data.forward_exchange / reverse_exchange (LAMMPS releases after
        # 4Feb2025) would serve as the halo exchange here instead of the handle's MPI plan.
        if lmp is not None:
            if self._halo is None or self._halo.lmp is not lmp:
                padding = int(self._numbers[0])
                self._halo = HaloBridge(
                    self.model, lmp, (self.dtype, padding), staging, self.cuda_graphs
                )
                notify(
                    f"halo mode: {type(self.model).__name__} on {self._halo.comm.size} rank(s), "
                    "per-layer ghost exchange through the attached LAMMPS handle"
                )
            return self._halo
        if self._fallback is None:
            if self.n_layers is None:
                raise ValueError(
                    "no LAMMPS handle is attached and MLIAPModel has no n_layers for the "
                    "fallback: attach the handle (lammps_interface.attach) or pass n_layers"
                )
            self._fallback = RedundantBridge(self.model, self.dtype, self.n_layers, staging)
            notify(
                "fallback mode: no LAMMPS handle attached, no ghost exchange, LAMMPS's units "
                f"unchecked (the model needs units metal). {self._needs()}",
                logging.WARNING,
            )
        return self._fallback

    def _staging_for(self, lmp: Any) -> Staging:
        """The host buffers of this rank's device, which is chosen (and the model moved
        there) at the first step: collective over LAMMPS's ranks."""
        if self._staging is None:
            comm = lmp.get_mpi_comm() if lmp is not None else world()
            device = resolve_device(self.device, comm)
            self.model = self.model.to(device)
            self._staging = Staging(device)
            notify(f"computing on {device} (rank 0; each rank takes its own GPU)")
        return self._staging

    def _needs(self) -> str:
        if self.n_layers == 1:
            return "A one-layer model is exact with LAMMPS's default ghost shell."
        return (
            f"Every rank computes its ghost shell redundantly: exact only with `comm_modify "
            f"cutoff` >= {self.n_layers} x {self.model.cutoff:g} Å + neighbor skin and "
            "`pair_style mliap unified <file> 1`"
        )

    @staticmethod
    def _write(data: Any, rows: LocalRows, results: RowResults) -> None:
        if results.pair_forces is not None:
            if rows.pair_i.numel():  # LAMMPS adds them and tallies each pair's virial
                data.update_pair_forces(np.ascontiguousarray(results.pair_forces))
        elif rows.ntotal:
            forces = data.f
            forces += results.forces
        data.energy = float(results.energies[: rows.nlocal].sum())
        if rows.list_rows.size:  # eatoms is unallocated on a rank without atoms
            data.eatoms = np.ascontiguousarray(results.energies[rows.list_rows])


def _check_finite(comm: Communicator, results: RowResults, rows: LocalRows) -> None:
    """Raise `NonFiniteError` on every rank when any rank's owned rows have a NaN/inf energy
    or force (collective, every step: the status all-reduce, after the evaluation; the rows
    are looked at on the host, and gathered, only once some rank is flagged)."""
    if agreed_status(comm, torch.tensor(0 if results.finite else NON_FINITE)) != NON_FINITE:
        return
    energies = torch.from_numpy(results.energies[: rows.nlocal])
    forces = torch.from_numpy(results.forces[: rows.nlocal])
    what, labels = _owned_labels(rows.nlocal)
    raise non_finite_error(comm, labels, non_finite_kinds(energies, forces), what)


def _owned_labels(nlocal: int) -> tuple[str, torch.Tensor]:
    """How owned atoms are named, alike on every rank: LAMMPS atom ids through the handle,
    else local rows."""
    lmp = attached()
    if lmp is None:
        return "local rows", torch.arange(nlocal)
    ids = lmp.numpy.extract_atom("id", nelem=nlocal) if nlocal else []
    return "atom ids", torch.as_tensor(np.asarray(ids, dtype=np.int64))
