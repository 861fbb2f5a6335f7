"""Where a thread of this process is, in words a user recognises: the line of their own
script it is on, the nvdd call it is in, or the library function it waits in."""

from __future__ import annotations

import os
import sys
import sysconfig
from types import FrameType

__all__ = ["thread_whereabouts", "whereabouts"]

# the nvdd_plugins package directory
_NVDD = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# where installed packages and the standard library live, longest first (a venv's
# site-packages lies inside its platstdlib)
_LIBRARIES = tuple(
    sorted(
        {
            os.path.abspath(sysconfig.get_paths()[key]) + os.sep
            for key in ("stdlib", "platstdlib", "purelib", "platlib")
        },
        key=len,
        reverse=True,
    )
)


def _is_nvdd(path: str) -> bool:
    return path.startswith(_NVDD)


def _is_library(path: str) -> bool:
    return path.startswith(_LIBRARIES) or path.startswith("<frozen")


def _shown(frame: FrameType) -> str:
    """`ase/parallel.py:98 in MPI4PY.broadcast`: a library's file relative to where it is
    installed, another file relative to the working directory (or absolute)."""
    path = os.path.abspath(frame.f_code.co_filename)
    for root in (*_LIBRARIES, os.path.dirname(_NVDD.rstrip(os.sep)) + os.sep):
        if path.startswith(root):
            path = path[len(root) :]
            break
    else:
        relative = os.path.relpath(path)
        path = path if relative.startswith("..") else relative
    return f"{path}:{frame.f_lineno} in {frame.f_code.co_qualname}"


def whereabouts(frame: FrameType | None) -> str:
    """The innermost frame of the user's own code in the stack ending at `frame`, then the
    outermost nvdd function below it ("in nvdd's DomainParallel.run") or, without one, the
    innermost library function the stack waits in ("inside ase/parallel.py:98 in
    MPI4PY.broadcast")."""
    stack = []
    while frame is not None:
        stack.append(frame)
        frame = frame.f_back
    stack.reverse()  # outermost first
    files = [os.path.abspath(f.f_code.co_filename) for f in stack]
    user = max(
        (i for i, path in enumerate(files) if not (_is_nvdd(path) or _is_library(path))),
        default=None,
    )
    below = range(0 if user is None else user + 1, len(stack))
    # the outermost nvdd function, not a decorator's wrapper around it
    nvdd = next(
        (i for i in below if _is_nvdd(files[i]) and "<locals>" not in stack[i].f_code.co_qualname),
        None,
    )
    parts = [] if user is None else [_shown(stack[user])]
    if nvdd is not None:
        parts.append(f"in nvdd's {stack[nvdd].f_code.co_qualname}")
    elif len(below) and stack:
        parts.append(f"inside {_shown(stack[-1])}")
    return ", ".join(parts) or "(no Python frame)"


def thread_whereabouts(thread_id: int) -> str:
    """`whereabouts` of the thread `thread_id` of this process (its current frame)."""
    return whereabouts(sys._current_frames().get(thread_id))
