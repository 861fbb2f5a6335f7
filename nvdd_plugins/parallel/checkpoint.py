"""Checkpoint and restart of `DomainParallel` runs: one file, written by rank 0.

The file holds the full system ordered by global id (every per-atom field, cell, pbc and
the last energy/stress), the integrator's `state_dict()`, and what makes a restart continue
bit-identically at the same rank count: each atom's owner rank, the positions and cell of the
last neighbour-list rebuild, the decomposition frame, rank grid and cuts, the padding species and
the per-rank padded capacities. A restart assigns owners and builds the halo view from the
positions of that rebuild, exactly as the uninterrupted run did, then puts the current
positions and velocities in; the next rebuild comes when it would have come anyway.

At the same rank count (and grid) the saved owners are reused, so this also holds with
`migration_hysteresis > 0`, whose owners depend on the run's history. At another rank count
the owners are the sub-domains of the rebuild positions (no hysteresis), and the run agrees
with the uninterrupted one to rounding.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from nvdd_plugins.comm import local_device
from nvdd_plugins.data import Batch, FieldLevel
from nvdd_plugins.decomposition import DecompositionFrame, StaggeredCuts
from nvdd_plugins.distributed_model import DistributedModel
from nvdd_plugins.dynamics import BaseDynamics
from nvdd_plugins.errors import raised_on_every_rank
from nvdd_plugins.parallel.checkpoint_file import (
    CHECKPOINT_FORMAT,
    CHECKPOINT_VERSION,
    CheckpointFormatError,
    read_checkpoint_file,
    write_checkpoint_file,
)

__all__ = [
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_VERSION",
    "CheckpointFormatError",
    "CheckpointPath",
    "restore_domain_checkpoint",
    "save_domain_checkpoint",
]

logger = logging.getLogger(__name__)

CheckpointPath = str | os.PathLike[str]

_FIELD = "field:"  # prefix of the batch's per-atom fields among the gathered tensors


# -- saving -------------------------------------------------------------------------------
def save_domain_checkpoint(
    path: CheckpointPath,
    owned: Batch,
    dynamics: BaseDynamics,
    model: DistributedModel,
) -> None:
    """Gather the run's state by global id and write it to `path` on rank 0 (collective;
    written to a temporary file first, then renamed). Every rank raises if writing fails."""
    comm = model.comm
    state = model.domain.checkpoint_state()
    reference = state["reference"]
    usable = reference is not None and reference[0].shape == owned.positions.shape
    flag = torch.tensor([1.0 if usable else 0.0])
    usable = bool(comm.all_reduce(flag, "min")[0] == 1.0)
    ids = owned.global_ids
    per_atom = {_FIELD + name: value.detach() for name, value in owned.fields(FieldLevel.NODE)}
    per_atom["owner"] = torch.full_like(ids, comm.rank)
    if usable:
        per_atom["reference_positions"] = reference[0]
    gathered = comm.gather_by_id(ids, per_atom, dst=0)
    capacities = torch.cat(comm.all_gather(torch.tensor([state["capacities"]])))
    problem = None
    if comm.rank == 0:
        try:
            write_checkpoint_file(
                Path(path), _content(gathered, owned, dynamics, state, capacities, comm.size)
            )
        except Exception as err:  # whatever it is, every rank must raise, not rank 0 alone
            problem = f"cannot write the checkpoint {path}: {type(err).__name__}: {err}"
    problem = comm.broadcast_object(problem, src=0)
    if problem is not None:
        raise raised_on_every_rank(OSError(problem))
    logger.info("rank %d: checkpoint at step %d written", comm.rank, dynamics.step_count)


def _content(
    gathered: Mapping[str, torch.Tensor],
    owned: Batch,
    dynamics: BaseDynamics,
    state: Mapping[str, Any],
    capacities: torch.Tensor,
    world_size: int,
) -> dict[str, Any]:
    """What the file holds, from the per-atom fields gathered on rank 0."""
    frame: DecompositionFrame = state["frame"]
    reference = gathered.get("reference_positions")
    return {
        "atoms": {
            name[len(_FIELD) :]: value.cpu()
            for name, value in gathered.items()
            if name.startswith(_FIELD)
        },
        "system": {name: value.detach().cpu() for name, value in owned.fields(FieldLevel.SYSTEM)},
        "device": owned.device.type,
        "dynamics": {"class": type(dynamics).__name__, "state": dynamics.state_dict()},
        "neighbor_list": {
            "reference_positions": reference.cpu() if reference is not None else None,
            "reference_cell": state["reference"][1].cpu() if reference is not None else None,
        },
        "decomposition": {
            "world_size": world_size,
            "grid": list(state["grid"]),
            "cuts": {axis: getattr(state["cuts"], axis) for axis in "xyz"},
            "origin": frame.origin.cpu(),
            "box": frame.box.cpu(),
            "pbc": frame.pbc.cpu(),
            "padding_species": int(state["padding_species"]),
            "owner": gathered["owner"].cpu(),
            "capacities": capacities.cpu(),
        },
    }


# -- restoring ----------------------------------------------------------------------------
def restore_domain_checkpoint(
    path: CheckpointPath,
    dynamics: BaseDynamics,
    model: DistributedModel,
    device: torch.device | str | None = None,
) -> Batch:
    """Read `path` on rank 0 and resume `model` from it at its mesh's rank count
    (collective): the decomposition and the view of the last rebuild (rebuilt through
    `model.rebuild`, as the saved run built it), the integrator's state, and this rank's
    owned atoms, returned as a single-system `Batch` sorted by global id on `device` (default:
    the saved run's device type; CUDA means this process's current GPU).

    Raises `FileNotFoundError` (no such file) or `CheckpointFormatError` on every rank.
    """
    comm, domain = model.comm, model.domain
    content, problem = None, None
    if comm.rank == 0:
        try:
            content = read_checkpoint_file(Path(path))
        except (OSError, CheckpointFormatError) as err:
            problem = (type(err), str(err))
    problem = comm.broadcast_object(problem, src=0)
    if problem is not None:
        kind, message = problem
        raise raised_on_every_rank(kind(message))
    meta = comm.broadcast_object(_metadata(content) if comm.rank == 0 else None, src=0)
    target = local_device(device if device is not None else meta["device"])
    layout = meta["decomposition"]
    saved_grid = tuple(layout["grid"])
    wanted_grid = domain.config.grid
    same_size = layout["world_size"] == comm.size
    same_layout = same_size and (wanted_grid is None or tuple(wanted_grid) == saved_grid)
    capacities = layout["capacities"][comm.rank].tolist() if same_layout else None
    frame = DecompositionFrame(layout["origin"], layout["box"], layout["pbc"])
    grid = wanted_grid or (saved_grid if same_size else None)
    saved_cuts = layout.get("cuts")
    cuts = StaggeredCuts(**saved_cuts) if same_layout and saved_cuts else None
    domain.restore(frame, grid, layout["padding_species"], capacities, cuts)

    reference_cell = meta["reference_cell"]
    per_atom: dict[str, torch.Tensor] = {}
    owner = None
    cell = reference_cell if reference_cell is not None else meta["system"]["cell"][0]
    where = None
    if comm.rank == 0:
        per_atom = dict(content["atoms"])
        if reference_cell is not None:
            per_atom["reference_positions"] = content["neighbor_list"]["reference_positions"]
        # the sub-domains of the rebuild positions (or of the current ones)
        where = per_atom.get("reference_positions", per_atom["positions"])
    if not same_layout:  # another rank count or grid: cuts balanced afresh
        domain.balance_from_root(where)
    if comm.rank == 0:
        saved = content["decomposition"]["owner"]
        owner = saved if same_layout else model.owners(where, cell).cpu()
    received = {
        name: value.to(target)
        for name, value in comm.scatter_rows(per_atom, owner, meta["schema"]).items()
    }
    if same_layout:
        _check_saved_owners(model, received, cell.to(target))

    system = {name: value.clone().to(target) for name, value in meta["system"].items()}
    ptr = torch.tensor([0, received["positions"].shape[0]], device=target)
    if reference_cell is not None:
        at_rebuild = Batch(
            {
                "positions": received.pop("reference_positions"),
                "atomic_numbers": received["atomic_numbers"],
                "global_ids": received["global_ids"],
            },
            {},
            {"cell": reference_cell.reshape(1, 3, 3).clone().to(target), "pbc": system["pbc"]},
            ptr,
        )
        model.rebuild(at_rebuild)
    owned = Batch(received, {}, system, ptr)

    if meta["dynamics"]["class"] != type(dynamics).__name__:
        logger.warning(
            "the checkpoint was written by %s; restoring its state into %s",
            meta["dynamics"]["class"],
            type(dynamics).__name__,
        )
    dynamics.load_state_dict(meta["dynamics"]["state"])
    if all(name in owned for name in dynamics.compute_properties):
        dynamics.mark_forces_current(owned)  # the saved run's forces at these positions
    logger.info(
        "rank %d: restored %d atoms at step %d", comm.rank, owned.num_nodes, dynamics.step_count
    )
    return owned


def _check_saved_owners(
    model: DistributedModel, received: Mapping[str, torch.Tensor], cell: torch.Tensor
) -> None:
    """Raise on every rank when a saved owner does not hold its atom: each atom received
    must be one that migration leaves on this rank at the positions of the last rebuild
    (inside its sub-domain, or within the migration hysteresis of it). A run's own file
    always passes; an edited owner table would run with ghosts missing."""
    comm = model.comm
    positions = received.get("reference_positions", received["positions"])
    strays = model.domain.destinations(positions, cell) != comm.rank
    count = int(comm.all_reduce(strays.sum().reshape(1).double())[0])
    if count:
        ids = received["global_ids"][strays][:5].tolist()
        raise raised_on_every_rank(
            CheckpointFormatError(
                f"decomposition/owner: {count} atoms lie outside their saved owner's "
                f"sub-domain (global ids {ids} on rank {comm.rank} among them), so the run "
                "would miss ghosts: the owner table does not belong to these positions. "
                "Restore the file at another rank count (owners are derived afresh), or "
                "write it again with save_checkpoint"
            )
        )


def _metadata(content: Mapping[str, Any]) -> dict[str, Any]:
    """Everything every rank needs except the per-atom tensors."""
    atoms = content["atoms"]
    schema = {name: (value.dtype, tuple(value.shape[1:])) for name, value in atoms.items()}
    reference = content["neighbor_list"]["reference_cell"]
    if reference is not None:
        schema["reference_positions"] = schema["positions"]
    layout = dict(content["decomposition"])
    layout.pop("owner")
    return {
        "schema": schema,
        "system": content["system"],
        "device": content["device"],
        "dynamics": content["dynamics"],
        "decomposition": layout,
        "reference_cell": reference,
    }
