"""The first MD step of MACE + cuEquivariance on one GPU: where its time goes, against
mace-torch's own first call.

    python benchmarks/first_step.py --atoms 108000 --json first_step.json

In one process, in `--order` (default: plain, then nvdd): mace-torch's own first and second
force calls on its own exact-cutoff graph (`mace_cueq.plain_mace_step`), and nvdd's first MD
step (`DomainParallel(NVE)`, the default `cuda_graphs="auto"`: the initial forces and one
step) with its phases timed, then `--steps` steady steps and a step after a forced rebuild.
Every call of a cuEquivariance polynomial module (`cuequivariance_torch.SegmentedPolynomial`,
forward) is timed with the GPU synchronised around it and keyed by the module and its input
sizes: cuEquivariance builds a kernel plan (NVRTC compilation and a benchmark of candidate
kernels) the first time it meets a problem, so the first call of each key shows what that
cost, and the keys nvdd meets that plain did not are the extra problems its first step pays
for. With `CUEQUIVARIANCE_OPS_NVRTC_CACHE_DIR` set (cuEquivariance's on-disk cache of the
kernels it compiles), the files it holds after each phase are counted. `--profile-first N`
prints cProfile's N functions of most own time in nvdd's first forward under interception.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import os
import pstats
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from common import fcc_batch, mace_model, synchronize, write_json

LATTICE = 3.61


def _capturing() -> bool:
    """Whether a CUDA graph is being captured on the current stream."""
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


class Clock:
    """Wall seconds of named phases (the GPU synchronised at both ends) and of the first and
    later calls of each cuEquivariance problem."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cache = os.environ.get("CUEQUIVARIANCE_OPS_NVRTC_CACHE_DIR")
        self.phases: list[dict[str, Any]] = []
        self.problems: dict[tuple, dict[str, Any]] = {}
        self.stage = "setup"

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block as phase `name` (problems met inside are filed under it; not
        while a CUDA graph captures it)."""
        if _capturing():
            yield
            return
        previous, self.stage = self.stage, name
        synchronize(self.device)
        start = time.perf_counter()
        try:
            yield
        finally:
            synchronize(self.device)
            seconds = time.perf_counter() - start
            cached = (
                len(os.listdir(self.cache)) if self.cache and os.path.isdir(self.cache) else None
            )
            self.phases.append({"phase": name, "s": seconds, "cache_files": cached})
            print(f"{name:<48} {seconds:9.3f} s   cache files {cached}", flush=True)
            self.stage = previous

    def timed(self, key: tuple, call: Callable[[], Any]) -> Any:
        """`call()` timed as one call of cuEquivariance problem `key` (not while a CUDA graph
        captures it: a capture records, and cannot synchronise)."""
        if _capturing():
            return call()
        synchronize(self.device)
        start = time.perf_counter()
        out = call()
        synchronize(self.device)
        seconds = time.perf_counter() - start
        entry = self.problems.setdefault(
            key, {"first_s": seconds, "stage": self.stage, "calls": 0, "later_s": 0.0}
        )
        entry["calls"] += 1
        if entry["calls"] > 1:
            entry["later_s"] = max(entry["later_s"], seconds)
        elif seconds > 0.2:  # printed at once: a run stopped at its time limit still shows it
            print(f"    new problem {seconds:8.3f} s [{self.stage.strip()}] {key}", flush=True)
        return out

    def watch_cuequivariance(self) -> None:
        """Time every forward of cuEquivariance's polynomial modules."""
        from cuequivariance_torch.primitives.segmented_polynomial import SegmentedPolynomial

        forward = SegmentedPolynomial.forward
        clock = self

        def timed_forward(
            module, inputs, input_indices=None, output_shapes=None, output_indices=None
        ):
            key = (
                getattr(module, "method", "?"),
                f"module {id(module) % 100000:05d}",
                tuple(tuple(t.shape) for t in inputs),
                tuple(sorted((k, v.shape[0]) for k, v in (input_indices or {}).items())),
                tuple(sorted((k, v.shape[0]) for k, v in (output_shapes or {}).items())),
                torch.is_grad_enabled(),
            )
            call = lambda: forward(module, inputs, input_indices, output_shapes, output_indices)  # noqa: E731
            return clock.timed(key, call)

        SegmentedPolynomial.forward = timed_forward

    def watch(self, owner: Any, name: str, label: str) -> None:
        """Time every call of `owner.name` as phase `label`."""
        original = getattr(owner, name)
        clock = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            with clock.phase(label):
                return original(*args, **kwargs)

        setattr(owner, name, timed)

    def profile_first(self, owner: Any, name: str, rows: int) -> None:
        """Run the first call of `owner.name` under cProfile and print its `rows` functions
        of most own time (where a one-time cost on the host goes)."""
        original = getattr(owner, name)
        calls = [0]

        def profiled(*args: Any, **kwargs: Any) -> Any:
            calls[0] += 1
            if calls[0] > 1:
                return original(*args, **kwargs)
            profile = cProfile.Profile()
            try:
                return profile.runcall(original, *args, **kwargs)
            finally:
                synchronize(self.device)
                print(f"## cProfile of the first {owner.__name__}.{name}", flush=True)
                pstats.Stats(profile).sort_stats("tottime").print_stats(rows)

        setattr(owner, name, profiled)

    def report(self) -> dict[str, Any]:
        """Phases, and the problems by first-call cost."""
        by_stage: dict[str, float] = collections.defaultdict(float)
        for entry in self.problems.values():
            by_stage[entry["stage"]] += entry["first_s"] - entry["later_s"]
        problems = sorted(self.problems.items(), key=lambda item: -item[1]["first_s"])
        print(f"{len(self.problems)} cuEquivariance problems; first-call excess by stage:")
        for stage, seconds in by_stage.items():
            print(f"  {stage:<46} {seconds:9.3f} s")
        for key, entry in problems[:25]:
            print(
                f"  {entry['first_s']:8.3f} s first, {entry['later_s']:7.4f} later, "
                f"{entry['calls']:4d} calls  [{entry['stage']}]  {key}"
            )
        return {
            "phases": self.phases,
            "first_call_excess_by_stage": dict(by_stage),
            "problems": [{"key": repr(k), **v} for k, v in problems],
        }


