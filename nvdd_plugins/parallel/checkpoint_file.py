"""The checkpoint file of a `DomainParallel` run: its envelope, its digest and the checks that
a file read back is whole before any rank uses it.

The file is a `torch.save` of an envelope: the format tag, the version, the SHA-256 of the
payload and the payload itself (the `torch.save` bytes of the content). A file whose bytes
changed fails the digest; content that passes it is still checked for the entries a restore
reads, distinct non-negative global ids and one row per atom in every per-atom tensor, so a
file built by hand cannot restore a broken system either.
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from nvdd_plugins.decomposition import StaggeredCuts

__all__ = [
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_VERSION",
    "CheckpointFormatError",
    "read_checkpoint_file",
    "write_checkpoint_file",
]

CHECKPOINT_FORMAT = "nvdd.DomainParallel.checkpoint"
CHECKPOINT_VERSION = 2


class CheckpointFormatError(ValueError):
    """The file is not a whole `DomainParallel` checkpoint of a version this code reads."""


class _Damaged(Exception):
    """An entry of the content is missing or inconsistent (the message says which)."""


def write_checkpoint_file(path: Path, content: Mapping[str, Any]) -> None:
    """Write `content` with its digest to a temporary file next to `path`, then rename it.
    Raises OSError when that fails; no temporary file is left behind."""
    buffer = io.BytesIO()
    torch.save(dict(content), buffer)
    payload = buffer.getvalue()
    envelope = {
        "format": CHECKPOINT_FORMAT,
        "version": CHECKPOINT_VERSION,
        "sha256": hashlib.sha256(payload).hexdigest(),
        "payload": payload,
    }
    partial = path.with_name(path.name + ".partial")
    try:
        with open(partial, "wb") as stream:
            torch.save(envelope, stream)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def read_checkpoint_file(path: Path) -> dict[str, Any]:
    """The checked content of the checkpoint at `path`.

    Raises FileNotFoundError (no such file) or CheckpointFormatError (not a checkpoint, a
    version this code does not read, bytes changed since it was written, or content a
    restore cannot use).
    """
    if not path.is_file():
        raise FileNotFoundError(
            f"no checkpoint at {path}: the file does not exist or is not a file"
        )
    expected = f"{CHECKPOINT_FORMAT!r} version {CHECKPOINT_VERSION}"
    envelope = _load(path, f"{path} is not a {expected} checkpoint")
    tag = envelope.get("format") if isinstance(envelope, dict) else None
    if tag != CHECKPOINT_FORMAT:
        raise CheckpointFormatError(f"{path} is not a {expected} checkpoint (format tag {tag!r})")
    version = envelope.get("version")
    if version != CHECKPOINT_VERSION:
        raise CheckpointFormatError(
            f"{path} is version {version!r} of {CHECKPOINT_FORMAT!r}; this code reads "
            f"version {CHECKPOINT_VERSION}"
        )
    payload = envelope.get("payload")
    if not isinstance(payload, bytes) or hashlib.sha256(payload).hexdigest() != envelope.get(
        "sha256"
    ):
        raise CheckpointFormatError(
            f"{path} is damaged: its content does not match the SHA-256 digest written with "
            "it (the file changed after it was written, or was cut short)"
        )
    content = _load(io.BytesIO(payload), f"{path} is damaged")
    try:
        _check_content(content)
    except _Damaged as err:
        raise CheckpointFormatError(f"{path} is damaged: {err}") from None
    return content


def _load(source: Path | io.BytesIO, failure: str) -> Any:
    """`torch.load` of tensors and plain data only. A failure is reported by the exception's
    type alone: torch's message would suggest `weights_only=False`, which must never be
    used on a file that failed this check."""
    try:
        return torch.load(source, map_location="cpu", weights_only=True)
    except OSError as err:
        raise CheckpointFormatError(f"{failure} ({type(err).__name__}: {err})") from None
    except Exception as err:
        raise CheckpointFormatError(
            f"{failure} (torch.load cannot read it: {type(err).__name__})"
        ) from None


def _entry(content: Any, *keys: str, kind: type | tuple[type, ...] = object) -> Any:
    """content[keys[0]][keys[1]]..., which must exist and be a `kind`."""
    value = content
    for depth, key in enumerate(keys):
        if not isinstance(value, Mapping) or key not in value:
            raise _Damaged(f"it has no {'/'.join(keys[: depth + 1])!r} entry")
        value = value[key]
    if not isinstance(value, kind):
        raise _Damaged(f"its {'/'.join(keys)!r} entry is a {type(value).__name__}")
    return value


def _check_content(content: Any) -> None:
    """Raise `_Damaged` unless `content` holds everything a restore reads, consistently."""
    atoms = _entry(content, "atoms", kind=dict)
    ids = _entry(content, "atoms", "global_ids", kind=torch.Tensor)
    n_atoms = int(ids.shape[0]) if ids.dim() == 1 else -1
    if n_atoms < 1:
        raise _Damaged(f"its global ids have shape {tuple(ids.shape)}, not (n_atoms,)")
    if ids.is_floating_point() or bool((ids < 0).any()) or torch.unique(ids).numel() != n_atoms:
        raise _Damaged("its global ids are not distinct non-negative integers")
    rows = {f"atoms/{name}": value for name, value in atoms.items()}
    for name in ("positions", "atomic_numbers"):
        _entry(content, "atoms", name, kind=torch.Tensor)
    rows["decomposition/owner"] = _entry(content, "decomposition", "owner", kind=torch.Tensor)
    reference = _entry(content, "neighbor_list", "reference_positions")
    reference_cell = _entry(content, "neighbor_list", "reference_cell")
    if reference is not None or reference_cell is not None:
        rows["neighbor_list/reference_positions"] = reference
        _entry(content, "neighbor_list", "reference_cell", kind=torch.Tensor)
    for name, value in rows.items():
        if not isinstance(value, torch.Tensor) or value.dim() == 0 or value.shape[0] != n_atoms:
            shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise _Damaged(f"{name} has shape {shape} for {n_atoms} atoms")
    world_size = _entry(content, "decomposition", "world_size", kind=int)
    owner = rows["decomposition/owner"]
    if world_size < 1 or bool((owner < 0).any()) or bool((owner >= world_size).any()):
        raise _Damaged(f"decomposition/owner names ranks outside 0..{world_size - 1}")
    capacities = _entry(content, "decomposition", "capacities", kind=torch.Tensor)
    if capacities.dim() == 0 or capacities.shape[0] != world_size:
        raise _Damaged(f"decomposition/capacities has {tuple(capacities.shape)} rows")
    for key in ("origin", "box", "pbc"):
        _entry(content, "decomposition", key, kind=torch.Tensor)
    grid = _entry(content, "decomposition", "grid", kind=list)
    cuts = content["decomposition"].get("cuts")
    if cuts is not None:
        _check_cuts(cuts, grid)
    _entry(content, "decomposition", "padding_species", kind=int)
    _entry(content, "system", "cell", kind=torch.Tensor)
    _entry(content, "system", "pbc", kind=torch.Tensor)
    _entry(content, "device", kind=str)
    _entry(content, "dynamics", "class", kind=str)
    _entry(content, "dynamics", "state", kind=dict)


def _check_cuts(cuts: Any, grid: list) -> None:
    """Raise `_Damaged` unless `cuts` are staggered cuts of `grid` (a checkpoint without
    cuts restores with regular ones)."""
    if not isinstance(cuts, Mapping) or not all(
        isinstance(cuts.get(axis), torch.Tensor) for axis in "xyz"
    ):
        raise _Damaged("decomposition/cuts is not three tensors x, y, z")
    staggered = StaggeredCuts(cuts["x"], cuts["y"], cuts["z"])
    try:
        staggered.check()
    except ValueError as err:
        raise _Damaged(f"decomposition/cuts: {err}") from None
    if list(staggered.grid) != list(grid):
        raise _Damaged(f"decomposition/cuts are of grid {staggered.grid}, not {tuple(grid)}")
