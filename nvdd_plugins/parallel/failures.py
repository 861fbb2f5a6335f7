"""Exceptions that leave a collective call on one rank only, and what may follow them.

When one rank's call raises while its peers still wait in a collective of that call (a
halo exchange, a gather), the peers wait until the collective times out, and no later call
of the failed rank can meet them: a retry loop would enter the next call's collectives
while they wait in the failed one. So such an exception is noted for the rank's
communicator, and every later collective call on that rank (and `DistributedManager.
cleanup()`) ends the job with the original message instead of starting. Exceptions raised
alike on every rank after a collective decision (marked with `raised_on_every_rank`) leave
the ranks in step and are not noted.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from nvdd_plugins.comm import Communicator, TimedCommunicator
from nvdd_plugins.errors import is_raised_on_every_rank

__all__ = [
    "end_job_after_failure",
    "forget_failures",
    "noted_failure",
    "notes_failures",
]

_Params = ParamSpec("_Params")
_Result = TypeVar("_Result")
_noted: weakref.WeakKeyDictionary[Communicator, str] = weakref.WeakKeyDictionary()


class _Collective(Protocol):
    """An object whose methods are collective over `comm`."""

    comm: Communicator


_Self = TypeVar("_Self", bound=_Collective)


def notes_failures(
    method: Callable[Concatenate[_Self, _Params], _Result],
) -> Callable[Concatenate[_Self, _Params], _Result]:
    """Wrap a collective method of an object with a `comm`: it refuses to start on a rank
    whose communicator noted a failure (the job ends with that failure's message), and an
    exception leaving it on this rank alone is noted (the first one, as "Type: message")
    and re-raised."""

    @functools.wraps(method)
    def wrapper(self: _Self, *args: _Params.args, **kwargs: _Params.kwargs) -> _Result:
        end_job_after_failure(self.comm, f"{type(self).__name__}.{method.__name__}()")
        try:
            return method(self, *args, **kwargs)
        except BaseException as err:
            if noted_failure(self.comm) is None and not is_raised_on_every_rank(err):
                _noted[_group(self.comm)] = f"{type(err).__name__}: {err}"
            raise

    return wrapper


def end_job_after_failure(comm: Communicator, where: str) -> None:
    """End the job, naming `where` and the failure, when `comm` noted one; else return."""
    failure = noted_failure(comm)
    if failure is not None and comm.size > 1:
        comm.end_job(
            f"{where}: an earlier call on this rank ended with {failure} while the other "
            "ranks may still wait for it in a collective, so no later collective call can "
            "meet them; ending the job instead of waiting (catch errors around a whole run, "
            "not to retry one rank alone)"
        )


def noted_failure(comm: Communicator) -> str | None:
    """The first exception noted for `comm` since `forget_failures`, or None."""
    return _noted.get(_group(comm))


def _group(comm: Communicator) -> Communicator:
    """The communicator a `TimedCommunicator` wraps (failures belong to the group)."""
    while isinstance(comm, TimedCommunicator):
        comm = comm.inner
    return comm


def forget_failures() -> None:
    """Forget noted exceptions (a new process group starts in step)."""
    _noted.clear()
