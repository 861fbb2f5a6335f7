"""Exceptions that leave a collective call on one rank only.

When one rank's call raises while its peers still wait in a collective of that call (a
halo exchange, a gather), the peers wait until the collective times out. A script that
catches the exception and then calls `DistributedManager.cleanup()` would join them in a
barrier they never reach; so such an exception is noted here, and cleanup ends the job
instead. Exceptions raised alike on every rank after a collective decision (marked with
`raised_on_every_rank`) leave the ranks in step and are not noted.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from nvdd_plugins.errors import is_raised_on_every_rank

__all__ = ["forget_failures", "noted_failure", "notes_failures"]

_Params = ParamSpec("_Params")
_Result = TypeVar("_Result")
_noted: list[str] = []


def notes_failures(method: Callable[_Params, _Result]) -> Callable[_Params, _Result]:
    """Wrap a collective method: an exception leaving it on this rank alone is noted (the
    first one, as "Type: message") and re-raised."""

    @functools.wraps(method)
    def wrapper(*args: _Params.args, **kwargs: _Params.kwargs) -> _Result:
        try:
            return method(*args, **kwargs)
        except BaseException as err:
            if not _noted and not is_raised_on_every_rank(err):
                _noted.append(f"{type(err).__name__}: {err}")
            raise

    return wrapper


def noted_failure() -> str | None:
    """The first exception noted in this process since `forget_failures`, or None."""
    return _noted[0] if _noted else None


def forget_failures() -> None:
    """Forget noted exceptions (a new process group starts in step)."""
    _noted.clear()
