"""What the bridge tells the user: one-time notices and warnings through the
`lammps_interface` logger (and, with the LAMMPS handle attached, LAMMPS's own warning path
into its screen and log file), and errors that end every rank instead of hanging the job."""

from __future__ import annotations

import logging
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from nvdd_plugins.comm import abort_job

__all__ = ["LammpsWarnings", "abort_on_error", "notify", "warnings_to_lammps", "world"]

logger = logging.getLogger("lammps_interface")
# the loggers whose warnings reach LAMMPS's log once the handle is attached
_ROUTED = ("lammps_interface", "nvdd_plugins")
_LMP_ERROR_WARNING = 0  # lammps.constants.LMP_ERROR_WARNING


def world() -> Any:
    """mpi4py's `COMM_WORLD` (imported on first use)."""
    from mpi4py import MPI  # imported on use: importing mpi4py initialises MPI

    return MPI.COMM_WORLD


class LammpsWarnings(logging.Handler):
    """Hands WARNING records to a LAMMPS instance's `Error::warning` (on rank 0: LAMMPS's
    screen and log file, "WARNING: lammps_interface: ...")."""

    def __init__(self, lmp: Any) -> None:
        super().__init__(logging.WARNING)
        self.lmp = lmp

    def emit(self, record: logging.LogRecord) -> None:
        """Pass the record's text to LAMMPS (not to an instance already closed)."""
        if getattr(self.lmp, "lmp", None) is None:
            return
        try:
            self.lmp.error(_LMP_ERROR_WARNING, f"{record.name}: {record.getMessage()}")
        except Exception:  # a closed instance: logging's own report, never the run's end
            self.handleError(record)


_lammps_warnings: list[LammpsWarnings] = []


def warnings_to_lammps(lmp: Any) -> None:
    """Send the warnings of nvdd's loggers to `lmp`'s warning path as well (None: stop)."""
    for handler in _lammps_warnings:
        for name in _ROUTED:
            logging.getLogger(name).removeHandler(handler)
    _lammps_warnings.clear()
    if lmp is not None:
        _stderr_unless_configured()  # and stderr still has them
        _lammps_warnings.append(LammpsWarnings(lmp))
        for name in _ROUTED:
            logging.getLogger(name).addHandler(_lammps_warnings[0])


_stderr: list[logging.Handler] = []


def _stderr_unless_configured() -> None:
    """Under LAMMPS nobody configures Python's logging: unless the application did, the
    bridge's notices (INFO and up) and nvdd's warnings go to stderr as "<logger>: ..."."""
    if _stderr or logging.getLogger().handlers:
        return
    for name, level in (("lammps_interface", logging.INFO), ("nvdd_plugins", logging.WARNING)):
        handler = logging.StreamHandler(sys.stderr)
        handler.setLevel(level)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        logging.getLogger(name).addHandler(handler)
        _stderr.append(handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)


def notify(message: str, level: int = logging.INFO, every_rank: bool = False) -> None:
    """Log `message` once at `level` on the `lammps_interface` logger, from world rank 0
    (or from this rank, `every_rank`: a message about this rank's atoms)."""
    if every_rank or world().Get_rank() == 0:
        _stderr_unless_configured()
        logger.log(level, message)


@contextmanager
def abort_on_error() -> Iterator[None]:
    """Turn an exception on any rank into an abort of every rank, with that rank's traceback.

    LAMMPS reports a Python error through `error->all`, which first waits for every rank in a
    barrier, so an error raised on some ranks only would hang the others. On one rank the
    exception propagates: LAMMPS stops with it (a Python driver receives it).
    """
    try:
        yield
    except Exception:
        comm = world()
        if comm.Get_size() == 1:
            raise
        sys.stderr.write(
            f"lammps_interface: error on rank {comm.Get_rank()}, aborting all ranks:\n"
            f"{traceback.format_exc()}"
        )
        abort_job(mpi=True)
