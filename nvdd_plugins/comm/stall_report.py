"""The message a rank prints when one of its collectives waited past the limit: where it
waits, which ranks have not arrived and where they are instead."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["stall_message"]

Answer = Mapping[str, Any]

_SAME_CALLS = (
    "every rank must make the same nvdd calls in the same order: DomainParallel's methods, "
    "hooks that gather, and every computing call of the ASE calculator are collective "
    "(docs/launchers.md)"
)
_ASE_HINT = (
    "under mpirun ASE's own collectives (velocity distributions, ase.io.read/write, "
    "Trajectory) wait for every rank: pass comm=DummyMPI() (ase.parallel) or parallel=False "
    "where one rank alone calls them (docs/launchers.md)"
)


def _call(answer: Answer) -> str:
    step = f", after step {answer['step']}" if answer.get("step") is not None else ""
    return f"{answer['in']} (its call {answer['number']} on this communicator{step})"


def _peer(answer: Answer | None, own: Answer) -> tuple[bool, str]:
    """Whether the peer has arrived in this rank's call, and what it does, in words."""
    if answer is None:
        return False, "did not answer (its script has ended, or it is stuck outside Python)"
    where = answer.get("where") or "?"
    if answer.get("in") == own["in"] and answer.get("number") == own["number"]:
        return True, f"waits in the same call for {answer['waited']:.0f} s, at {where}"
    if answer.get("in") is not None:
        return False, f"waits in {_call(answer)} for {answer['waited']:.0f} s, at {where}"
    if answer.get("elsewhere") is not None:
        return False, f"waits in {answer['elsewhere']} on another communicator, at {where}"
    return False, f"is in no nvdd call (it has made {answer['calls']}), at {where}"


def stall_message(own: Answer, answers: Mapping[int, Answer | None], limit_s: float) -> str:
    """The lines, each prefixed with the rank, for rank `own["rank"]` whose call has waited
    past `limit_s` seconds, given each peer's answer (None: no answer)."""
    rank = own["rank"]
    peers = {q: _peer(a, own) for q, a in sorted(answers.items())}
    missing = [q for q, (arrived, _) in peers.items() if not arrived]
    not_arrived = ", ".join(map(str, missing)) if missing else "none (all wait in this call)"
    lines = [
        f"nvdd: rank {rank} of {own['size']} has waited {own['waited']:.0f} s in {_call(own)}, "
        f"at {own['where']}. Ranks not arrived: {not_arrived}."
    ]
    lines += [f"  rank {q}: {text}" for q, (_, text) in peers.items()]
    stuck_in_ase = any(
        "inside ase/" in (a.get("where") or "") for a in answers.values() if a is not None
    )
    lines.append(f"Hint: {_ASE_HINT if stuck_in_ase else _SAME_CALLS}.")
    lines.append(
        f"Ending the job: a collective waited longer than NVDD_COLLECTIVE_TIMEOUT_S = "
        f"{limit_s:g} s (0 or off disables the limit)."
    )
    return "".join(f"[rank{rank}]: {line}\n" for line in lines)
