"""A NaN/inf energy or force stops the run, every rank naming the ranks it came from.

In a message-passing model a non-finite energy on one rank's atom spreads, through the halo
exchange's adjoint, to the forces of other ranks' atoms; the rank that notices first is not
necessarily where it came from. So the check is collective: one all-reduce of a flag per
call, and only when a rank is flagged, one all-gather of what each rank found.
"""

from __future__ import annotations

import numpy as np

from lammps_interface.handle import attached
from lammps_interface.messages import world
from lammps_interface.rows import LocalRows, RowResults
from nvdd_plugins.distributed_model import NonFiniteError

__all__ = ["check_finite"]

_SHOWN = 10


def _owned_labels(nlocal: int) -> tuple[str, np.ndarray]:
    """How owned atoms are named: LAMMPS atom ids through the handle, else local rows."""
    lmp = attached()
    if lmp is None or not nlocal:
        return "local rows", np.arange(nlocal)
    return "atom ids", np.array(lmp.numpy.extract_atom("id", nelem=nlocal), dtype=np.int64)


def check_finite(results: RowResults, rows: LocalRows) -> None:
    """Raise `NonFiniteError` on every rank if any rank's owned rows have a NaN/inf energy
    or force (collective: every rank calls it every step; the rows are looked at on the
    host only when some rank's `results.finite` is False)."""
    lmp = attached()
    comm = lmp.get_mpi_comm() if lmp is not None else world()
    if comm.allreduce(int(not results.finite)) == 0:
        return
    bad_energy = ~np.isfinite(results.energies[: rows.nlocal])
    bad_force = np.zeros(rows.nlocal, dtype=bool)
    if rows.ntotal:
        bad_force = ~np.isfinite(results.forces[: rows.nlocal]).all(axis=1)
    kind, labels = _owned_labels(rows.nlocal)
    found = (kind, labels[bad_energy][:_SHOWN].tolist(), int(bad_energy.sum()))
    found += (labels[bad_force][:_SHOWN].tolist(), int(bad_force.sum()))
    raise NonFiniteError(_report(comm.allgather(found)))


def _report(found: list[tuple[str, list[int], int, list[int], int]]) -> str:
    """The message: ranks whose atoms got NaN/inf energies (where it came from), then ranks
    whose atoms got NaN/inf forces only."""

    def shown(values: list[int], count: int) -> str:
        return f"{values}{f' and {count - len(values)} more' if count > len(values) else ''}"

    origins = [
        f"rank {rank}: {count} atom(s), {kind} {shown(values, count)}"
        for rank, (kind, values, count, _, _) in enumerate(found)
        if count
    ]
    forces = [
        f"rank {rank}: {count} atom(s), {kind} {shown(values, count)}"
        for rank, (kind, _, n_energy, values, count) in enumerate(found)
        if count and not n_energy
    ]
    parts = [f"non-finite energies on {'; '.join(origins)}"] if origins else []
    if forces:
        parts.append(f"non-finite forces only on {'; '.join(forces)}")
    return (
        f"the model returned NaN/inf energies or forces: {' — '.join(parts)}. Where "
        "energies are non-finite is where it came from (forces spread it to neighbours on "
        "other ranks): check the model on these atoms, lower the time step, or look for "
        "overlapping atoms"
    )
