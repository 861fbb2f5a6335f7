"""`DomainDecomposedCalculator`: an ASE calculator that decomposes space over MPI ranks.

Every rank holds the full `Atoms` (the ASE convention under `mpirun`); each evaluates the
atoms of its sub-domain plus ghosts through `ReplicatedModel`, and all ranks return the same
full results. Run scripts as `mpirun -n P python -m mpi4py script.py` so an exception on one
rank ends all of them.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import traceback
import zlib
from typing import Any, ClassVar, Literal

import numpy as np
import torch
from ase import Atoms
from ase.calculators.calculator import Calculator, all_changes
from ase.stress import full_3x3_to_voigt_6_stress

from nvdd_plugins.comm import (
    Communicator,
    LocalCommunicator,
    MPICommunicator,
    detect_launch,
    end_job_on_exception,
    resolve_communicator,
)
from nvdd_plugins.config import DomainConfig, StrategyKind
from nvdd_plugins.data import Batch
from nvdd_plugins.distributed_model import ReplicatedModel
from nvdd_plugins.dynamics import CudaStepGraph, ReplayedCalls
from nvdd_plugins.errors import is_raised_on_every_rank, raised_on_every_rank
from nvdd_plugins.models import HEAT_FLUX_TENSORS, BaseModelMixin, heat_flux_parts, model_dtype

__all__ = ["DomainDecomposedCalculator"]

# A new decomposition is needed when these change; positions and cell are tracked by the
# rebuild logic (skin) instead.
_RESET_ON = {"numbers", "pbc"}
# Changes written into the device batch in place; any other change builds a new one.
_IN_PLACE = {"positions", "cell"}
# The heat flux (3,) of the atoms' current velocities, eV Å/fs, and its two parts.
_HEAT_FLUX = ("heat_flux", "heat_flux_convective", "heat_flux_potential")

# At import, not in the constructor: a rank that raises before it builds a calculator (also
# without `python -m mpi4py`) must abort every rank, not leave them waiting in the first
# evaluation.
if (_launch := detect_launch()).launcher == "mpirun" and _launch.world_size > 1:
    end_job_on_exception("mpirun")


def _world_communicator(comm: Any) -> Communicator:
    if comm is None:
        try:
            from mpi4py import MPI  # optional: without mpi4py the calculator runs on one rank
        except ImportError:
            comm = LocalCommunicator()
        else:
            comm = MPI.COMM_WORLD
    resolved = resolve_communicator(comm)
    if resolved.size == 1:
        # nothing to exchange: an MPI communicator would copy every result to the host and
        # back (and such copies cannot be captured in a CUDA graph)
        return LocalCommunicator()
    if isinstance(resolved, MPICommunicator):
        # Also without `python -m mpi4py`: one rank's exception must abort every rank.
        end_job_on_exception("mpirun")
    return resolved


def _default(keyword: str) -> Any:
    """The default of one of the calculator's keywords (its signature is the one record)."""
    return inspect.signature(DomainDecomposedCalculator).parameters[keyword].default


