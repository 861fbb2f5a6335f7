"""Asking the other ranks of a communicator where they are, outside its collectives.

A rank whose collective waits too long (`nvdd_plugins.comm.watchdog`) asks its peers what
they are doing; each peer's watchdog thread answers with a small dict. The questions travel
beside the communicator's own traffic, so they get through while the ranks are stuck in it:
over the c10d store of a torch.distributed group, or over MPI point-to-point messages with
tags of their own (the MPI library must allow calls from several threads).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import torch.distributed as dist

__all__ = ["MPIRollCall", "RollCall", "StoreRollCall"]

Answer = dict[str, Any]
_POLL_S = 0.02
_QUERY_TAG, _ANSWER_TAG = 7181, 7182
_MAX_ANSWER = 1 << 16


class RollCall(Protocol):
    """Questions and answers between the ranks of one communicator."""

    def serve(self, answer: Callable[[], Answer]) -> None:
        """Answer every question asked of this rank since the last call (non-blocking)."""

    def ask(
        self, peers: Iterable[int], wait_s: float, serve: Callable[[], None]
    ) -> dict[int, Answer | None]:
        """Each peer's answer, or None where none came within `wait_s` seconds; calls
        `serve` while it waits (peers may be asking this rank at the same time)."""

    def close(self) -> None:
        """Stop listening (before the process exits)."""


def _encode(answer: Answer) -> bytes:
    return json.dumps(answer).encode()[:_MAX_ANSWER]


class StoreRollCall:
    """Questions as counters in the default store of torch.distributed (under a prefix of
    the group), answers as keys: `asked/<rank>` counts the questions to a rank,
    `answer/<rank>` holds its latest answer with the count it answered.

    The store is looked up at each use, never kept: a reference held here would outlive the
    process group and change when the store's server is torn down.
    """

    def __init__(self, prefix: str, rank: int) -> None:
        self.prefix = prefix
        self.rank = rank
        self._answered = 0

    def _store(self) -> Any | None:
        if not dist.is_initialized():  # the store may have gone with the rank that kept it
            return None
        return dist.PrefixStore(self.prefix, dist.distributed_c10d._get_default_store())

    def serve(self, answer: Callable[[], Answer]) -> None:
        """Answer when the question count grew."""
        store = self._store()
        if store is None:
            return
        asked = int(store.add(f"asked/{self.rank}", 0))
        if asked > self._answered:
            store.set(f"answer/{self.rank}", _encode({**answer(), "asked": asked}))
            self._answered = asked

    def ask(
        self, peers: Iterable[int], wait_s: float, serve: Callable[[], None]
    ) -> dict[int, Answer | None]:
        """Count a question to each peer, then wait for answers that count it."""
        store = self._store()
        if store is None:
            return dict.fromkeys(peers)
        tickets = {q: int(store.add(f"asked/{q}", 1)) for q in peers}
        answers: dict[int, Answer | None] = dict.fromkeys(tickets)
        deadline = time.monotonic() + wait_s
        while any(a is None for a in answers.values()) and time.monotonic() < deadline:
            serve()
            for q in [q for q, a in answers.items() if a is None]:
                if store.check([f"answer/{q}"]):
                    answer = json.loads(store.get(f"answer/{q}"))
                    answers[q] = answer if answer.get("asked", 0) >= tickets[q] else None
            time.sleep(_POLL_S)
        return answers

    def close(self) -> None:
        """Nothing to release."""


class MPIRollCall:
    """Questions and answers as MPI point-to-point messages on the communicator itself,
    under tags of their own (collectives and nvdd's halo messages never match them)."""

    def __init__(self, comm: Any, mpi: Any) -> None:
        self.comm = comm
        self._mpi = mpi
        self._question = bytearray(16)
        self._listening = self._listen()
        self._sends: list[Any] = []

    def _listen(self) -> Any:
        buffer = [self._question, self._mpi.BYTE]
        return self.comm.Irecv(buffer, source=self._mpi.ANY_SOURCE, tag=_QUERY_TAG)

    def serve(self, answer: Callable[[], Answer]) -> None:
        """Answer each rank whose question arrived."""
        status = self._mpi.Status()
        self._sends = [s for s in self._sends if not s.Test()]
        while self._listening.Test(status):
            payload = _encode(answer())
            self._sends.append(
                self.comm.Isend([payload, self._mpi.BYTE], status.Get_source(), _ANSWER_TAG)
            )
            self._listening = self._listen()

    def ask(
        self, peers: Iterable[int], wait_s: float, serve: Callable[[], None]
    ) -> dict[int, Answer | None]:
        """Send each peer a question and wait for its answer."""
        buffers = {q: bytearray(_MAX_ANSWER) for q in peers}
        receives = {
            q: self.comm.Irecv([buffer, self._mpi.BYTE], source=q, tag=_ANSWER_TAG)
            for q, buffer in buffers.items()
        }
        questions = [self.comm.Isend([b"?", self._mpi.BYTE], q, _QUERY_TAG) for q in buffers]
        answers: dict[int, Answer | None] = dict.fromkeys(buffers)
        deadline = time.monotonic() + wait_s
        while receives and time.monotonic() < deadline:
            serve()
            for q, request in list(receives.items()):
                status = self._mpi.Status()
                if request.Test(status):
                    raw = bytes(buffers[q][: status.Get_count(self._mpi.BYTE)])
                    answers[q] = json.loads(raw)
                    del receives[q]
            time.sleep(_POLL_S)
        for request in receives.values():
            _cancel(request)
        self._sends += questions  # kept until sent (a rank that does not answer never reads)
        return answers

    def close(self) -> None:
        """Withdraw the pending receive of questions (MPI_Finalize expects none)."""
        _cancel(self._listening)


def _cancel(receive: Any) -> None:
    if not receive.Test():
        receive.Cancel()
        receive.Wait()