def plain(model: torch.nn.Module, batch: Any, clock: Clock) -> None:
    """mace-torch's own first and second force calls."""
    from mace_cueq import plain_mace_step

    step = plain_mace_step(model, batch)
    with clock.phase("plain: first call"):
        step()
    with clock.phase("plain: second call"):
        step()


def nvdd(model: torch.nn.Module, batch: Any, clock: Clock, args: argparse.Namespace) -> None:
    """nvdd's first MD step, its phases, then steady steps and a step after a rebuild."""
    from nvdd_plugins import DomainConfig, DomainParallel
    from nvdd_plugins.distributed_model.evaluation.derivatives import Leaves
    from nvdd_plugins.distributed_model.evaluation.runner import SpecRunner
    from nvdd_plugins.distributed_model.layouts.model import SubdomainModel
    from nvdd_plugins.dynamics import NVE
    from nvdd_plugins.models import MACEWrapper

    clock.watch(SubdomainModel, "rebuild", "  rebuild (neighbour list, view)")
    clock.watch(SpecRunner, "_verified_forward", "  checked forward (reference + claimed)")
    if not args.compile:  # (a compiled forward would trace the clock)
        clock.watch(SpecRunner, "_forward_in_mode", "    forward under interception")
        if args.profile_first:
            clock.profile_first(SpecRunner, "_forward_in_mode", args.profile_first)
    clock.watch(Leaves, "derive", "  backward (forces)")
    wrapper = MACEWrapper(model)
    config = DomainConfig(cutoff=wrapper.cutoff, skin=args.skin, compile=args.compile)
    dd = DomainParallel(NVE(wrapper, 1.0), config)
    with clock.phase("nvdd: first MD step (partition, forces, step)"):
        dd.partition(batch.copy())
        dd.run(n_steps=1)
    with clock.phase(f"nvdd: next {args.steps} steps"):
        dd.run(n_steps=args.steps)
    dd.model.domain.verlet.reset()
    with clock.phase("nvdd: a step after a forced rebuild"):
        dd.run(n_steps=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--atoms", type=int, default=108_000)
    parser.add_argument("--preset", default="small", choices=["tiny", "small", "medium"])
    parser.add_argument("--order", default="plain,nvdd")
    parser.add_argument("--skin", type=float, default=0.5)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--compile", action="store_true", help="nvdd with compile=True")
    parser.add_argument(
        "--profile-first",
        type=int,
        default=0,
        metavar="N",
        help="cProfile nvdd's first forward under interception: its N functions of most time",
    )
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    device = torch.device(args.device)
    clock = Clock(device)
    with clock.phase("setup: model, conversion, crystal"):
        from nvdd_plugins.models.cueq import to_cuequivariance

        # converted on the GPU: mace fuses the cuEquivariance convolution only there
        model = to_cuequivariance(mace_model(args.preset, (29,), torch.float32).to(device))
        batch = fcc_batch(args.atoms, LATTICE, (29,), torch.float32, device, 300.0)
    clock.watch_cuequivariance()
    for part in args.order.split(","):
        if part == "plain":
            plain(model, batch, clock)
        else:
            nvdd(model, batch, clock, args)
    write_json(args.json, {"args": vars(args), "atoms": batch.num_nodes, **clock.report()})


if __name__ == "__main__":
    main()
