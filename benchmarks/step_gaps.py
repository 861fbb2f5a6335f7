"""Where a step's wall time goes on the GPU: kernel busy time and the idle gaps between
kernels (the host not keeping up, or a host synchronisation), for plain mace-torch and DD@1.

    python benchmarks/step_gaps.py --atoms 10976 --skin 0 --backend e3nn

Profiles --calls calls of each after warm-up (torch.profiler, CPU + CUDA, Python stacks) and
prints per call: wall, GPU busy (union of kernel intervals), idle, and the largest gaps with
the nvdd / mace Python frames that launched the kernel after each gap.
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
from typing import Any

import torch
from common import dd1_step, fcc_batch, mace_model
from mace_cueq import LATTICE, in_backend, plain_mace_step

from nvdd_plugins.models import MACEWrapper


def _union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, -1e30
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def _frames(events: list[dict[str, Any]], tid: Any, ts: float) -> str:
    """The nvdd / mace Python frames enclosing host time `ts` on thread `tid`, innermost first."""
    names = [
        e["name"]
        for e in events
        if e.get("cat") == "python_function"
        and e["tid"] == tid
        and e["ts"] <= ts <= e["ts"] + e.get("dur", 0)
        and ("nvdd_plugins" in e["name"] or "mace/" in e["name"])
    ]
    short = [n.split("/")[-1] for n in names[::-1][:3]]
    return " <- ".join(short) or "?"


def report(trace: dict[str, Any], label: str, gaps: int) -> dict[str, float]:
    events = trace["traceEvents"]
    windows = [e for e in events if e.get("cat") == "user_annotation" and e["name"] == label]
    kernels = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    launches = {
        e["args"].get("correlation"): e
        for e in events
        if e.get("cat") == "cuda_runtime" and "args" in e
    }
    rows = []
    for w in windows:
        a, b = w["ts"], w["ts"] + w["dur"]
        inside = sorted((k for k in kernels if a <= k["ts"] <= b), key=lambda k: k["ts"])
        busy = _union([(k["ts"], k["ts"] + k["dur"]) for k in inside])
        first = inside[0]["ts"] - a if inside else 0.0
        holes = []
        for prev, nxt in itertools.pairwise(inside):
            gap = nxt["ts"] - (prev["ts"] + prev["dur"])
            if gap > 0:
                holes.append((gap, prev, nxt))
        holes.sort(key=lambda h: -h[0])
        rows.append({"wall_ms": w["dur"] / 1e3, "busy_ms": busy / 1e3, "first_ms": first / 1e3})
        print(
            f"{label}: wall {w['dur'] / 1e3:.2f} ms, GPU busy {busy / 1e3:.2f} ms, idle "
            f"{(w['dur'] - busy) / 1e3:.2f} ms (before the first kernel {first / 1e3:.2f} ms, "
            f"{len(inside)} kernels, gaps > 50 us: {sum(1 for h in holes if h[0] > 50)} summing "
            f"{sum(h[0] for h in holes if h[0] > 50) / 1e3:.2f} ms)"
        )
        for gap, _, nxt in holes[:gaps]:
            launch = launches.get(nxt["args"].get("correlation"))
            where = _frames(events, launch["tid"], launch["ts"]) if launch else "?"
            print(f"    gap {gap:7.0f} us before {nxt['name'][:50]!r} launched in {where}")
    return {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--atoms", type=int, default=10976)
    parser.add_argument("--skin", type=float, default=0.0)
    parser.add_argument("--backend", choices=["cueq", "e3nn"], default="e3nn")
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--gaps", type=int, default=8, help="largest gaps shown per call")
    parser.add_argument("--json")
    args = parser.parse_args()
    device = torch.device("cuda")
    e3nn = mace_model("small", (29,), torch.float32).to(device)
    model = in_backend(e3nn, args.backend).requires_grad_(False)
    batch = fcc_batch(args.atoms, LATTICE, (29,), torch.float32, device)
    steps = {
        "plain": plain_mace_step(model, batch),
        "dd1": dd1_step(MACEWrapper(model), batch, args.skin),
    }
    for fn in steps.values():
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities, with_stack=True) as prof:
        for _ in range(args.calls):
            for name, fn in steps.items():
                with torch.profiler.record_function(name):
                    fn()
                    torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        with open(f.name) as exported:
            trace = json.load(exported)
    summary = {name: report(trace, name, args.gaps) for name in steps}
    print(json.dumps(summary))
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"args": vars(args), "summary": summary}, out, indent=1)


if __name__ == "__main__":
    main()
