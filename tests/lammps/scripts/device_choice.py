"""Rank 0 prints each rank's place on the node and the device `choose_device` gives it for 1,
2 and 3 GPUs on the node (mocked counts), through the real MPI shared-memory split (one
printing rank: lines that several ranks print at once can interleave).

    mpirun -n P python -m mpi4py tests/lammps/scripts/device_choice.py
"""

from __future__ import annotations

from mpi4py import MPI

from lammps_interface.device import choose_device, node_local_rank

comm = MPI.COMM_WORLD
local = node_local_rank(comm)
chosen = [str(choose_device(None, gpus, lambda: node_local_rank(comm))) for gpus in (1, 2, 3)]
lines = comm.gather(f"rank {comm.Get_rank()} local {local} devices {' '.join(chosen)}", root=0)
if comm.Get_rank() == 0:
    print("\n".join(lines), flush=True)
