"""The collective watchdog: a communicator call that waits longer than a limit ends the job
with a message saying where every rank is.

MPI has no timeout of its own and gloo's is long (30 minutes by default, 10 under
`DistributedManager`), so a rank that never joins a collective (ASE's own collectives
called on one rank under mpirun, a calculator called on one rank only, code that makes
different calls on different ranks) would leave its peers waiting in silence. Each call of
a real communicator (`MPICommunicator`, `TorchDistCommunicator`) is recorded by its `Watch`
(a few attribute writes); one thread per process looks at the record every tick. Past the
limit it asks the communicator's other ranks where they are (`nvdd_plugins.comm.roll_call`),
prints which ranks have not arrived and what they do instead (`stall_message`), and ends the
job: an MPI abort under mpirun, else this process exits and its launcher stops the others.
When several ranks pass the limit, the lowest reports.

The limit: `NVDD_COLLECTIVE_TIMEOUT_S` (seconds, default 300; 0 or "off" turns the watchdog
off), or `set_collective_timeout` from Python.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

from nvdd_plugins.comm.launch import abort_job, detect_launch
from nvdd_plugins.comm.roll_call import Answer, MPIRollCall, RollCall, StoreRollCall
from nvdd_plugins.comm.stall_report import stall_message
from nvdd_plugins.comm.whereabouts import thread_whereabouts

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "TIMEOUT_ENV",
    "Watch",
    "collective_timeout_s",
    "mpi_watch",
    "note_steps",
    "set_collective_timeout",
    "torch_watch",
]

TIMEOUT_ENV = "NVDD_COLLECTIVE_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 300.0
_ANSWER_WAIT_S = 10.0  # how long a reporting rank waits for its peers' answers (a loaded
# machine may take seconds to schedule a peer's watchdog thread; a stall has waited minutes)
_DEFER_S = 20.0  # how long a rank leaves a lower rank to report and end the job
_OFF = ("0", "off", "none", "inf")
_UNSET = object()
_override: Any = _UNSET


def collective_timeout_s() -> float | None:
    """The limit in seconds (None: no limit): `set_collective_timeout`'s, else the
    environment's `NVDD_COLLECTIVE_TIMEOUT_S`, else 300."""
    if _override is not _UNSET:
        return _override
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    if raw.lower() in _OFF:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(
            f"{TIMEOUT_ENV}={raw!r}: give the longest wait of one collective in seconds "
            '(a number > 0), or 0 / "off" for no limit'
        )
    return seconds


def set_collective_timeout(seconds: float | None) -> None:
    """Set the limit in seconds for this process (None or 0: no limit), overriding
    `NVDD_COLLECTIVE_TIMEOUT_S`. Give every rank the same limit."""
    global _override
    if seconds is not None and not (seconds >= 0 and math.isfinite(seconds)):
        raise ValueError(f"the collective timeout must be >= 0 s or None, got {seconds!r}")
    _override = seconds or None


def watching(size: int) -> bool:
    """Whether calls of a communicator of `size` ranks are watched (more than one rank and
    a limit set)."""
    return size > 1 and collective_timeout_s() is not None


def note_steps(dynamics: object) -> None:
    """Show `dynamics.step_count` (the steps it has taken) in the message of a stalled
    collective of this process (a weak reference: `dynamics` is not kept alive)."""
    _WATCHDOG.steps = weakref.ref(dynamics)


@dataclass(frozen=True)
class _Call:
    """A call in progress."""

    watch: Watch
    name: str
    number: int
    started: float  # time.monotonic()
    thread: int


class _Watched:
    """The context of one watched call (a class, not a generator: it runs per call)."""

    __slots__ = ("name", "previous", "watch")

    def __init__(self, watch: Watch, name: str) -> None:
        self.watch, self.name = watch, name

    def __enter__(self) -> None:
        watch = self.watch
        watch.calls += 1
        self.previous = _WATCHDOG.current
        _WATCHDOG.current = _Call(
            watch, self.name, watch.calls, time.monotonic(), threading.get_ident()
        )

    def __exit__(self, *exc: object) -> None:
        _WATCHDOG.current = self.previous


class Watch:
    """The watched calls of one communicator: `with watch.call("all_reduce"): ...` around
    each blocking call. One per communicator of a process (the `mpi_watch` and
    `torch_watch` factories share it between instances over the same group).

    Args:
        rank, size: this process's rank in the communicator and its size.
        roll_call: how to ask the other ranks where they are (None: they are not asked).
        mpi: end the job with an MPI abort (under mpirun) rather than by exiting.
    """

    def __init__(self, rank: int, size: int, roll_call: RollCall | None, mpi: bool) -> None:
        self.rank, self.size = rank, size
        self.roll_call = roll_call
        self.mpi = mpi
        self.calls = 0
        if watching(size):
            _WATCHDOG.register(self)

    def call(self, name: str) -> _Watched:
        """The context of a call named `name` (e.g. "all_gather")."""
        return _Watched(self, name)