class DomainDecomposedCalculator(Calculator):
    """ASE calculator evaluating `model` domain-decomposed over an MPI communicator.

    Args:
        model: an nvdd model wrapper (its `NeighborConfig` gives the cutoff).
        skin: Verlet skin in Å: ghosts and neighbour lists are rebuilt only when an atom
            moved more than skin / 2, or the cell changed.
        comm: an mpi4py communicator (default `MPI.COMM_WORLD`; one rank without mpi4py) or
            any nvdd `Communicator`.
        dtype: floating dtype of the evaluation; default: the model's own (float64 for a
            model without floating-point tensors). Another dtype than the model's is refused.
        device: torch device of the evaluation.
        strategy: `StrategyKind.HALO` (spatial sub-domains) or `StrategyKind.GRAPH_PARTITION`
            (index shards; for models that build their own graph).
        cuda_graphs: replay the force call between neighbour-list rebuilds as one captured
            CUDA graph (docs/cuda_graphs.md). "auto" (default): on for a CUDA `device`, one
            rank, halo strategy, no `chunk_atoms`, a model that weighs pairs beyond its
            cutoff zero, while the replays save more than the captures cost; off otherwise.
            True: the same without the payoff check, with a clear error where it cannot
            work. False: eager calls.
        config: a whole `DomainConfig` instead of `skin`, `strategy` and `cuda_graphs`
            (which must then keep their defaults): every option of `DomainParallel`'s runs,
            `chunk_atoms`, `compile=True` and `halo_layers` included. Its `mesh` is used
            when `comm` is not given.
    """

    implemented_properties: ClassVar[list[str]] = [
        "energy",
        "free_energy",
        "forces",
        "stress",
        "energies",
        "stresses",
        "magmoms",  # models with per-atom magnetic moments (CHGNet)
        *_HEAT_FLUX,
    ]

    def __init__(
        self,
        model: BaseModelMixin,
        skin: float = 0.5,
        comm: Any = None,
        dtype: torch.dtype | None = None,
        device: str | torch.device = "cpu",
        strategy: StrategyKind = StrategyKind.HALO,
        cuda_graphs: bool | Literal["auto"] = "auto",
        config: DomainConfig | None = None,
    ) -> None:
        super().__init__()  # no files: ASE's label/directory/restart arguments do not apply
        self.model = model
        options = dict(skin=skin, strategy=strategy, cuda_graphs=cuda_graphs)
        if config is None:
            config = DomainConfig(cutoff=model.cutoff, **options)
        elif changed := [name for name, value in options.items() if value != _default(name)]:
            raise ValueError(
                f"{', '.join(changed)} given beside config: set them on the DomainConfig instead"
            )
        self.comm = _world_communicator(comm if comm is not None else config.mesh)
        self.dtype = _evaluation_dtype(model, dtype)
        self.device = torch.device(device)
        #: the decomposition's options (checked here, not at the first, collective, call)
        self.config = dataclasses.replace(config, mesh=self.comm)
        if self.config.cuda_graphs is True and self.device.type != "cuda":
            raise ValueError(
                f"cuda_graphs=True needs a CUDA device, not {self.device}: pass "
                'device="cuda", or cuda_graphs="auto" (off on the CPU) or False'
            )
        self._replicated: ReplicatedModel | None = None
        self._graphed: ReplayedCalls | None = None
        self._batch: Batch | None = None  # the atoms on the device, updated in place

    @property
    def replicated_model(self) -> ReplicatedModel:
        """The `ReplicatedModel` of the current decomposition (made on first use)."""
        if self._replicated is None:
            self._replicated = ReplicatedModel(self.model, self.config, captured_steps=True)
            graphs = self._replicated.config.cuda_graphs is True
            what = "the calculator's force call"
            self._graphed = ReplayedCalls(CudaStepGraph, what) if graphs else None
        return self._replicated

    @property
    def graphed_calls(self) -> ReplayedCalls | None:
        """The replayed force calls of the current decomposition (None: eager calls)."""
        return self._graphed

    def _check_same_atoms(self, atoms: Atoms) -> None:
        parts = (atoms.numbers, atoms.positions, atoms.cell.array, atoms.pbc)
        digest = 0
        for part in parts:
            digest = zlib.crc32(np.ascontiguousarray(part).tobytes(), digest)
        digests = self.comm.all_gather(torch.tensor([digest, len(atoms)], dtype=torch.long))
        if any(not torch.equal(d, digests[0]) for d in digests):
            raise raised_on_every_rank(
                ValueError(
                    "ranks hold different Atoms: every rank must pass the same positions, numbers, "
                    "cell and pbc to the calculator (broadcast them, or seed random numbers alike)"
                )
            )

    def check_state(self, atoms: Atoms, tol: float = 1e-15) -> list[str]:
        """ASE's check for changes since the last call, with a fast path: numpy's isclose
        over every array costs about as much as a replayed force call of 1,000 atoms. When
        all but the positions are equal bit for bit, positions that differ at all count as
        moved (ASE ignores moves below `tol`: a stricter check, never a stale result);
        anything else is ASE's comparison."""
        last = self.atoms
        if last is None or self.ignored_changes or last.arrays.keys() != atoms.arrays.keys():
            return super().check_state(atoms, tol)
        others = (set(all_changes) - {"positions", "cell", "pbc"}) & atoms.arrays.keys()
        same = np.array_equal(last.cell.array, atoms.cell.array) and np.array_equal(
            last.pbc, atoms.pbc
        )
        if not (same and all(np.array_equal(last.arrays[k], atoms.arrays[k]) for k in others)):
            return super().check_state(atoms, tol)
        return [] if np.array_equal(last.positions, atoms.positions) else ["positions"]

    def calculate(
        self,
        atoms: Atoms | None = None,
        properties: list[str] | tuple[str, ...] = ("energy",),
        system_changes: list[str] = all_changes,
    ) -> None:
        """Compute `properties` for `atoms`; identical results on every rank.

        An exception raised on every rank alike (different Atoms on the ranks, no atoms,
        non-finite results) propagates on every rank. Any other exception ends the job with
        its message: it left this collective calculation on this rank only, and the other
        ranks wait in it for this one, which no later call can finish.
        """
        try:
            self._calculate(atoms, properties, system_changes)
        except BaseException as err:
            if self.comm.size > 1 and not is_raised_on_every_rank(err):
                self.comm.end_job(
                    f"DomainDecomposedCalculator: {type(err).__name__}: {err} was raised on "
                    "this rank only, inside a calculation the other ranks wait in and "
                    "cannot finish without it; ending the job (catching it would leave "
                    f"them waiting forever):\n{traceback.format_exc()}"
                )
            raise

    def _calculate(
        self,
        atoms: Atoms | None,
        properties: list[str] | tuple[str, ...],
        system_changes: list[str],
    ) -> None:
        super().calculate(atoms, properties, system_changes)
        atoms = self.atoms
        if self.comm.size > 1:  # one rank holds one copy: nothing to compare
            self._check_same_atoms(atoms)
        if len(atoms) == 0:
            raise raised_on_every_rank(ValueError("the Atoms object has no atoms"))
        if _RESET_ON & set(system_changes):
            self._replicated = None
        batch = self._device_batch(atoms, system_changes)
        has_volume = atoms.cell.rank == 3
        result = self._evaluate(batch, _wanted(properties, has_volume, self.comm.size))
        energy = float(result["energy"].cpu().sum())
        forces, energies = result["forces"].cpu(), result["energies"].cpu()
        # on the host copies, no kernels; every rank holds every result, so all decide alike
        # and only a failing call gathers (the report)
        if not (math.isfinite(energy) and bool(torch.isfinite(forces).all())):
            raise self.replicated_model.non_finite_error(energies, forces)
        self.results = {
            "energy": energy,
            "free_energy": energy,
            "forces": forces.numpy(),
            "energies": energies.numpy(),
        }
        if has_volume and "stress" in result:
            self.results["stress"] = full_3x3_to_voigt_6_stress(result["stress"][0].cpu().numpy())
        if has_volume and "stresses" in result:
            self.results["stresses"] = full_3x3_to_voigt_6_stress(result["stresses"].cpu().numpy())
        if "magmoms" in result:
            self.results["magmoms"] = result["magmoms"].cpu().numpy()
        if HEAT_FLUX_TENSORS in result:
            self.results.update(_heat_flux(atoms, result))

    def _device_batch(self, atoms: Atoms, system_changes: list[str]) -> Batch:
        """The atoms on the device: the last batch with the new positions and cell written
        in place (a captured call reads them there), or a new batch after other changes."""
        batch = self._batch
        if batch is None or batch.num_nodes != len(atoms) or set(system_changes) - _IN_PLACE:
            self._batch = Batch.from_atoms(atoms, device=self.device, dtype=self.dtype)
            return self._batch
        batch.positions.copy_(torch.from_numpy(atoms.positions))
        batch.cell[0].copy_(torch.from_numpy(atoms.cell.array))
        return batch

    def _evaluate(self, batch: Batch, wanted: set[str]) -> dict[str, torch.Tensor]:
        """A replay of the captured call when graphs are on and the view holds, else an
        eager (collective) evaluation, which rebuilds when needed."""
        model = self.replicated_model
        replayed = None
        if self._graphed is not None and HEAT_FLUX_TENSORS not in wanted:
            # the batch keeps its position and cell tensors between calls, written in place;
            # a new batch is a new capture (the graph reads its other tensors)
            inputs = (batch.positions, batch.cell)
            replayed = model.replayed(self._graphed, batch, frozenset(wanted), inputs, batch)
        return replayed if replayed is not None else model(batch, wanted)


