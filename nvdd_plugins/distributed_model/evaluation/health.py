"""Non-finite numbers in a run: noticed by every rank in the same step, reported alike on
every rank with the atoms they hit and the ranks that computed them."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from nvdd_plugins.comm import Communicator
from nvdd_plugins.errors import raised_on_every_rank

__all__ = [
    "NON_FINITE",
    "REBUILD",
    "NonFiniteError",
    "agreed_status",
    "any_non_finite",
    "non_finite_error",
    "non_finite_kinds",
    "non_finite_report",
]

REBUILD = 1
NON_FINITE = 2

# bits of `non_finite_kinds`
_ENERGY, _FORCE, _POSITION = 1, 2, 4
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


def agreed_status(comm: Communicator, word: torch.Tensor) -> int:
    """Collective: the largest of the ranks' 0-d status words (`NON_FINITE`, `REBUILD` or
    0; a bool is `REBUILD` or 0), the one all-reduce by which every way in decides a step's
    rebuild or non-finite stop. The one host synchronisation is the answer."""
    return int(comm.all_reduce(word.to(torch.float32).reshape(1), "max")[0])


def non_finite_kinds(
    energies: torch.Tensor | None = None,
    forces: torch.Tensor | None = None,
    positions: torch.Tensor | None = None,
) -> torch.Tensor:
    """(n,) int64 per atom, from the tensors given (at least one; one row per atom): 1 if
    its energy, 2 if its force, 4 if its position is NaN or infinite, summed (0: finite)."""
    given = ((_ENERGY, energies), (_FORCE, forces), (_POSITION, positions))
    kinds = [bit * ~_rows_finite(values) for bit, values in given if values is not None]
    return torch.stack(kinds).sum(dim=0)


def non_finite_error(
    comm: Communicator, labels: torch.Tensor, kinds: torch.Tensor, what: str = "atoms"
) -> NonFiniteError:
    """The error every rank raises once some rank is flagged (collective: one all-gather of
    what each rank found among its atoms, named by `labels`, with their `kinds`)."""
    bad = kinds != 0
    found = torch.stack([labels[bad].long(), kinds[bad].long()], dim=1).cpu()
    return raised_on_every_rank(NonFiniteError(non_finite_report(comm.all_gather(found), what)))


def non_finite_report(found: Sequence[torch.Tensor], what: str = "atoms") -> str:
    """The message, from what each rank found (by rank: (k, 2) rows of an atom's label and
    its `non_finite_kinds`): the ranks whose atoms have non-finite energies, where it came
    from, then those whose atoms have non-finite forces only (message passing spreads a
    NaN energy to its neighbours' forces, on other ranks too), or positions only."""
    kinds = (("energies", _ENERGY), ("forces only", _FORCE), ("positions only", _POSITION))
    parts = [
        f"non-finite {name} on {on}" for name, bit in kinds if (on := _by_rank(found, bit, what))
    ]
    where = " — ".join(parts) or "non-finite total energy (no atom's own energy, force or position)"
    return (
        f"{where}. Non-finite energies mark where it came from (forces spread it to the "
        "neighbouring atoms, on other ranks too): check the model on these atoms, lower the "
        "time step, or look for overlapping atoms in the initial structure"
    )


def _by_rank(found: Sequence[torch.Tensor], bit: int, what: str) -> str:
    """Per rank, the labels of its atoms whose lowest kind is `bit` (an atom is listed once,
    under the first of energy, force, position): the ten lowest, and how many more."""
    parts = []
    for rank, rows in enumerate(found):
        kinds = rows[:, 1]
        labels = sorted(rows[:, 0][((kinds & bit) != 0) & ((kinds & (bit - 1)) == 0)].tolist())
        more = f" and {len(labels) - _SHOWN_IDS} more" if len(labels) > _SHOWN_IDS else ""
        if labels:
            parts.append(f"rank {rank}: {what} {labels[:_SHOWN_IDS]}{more}")
    return "; ".join(parts)


def _rows_finite(values: torch.Tensor) -> torch.Tensor:
    """(n,) bool: whether each row of `values` is finite throughout."""
    finite = torch.isfinite(values.detach())
    return finite.flatten(1).all(dim=1) if finite.dim() > 1 else finite
