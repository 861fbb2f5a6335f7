"""Hooks whose firing takes part in a collective must be attached alike on every rank.

An outer hook with a gathering scope (RANK_ZERO, GLOBAL) makes every rank gather the system
when it is due, and a compute-stage hook of the inner integrator makes every rank build its
compute view (a halo exchange). Attached on some ranks only, such a hook leaves its peers
waiting in a collective until it times out. `check_same_hooks` compares the schedules once
per `run()`: one all-gather of a checksum, and the schedules themselves only when they differ.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Sequence
from enum import StrEnum

import torch

from nvdd_plugins.comm import Communicator
from nvdd_plugins.dynamics import AttachedHook, DynamicsStage
from nvdd_plugins.errors import raised_on_every_rank

__all__ = ["HookScope", "check_same_hooks", "collective_hooks"]

_COMPUTE_STAGES = (DynamicsStage.BEFORE_COMPUTE, DynamicsStage.AFTER_COMPUTE)


class HookScope(StrEnum):
    """What a hook on the outer `DomainParallel` sees.

    LOCAL: the rank's own atoms. RANK_ZERO: the full system gathered to rank 0 (runs there
    only). GLOBAL: the full system gathered to every rank (identical everywhere).
    """

    LOCAL = "local"
    RANK_ZERO = "rank_zero"
    GLOBAL = "global"


def collective_hooks(
    outer: Sequence[tuple[AttachedHook, HookScope]], inner: Sequence[AttachedHook]
) -> list[str]:
    """One line per hook whose firing is collective: outer hooks that gather, and the inner
    integrator's compute-stage hooks."""
    gathering = [
        f"{type(entry.hook).__name__} at {entry.stage.name} every {entry.interval}, "
        f"{scope.name} scope"
        for entry, scope in outer
        if scope is not HookScope.LOCAL
    ]
    compute = [
        f"{type(entry.hook).__name__} on the integrator at {entry.stage.name} every "
        f"{entry.interval}"
        for entry in inner
        if entry.stage in _COMPUTE_STAGES
    ]
    return gathering + compute


def check_same_hooks(comm: Communicator, schedule: Sequence[str]) -> None:
    """Raise ValueError on every rank, naming the hooks, unless every rank passes the same
    `schedule` (one line per collective hook, in any order). Collective."""
    schedule = sorted(schedule)  # one gather or compute view serves all hooks due at a stage
    checksum = zlib.crc32("\n".join(schedule).encode())
    checksums = comm.all_gather(torch.tensor([checksum], dtype=torch.long))
    if all(bool(torch.equal(c, checksums[0])) for c in checksums):
        return
    schedules = [
        comm.broadcast_object(schedule if comm.rank == r else None, src=r) for r in range(comm.size)
    ]
    raise raised_on_every_rank(ValueError(_difference(schedules)))


def _difference(schedules: list[list[str]]) -> str:
    """Which hooks the first rank that differs from rank 0 has and it lacks, or the reverse."""
    first = Counter(schedules[0])
    rank = next(r for r, s in enumerate(schedules) if Counter(s) != first)
    other = Counter(schedules[rank])
    parts = [
        f"rank {owner} has {'; '.join(sorted(extra.elements()))} and rank {peer} does not"
        for owner, peer, extra in ((0, rank, first - other), (rank, 0, other - first))
        if extra
    ]
    return (
        f"hooks differ between ranks: {', '.join(parts)}. Attach the same hooks on every "
        "rank: an outer hook with RANK_ZERO or GLOBAL scope gathers the system from every "
        "rank, and a compute-stage hook of the inner integrator needs every rank's compute "
        "view (a RANK_ZERO hook is called on rank 0 only by itself; a LOCAL hook may differ)"
    )