def _wanted(properties: list[str] | tuple[str, ...], has_volume: bool, ranks: int) -> set[str]:
    """What one evaluation computes: energy and forces, and the stress (a strain
    derivative) of a cell with volume only when asked for at one rank. On several ranks
    everything but per-atom stresses, whatever was asked: a later get_stress() on some ranks
    only is then served from the cache instead of waiting for the others. Per-atom stresses
    cost a per-edge gradient, so they are computed only when asked for (get_stresses() is
    collective then)."""
    wanted = {"energy", "forces"}
    if has_volume and (ranks > 1 or "stress" in properties):
        wanted.add("stress")
    if has_volume and "stresses" in properties:
        wanted.add("stresses")
    if "magmoms" in properties:  # a model output, asked for by name (collective then)
        wanted.add("magmoms")
    if not set(_HEAT_FLUX).isdisjoint(properties):  # collective then, as get_stresses()
        wanted.add(HEAT_FLUX_TENSORS)
    return wanted


def _heat_flux(atoms: Atoms, result: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """The heat flux of `atoms` at their current velocities, eV Å/fs, and its parts."""
    tensors = result[HEAT_FLUX_TENSORS].cpu()
    like = {"dtype": tensors.dtype}
    masses = torch.tensor(atoms.get_masses(), **like)
    velocities = torch.tensor(atoms.get_velocities(), **like)
    parts = heat_flux_parts(result["energies"].cpu(), masses, velocities, tensors)
    convective, potential = (part.numpy() for part in parts)
    return dict(zip(_HEAT_FLUX, (convective + potential, convective, potential), strict=True))


def _evaluation_dtype(model: BaseModelMixin, dtype: torch.dtype | None) -> torch.dtype:
    """`dtype`, else the model's; a dtype other than the model's fails here, naming both,
    rather than deep inside the model's first forward."""
    own = model_dtype(model) if isinstance(model, torch.nn.Module) else None
    if dtype is not None and own is not None and dtype != own:
        raise ValueError(
            f"the model computes in {own} but the calculator was given dtype={dtype}: leave "
            f"dtype out (it defaults to the model's), or convert the model with "
            f"model.to({dtype})"
        )
    return dtype or own or torch.float64
