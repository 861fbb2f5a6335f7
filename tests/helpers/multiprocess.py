"""Real multi-process runs for tests: gloo ranks forked from pytest, and mpirun jobs.

Every run has a hard timeout; a rank's exception fails the test with that rank's traceback.
"""

from __future__ import annotations

import faulthandler
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.multiprocessing.spawn import ProcessException

from nvdd_plugins.comm.torch_dist import TorchDistCommunicator

REPO = Path(__file__).resolve().parents[2]
TWO_RANKS = {
    "torchrun": [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
    ],
    "mpirun": ["mpirun", "-n", "2", sys.executable],
}
"""Each launcher's command for two ranks, up to the script (mpirun without `-m mpi4py`)."""


def _gloo_worker(
    rank: int, world_size: int, store: str, out_dir: str, fn: Callable, args: tuple
) -> None:
    torch.set_num_threads(1)
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # loopback: no lookup of this host's name
    # on a timeout the parent sends SIGUSR1: every thread's Python stack goes to this file
    stacks = open(os.path.join(out_dir, f"rank{rank}.stack"), "w")  # noqa: SIM115 (lives as long as the rank)
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world_size)
    try:
        result = fn(TorchDistCommunicator(), *args)
        torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))
        dist.barrier()  # no rank tears gloo down while a peer still uses it
    except BaseException:
        with open(os.path.join(out_dir, f"rank{rank}.err"), "w") as err:
            err.write(f"{time.time()!r}\n{traceback.format_exc()}")
        raise
    finally:
        dist.destroy_process_group()


class RankFailed(RuntimeError):
    """One or more ranks raised; the message holds every rank's traceback, first failure first."""


def _rank_errors(out_dir: str) -> str:
    reports = []
    for name in os.listdir(out_dir):
        if name.endswith(".err"):
            stamp, _, text = Path(out_dir, name).read_text().partition("\n")
            reports.append((float(stamp), name[:-4], text))
    return "\n".join(f"--- {rank} ---\n{text}" for _, rank, text in sorted(reports))


def _stop_and_show_stacks(processes: list[Any], out_dir: str) -> str:
    """Every live rank's Python stacks (faulthandler, on SIGUSR1), then kill the ranks."""
    alive = [(rank, p) for rank, p in enumerate(processes) if p.is_alive()]
    for _, process in alive:
        os.kill(process.pid, signal.SIGUSR1)
    time.sleep(2.0)
    for _, process in alive:
        process.kill()
    return "\n".join(
        f"--- rank {rank} ---\n{Path(out_dir, f'rank{rank}.stack').read_text()}"
        for rank, _ in alive
    )


def run_gloo(
    world_size: int,
    fn: Callable[..., Any],
    *args: Any,
    timeout: float = 180.0,
    start_method: str = "fork",
) -> list[Any]:
    """Run `fn(comm, *args)` on `world_size` forked gloo ranks; return each rank's result.

    Raises `RankFailed` with every failing rank's traceback (earliest first) when one fails,
    and TimeoutError (after killing the ranks) past `timeout` seconds. Use
    start_method="spawn" (and a module-level `fn`) once CUDA is initialised.
    """
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        context = mp.start_processes(
            _gloo_worker,
            args=(world_size, store, tmp, fn, args),
            nprocs=world_size,
            join=False,
            start_method=start_method,
        )
        deadline = time.monotonic() + timeout
        try:
            while not context.join(timeout=1.0):
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{world_size} gloo ranks did not finish within {timeout} s; "
                        f"where each waited:\n{_stop_and_show_stacks(context.processes, tmp)}"
                    )
        except ProcessException as err:
            raise RankFailed(_rank_errors(tmp) or str(err)) from err
        return [
            torch.load(os.path.join(tmp, f"rank{r}.pt"), weights_only=False)
            for r in range(world_size)
        ]


def mpi_env() -> dict[str, str]:
    """Environment for mpirun jobs: root allowed, oversubscription, one thread, repo importable."""
    env = dict(os.environ)
    env.update(
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        OMPI_MCA_rmaps_base_oversubscribe="1",
        OMP_NUM_THREADS="1",
        PYTHONFAULTHANDLER="1",  # a rank killed by SIGABRT prints its Python stacks
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
    )
    return env


def _no_core_dumps() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run_command(command: list[str], cwd: Path | None, timeout: float) -> tuple[int, str]:
    """Run `command` in its own session with `mpi_env()`; on timeout end the whole group
    (SIGABRT, so every Python rank prints where it waited; then SIGKILL) and fail. Returns
    the exit code and the merged output."""
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=mpi_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=_no_core_dumps,
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGABRT)
        try:
            output, _ = process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
        raise AssertionError(
            f"timed out after {timeout} s: {' '.join(command)}\n{output}"
        ) from None
    return process.returncode, output


def run_mpi(
    n_ranks: int,
    script: str | Path,
    *args: str,
    timeout: float = 180.0,
    python: str | None = None,
    cwd: Path | None = None,
) -> str:
    """Run `mpirun -n N python -m mpi4py script args...` (in `cwd`, default the current
    directory); return its output.

    Fails (AssertionError with the output) on a non-zero exit, and kills the whole process
    group on timeout.
    """
    command = [
        "mpirun",
        "-n",
        str(n_ranks),
        python or sys.executable,
        "-m",
        "mpi4py",
        str(script),
        *args,
    ]
    code, output = run_command(command, cwd, timeout)
    assert code == 0, f"mpirun -n {n_ranks} exited {code}:\n{output}"
    return output