class _Watchdog:
    """The process's watchdog thread and the call in progress."""

    def __init__(self) -> None:
        self.current: _Call | None = None
        self.steps: weakref.ref[object] | None = None  # the dynamics being driven
        self._watches: weakref.WeakSet[Watch] = weakref.WeakSet()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def register(self, watch: Watch) -> None:
        with self._lock:
            self._watches.add(watch)
            if self._thread is None:
                self._stop.clear()
                self._thread = threading.Thread(
                    target=self._run, name="nvdd-collective-watchdog", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        while True:
            limit = collective_timeout_s()
            if self._stop.wait(min(1.0, max(0.05, (limit or 10.0) / 10))) or sys.is_finalizing():
                return
            self.serve()
            call = self.current
            if call is not None and limit and time.monotonic() - call.started > limit:
                self._end(call, limit)

    def answer(self, watch: Watch) -> Answer:
        """What this rank does, as its peers are told (and its own report shows)."""
        call, now = self.current, time.monotonic()
        here = call is not None and call.watch is watch
        limit = collective_timeout_s()
        thread = call.thread if call is not None else threading.main_thread().ident
        return {
            "rank": watch.rank,
            "size": watch.size,
            "calls": watch.calls,
            "in": call.name if here else None,
            "number": call.number if here else None,
            "elsewhere": call.name if call is not None and not here else None,
            "waited": now - call.started if call is not None else None,
            "past_limit": bool(call is not None and limit and now - call.started > limit),
            "step": getattr(self.steps and self.steps(), "step_count", None),
            "where": thread_whereabouts(thread) if thread is not None else "?",
        }

    def serve(self) -> None:
        """Answer the peers' questions on every watched communicator."""
        for watch in list(self._watches):
            if watch.roll_call is None:
                continue
            try:
                watch.roll_call.serve(lambda w=watch: self.answer(w))
            except Exception:  # a peer's store or MPI went away: stop answering there
                watch.roll_call = None

    def _end(self, call: _Call, limit: float) -> None:
        watch = call.watch
        peers = [q for q in range(watch.size) if q != watch.rank]
        answers: dict[int, Answer | None] = dict.fromkeys(peers)
        if watch.roll_call is not None:
            # where the peers cannot be asked, report this rank alone
            with contextlib.suppress(Exception):
                answers = watch.roll_call.ask(peers, _ANSWER_WAIT_S, self.serve)
        lower = [a for a in answers.values() if a and a["past_limit"] and a["rank"] < watch.rank]
        if lower:  # that rank reports and ends the job; end it here if it does not
            self._stop.wait(_DEFER_S)
        else:
            sys.stderr.write(stall_message(self.answer(watch), answers, limit))
        abort_job(watch.mpi)

    def stop(self) -> None:
        """Stop the thread and withdraw the roll calls (at exit, before Python finalises:
        a daemon thread still inside a C++ call then would abort the process)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
        self._thread = None
        for watch in list(self._watches):
            if watch.roll_call is not None:
                with contextlib.suppress(Exception):  # the MPI or store is gone already
                    watch.roll_call.close()
                watch.roll_call = None
        self._watches = weakref.WeakSet()


_WATCHDOG = _Watchdog()
_TORCH_WATCHES: dict[tuple[int, ...], Watch] = {}
_MPI_WATCHES: dict[int, Watch] = {}


def _forget_after_fork() -> None:
    """A forked child has no watchdog thread and a process group of its own: start afresh."""
    global _WATCHDOG
    _WATCHDOG = _Watchdog()
    _TORCH_WATCHES.clear()
    _MPI_WATCHES.clear()


atexit.register(lambda: _WATCHDOG.stop())
os.register_at_fork(after_in_child=_forget_after_fork)


def _under_mpirun() -> bool:
    return detect_launch().launcher == "mpirun"


def torch_watch(group: Any, rank: int, size: int) -> Watch:
    """The `Watch` of a torch.distributed group (None: the world), asking its peers
    through the default store of torch.distributed."""
    ranks = tuple(dist.get_process_group_ranks(group or dist.group.WORLD))
    if ranks not in _TORCH_WATCHES:
        roll_call = None
        if watching(size) and hasattr(dist.distributed_c10d, "_get_default_store"):
            roll_call = StoreRollCall("nvdd_watchdog/" + "-".join(map(str, ranks)) + "/", rank)
        _TORCH_WATCHES[ranks] = Watch(rank, size, roll_call, _under_mpirun())
    return _TORCH_WATCHES[ranks]


def mpi_watch(comm: Any, mpi: Any) -> Watch:
    """The `Watch` of an mpi4py communicator, asking its peers with MPI messages of their
    own tags where the MPI library allows calls from several threads."""
    key = comm.py2f()
    if key not in _MPI_WATCHES:
        rank, size = comm.Get_rank(), comm.Get_size()
        threaded = mpi.Query_thread() == mpi.THREAD_MULTIPLE
        roll_call = MPIRollCall(comm, mpi) if threaded and watching(size) else None
        # an MPI abort from the watchdog's thread needs MPI_THREAD_MULTIPLE; without it
        # the process exits and mpirun ends the others
        _MPI_WATCHES[key] = Watch(rank, size, roll_call, threaded)
    return _MPI_WATCHES[key]
