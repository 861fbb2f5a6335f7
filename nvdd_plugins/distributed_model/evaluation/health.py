"""Non-finite numbers in a run: noticed by every rank in the same step, reported with the
atoms (global ids) and ranks they hit."""

from __future__ import annotations

import torch

from nvdd_plugins.comm import Communicator

__all__ = [
    "NON_FINITE",
    "REBUILD",
    "NonFiniteError",
    "any_non_finite",
    "invalid_atoms",
    "non_finite_report",
    "rebuild_status",
]

REBUILD = 1
NON_FINITE = 2

_SHOWN_IDS = 10


class NonFiniteError(FloatingPointError):
    """A position, force or energy became NaN or infinite; raised on every rank alike."""


def any_non_finite(
    positions: torch.Tensor,
    energy: torch.Tensor | None = None,
    per_atom: tuple[torch.Tensor | None, ...] = (),
) -> torch.Tensor:
    """0-d bool: is anything in these tensors NaN or infinite? One sum per tensor, on the
    device (no host synchronisation): a non-finite element makes its sum non-finite."""
    total = positions.sum()
    for values in (energy, *per_atom):
        if values is not None:
            total = total + values.detach().sum().to(total.dtype)
    return ~torch.isfinite(total)


def rebuild_status(
    comm: Communicator, stale: torch.Tensor, non_finite: torch.Tensor | None = None
) -> int:
    """Collective: `NON_FINITE` if any rank flags `non_finite`, else `REBUILD` if any rank
    flags `stale` (0-d bool tensors), else 0. The one host synchronisation is the answer."""
    flag = stale.to(torch.float32)
    if non_finite is not None:
        flag = torch.where(non_finite.to(stale.device), float(NON_FINITE), flag)
    return int(comm.all_reduce(flag.reshape(1), "max")[0])


def invalid_atoms(
    positions: torch.Tensor, per_atom: tuple[torch.Tensor | None, ...] = ()
) -> torch.Tensor:
    """Mask of the atoms whose position or `per_atom` value (forces, energies; one row per
    atom) is NaN or infinite."""
    invalid = ~torch.isfinite(positions).all(dim=1)
    for values in per_atom:
        if values is not None and values.shape[0] == positions.shape[0]:
            finite = torch.isfinite(values)
            invalid |= ~(finite.flatten(1).all(dim=1) if finite.dim() > 1 else finite)
    return invalid


def non_finite_report(
    comm: Communicator, ids: torch.Tensor, invalid: torch.Tensor, energy: torch.Tensor | None
) -> str:
    """The message every rank raises (collective: one all-gather of the bad ids)."""
    gathered = comm.all_gather(ids[invalid].long().cpu())
    parts = []
    for rank, bad in enumerate(gathered):
        if bad.numel():
            shown = bad[:_SHOWN_IDS].tolist()
            more = f" and {bad.numel() - _SHOWN_IDS} more" if bad.numel() > _SHOWN_IDS else ""
            parts.append(f"rank {rank}: atoms {shown}{more}")
    where = "; ".join(parts) or "no atom's position or force (only the energy)"
    value = "" if energy is None else f" (last energy {float(energy.sum()):g} eV)"
    return (
        f"non-finite positions, forces or energy{value} — {where}. The model returned NaN/inf "
        "or the integration blew up: check the model on these atoms, lower the time step, or "
        "look for overlapping atoms in the initial structure"
    )
