"""Checkpoint and restart: a restarted `DomainParallel` run continues the uninterrupted one
bit-identically at the same rank count, and to rounding at another."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from nvdd_plugins import DomainConfig, DomainParallel, HookScope
from nvdd_plugins.comm import Communicator, run_simulated
from nvdd_plugins.dynamics import DynamicsStage
from nvdd_plugins.parallel.checkpoint import CHECKPOINT_FORMAT, CheckpointFormatError
from nvdd_plugins.parallel.checkpoint_file import read_checkpoint_file, write_checkpoint_file
from tests.helpers.multiprocess import run_gloo
from tests.helpers.systems import MD_SKIN, hot_bulk, lj_model, md_integrator

N_STEPS = 60
HALF = 30
INTEGRATORS = ("nve", "langevin")


class _Frames:
    """GLOBAL hook: the gathered positions after every step, by step number."""

    stage = DynamicsStage.AFTER_STEP
    scope = HookScope.GLOBAL
    frequency = 1

    def __init__(self) -> None:
        self.positions: dict[int, torch.Tensor] = {}

    def __call__(self, ctx, stage) -> None:
        self.positions[ctx.step] = ctx.batch.positions.clone()


def _parallel(
    comm: Communicator, name: str, frames: _Frames, hysteresis: float = 0.0
) -> DomainParallel:
    config = DomainConfig(
        cutoff=lj_model().cutoff, skin=MD_SKIN, mesh=comm, migration_hysteresis=hysteresis
    )
    return DomainParallel(md_integrator(name, lj_model()), config, HALF, hooks=[frames])


def _final(dd: DomainParallel, frames: _Frames) -> dict:
    full = dd.gather(dd.batch)
    return {
        "positions": full.positions,
        "velocities": full.velocities,
        "frames": frames.positions,
        "step": dd.dynamics.step_count,
        "views": dd.model.domain.rebuilds,
    }


def _uninterrupted(comm: Communicator, name: str, hysteresis: float = 0.0) -> dict:
    frames = _Frames()
    dd = _parallel(comm, name, frames, hysteresis)
    dd.partition(hot_bulk() if comm.rank == 0 else None)
    dd.run(n_steps=N_STEPS)
    return _final(dd, frames)


def _first_half(comm: Communicator, name: str, path: Path, hysteresis: float = 0.0) -> None:
    dd = _parallel(comm, name, _Frames(), hysteresis)
    dd.partition(hot_bulk() if comm.rank == 0 else None)
    dd.run()
    dd.save_checkpoint(path)


def _second_half(comm: Communicator, name: str, path: Path, hysteresis: float = 0.0) -> dict:
    frames = _Frames()
    dd = _parallel(comm, name, frames, hysteresis)
    owned = dd.restore_checkpoint(path)
    assert torch.equal(owned.global_ids, torch.sort(owned.global_ids).values)
    dd.run()
    return _final(dd, frames)


def _largest_deviation(reference: dict, restarted: dict) -> float:
    """Largest position difference (Å) over the restarted run's steps."""
    assert sorted(restarted["frames"]) == list(range(HALF + 1, N_STEPS + 1))
    return max(
        float((reference["frames"][step] - positions).abs().max())
        for step, positions in restarted["frames"].items()
    )


@pytest.mark.parametrize("name", INTEGRATORS)
def test_restart_on_the_simulated_mesh(name: str, tmp_path: Path) -> None:
    path = tmp_path / "run.pt"
    reference = run_simulated(2, lambda comm: _uninterrupted(comm, name))[0]
    run_simulated(2, lambda comm: _first_half(comm, name, path))

    saved = read_checkpoint_file(path)
    assert saved["dynamics"]["state"] == {"step_count": HALF}
    rebuild_positions = saved["neighbor_list"]["reference_positions"]
    assert not torch.equal(rebuild_positions, saved["atoms"]["positions"]), (
        "the checkpoint must fall between two rebuilds to test the restored neighbour list"
    )

    restarted = run_simulated(2, lambda comm: _second_half(comm, name, path))[0]
    assert restarted["step"] == N_STEPS
    assert restarted["views"] > 1, "the restarted run must rebuild at least once"
    for step, positions in restarted["frames"].items():
        assert torch.equal(positions, reference["frames"][step]), step
    assert torch.equal(restarted["positions"], reference["positions"])
    assert torch.equal(restarted["velocities"], reference["velocities"])

    for world_size in (3, 1):
        other = run_simulated(world_size, lambda comm: _second_half(comm, name, path))[0]
        assert _largest_deviation(reference, other) < 1e-8, world_size
        assert float((other["velocities"] - reference["velocities"]).abs().max()) < 1e-8


def test_checkpoint_before_the_first_step(tmp_path: Path) -> None:
    """Saved right after partition (no neighbour list yet): the restart builds one."""
    path = tmp_path / "start.pt"

    def save(comm: Communicator) -> None:
        dd = _parallel(comm, "langevin", _Frames())
        dd.partition(hot_bulk() if comm.rank == 0 else None)
        dd.save_checkpoint(path)

    run_simulated(2, save)
    assert read_checkpoint_file(path)["neighbor_list"]["reference_positions"] is None
    reference = run_simulated(2, lambda comm: _uninterrupted(comm, "langevin"))[0]
    restarted = run_simulated(2, lambda comm: _second_half(comm, "langevin", path))[0]
    assert sorted(restarted["frames"]) == list(range(1, HALF + 1))
    for step, positions in restarted["frames"].items():
        assert torch.equal(positions, reference["frames"][step]), step


def test_restart_with_migration_hysteresis(tmp_path: Path) -> None:
    """With hysteresis the owners depend on the run's history: the saved owners are reused."""
    path = tmp_path / "hysteresis.pt"
    reference = run_simulated(2, lambda comm: _uninterrupted(comm, "nve", 0.2))[0]
    run_simulated(2, lambda comm: _first_half(comm, "nve", path, 0.2))
    restarted = run_simulated(2, lambda comm: _second_half(comm, "nve", path, 0.2))[0]
    assert torch.equal(restarted["positions"], reference["positions"])
    assert torch.equal(restarted["velocities"], reference["velocities"])


def _gloo_restarts(comm: Communicator, directory: str) -> dict[str, tuple]:
    results = {}
    for name in INTEGRATORS:
        path = Path(directory) / f"{name}.pt"
        reference = _uninterrupted(comm, name)
        _first_half(comm, name, path)
        restarted = _second_half(comm, name, path)
        results[name] = (
            torch.equal(restarted["positions"], reference["positions"]),
            torch.equal(restarted["velocities"], reference["velocities"]),
            restarted["step"],
        )
    return results


@pytest.mark.multiprocess
def test_restart_on_gloo_ranks(tmp_path: Path) -> None:
    for results in run_gloo(2, _gloo_restarts, str(tmp_path), timeout=120):
        for name, (same_positions, same_velocities, step) in results.items():
            assert same_positions and same_velocities, name
            assert step == N_STEPS, name


def _restore(path: Path) -> None:
    def fn(comm: Communicator) -> None:
        _parallel(comm, "nve", _Frames()).restore_checkpoint(path)

    run_simulated(2, fn)


def test_missing_checkpoint_is_reported(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="does not exist") as failure:
        _restore(tmp_path / "absent.pt")
    assert isinstance(failure.value.__cause__, FileNotFoundError)


def test_foreign_files_are_refused(tmp_path: Path) -> None:
    other = tmp_path / "weights.pt"
    torch.save({"state_dict": {"w": torch.zeros(3)}}, other)
    text = tmp_path / "notes.pt"
    text.write_text("not a checkpoint\n")
    newer = tmp_path / "newer.pt"
    torch.save({"format": CHECKPOINT_FORMAT, "version": 99}, newer)
    for path, message in ((other, "format tag None"), (text, "is not a"), (newer, "version 99")):
        with pytest.raises(RuntimeError, match=message) as failure:
            _restore(path)
        assert isinstance(failure.value.__cause__, CheckpointFormatError), path
        assert "weights_only" not in str(failure.value), "never advise loading an untrusted file"


def _errors_on_every_rank(action) -> list[str]:
    """What each of two simulated ranks raised running `action(comm)` (a rank that raises
    something else, or waits for a peer that left, fails the test)."""

    def fn(comm: Communicator) -> str:
        try:
            action(comm)
        except (OSError, CheckpointFormatError) as err:
            return f"{type(err).__name__}: {err}"
        return "no error"

    return run_simulated(2, fn, timeout=30)


def _saved_at_start(path: Path) -> dict:
    """Save right after partition; return the file's content."""

    def save(comm: Communicator) -> None:
        dd = _parallel(comm, "nve", _Frames())
        dd.partition(hot_bulk() if comm.rank == 0 else None)
        dd.save_checkpoint(path)

    run_simulated(2, save)
    return read_checkpoint_file(path)


def _damaged(content: dict, change) -> dict:
    content = {
        key: dict(value) if isinstance(value, dict) else value for key, value in content.items()
    }
    change(content)
    return content


def test_damaged_checkpoints_are_refused_on_every_rank(tmp_path: Path) -> None:
    """Changed bytes, a duplicated id, a missing entry, a short per-atom tensor or cuts that
    fall: every rank raises CheckpointFormatError naming the damage, none restores a broken
    system."""
    good = tmp_path / "good.pt"
    content = _saved_at_start(good)
    n_atoms = content["atoms"]["global_ids"].shape[0]
    flipped = bytearray(good.read_bytes())
    middle = len(flipped) // 2
    flipped[middle : middle + 64] = bytes(255 - b for b in flipped[middle : middle + 64])
    (tmp_path / "flipped.pt").write_bytes(bytes(flipped))

    def duplicate_id(c: dict) -> None:
        ids = c["atoms"]["global_ids"].clone()
        ids[3] = ids[4]
        c["atoms"]["global_ids"] = ids

    def drop_atoms(c: dict) -> None:
        del c["atoms"]

    def short_positions(c: dict) -> None:
        c["atoms"]["positions"] = c["atoms"]["positions"][:100]

    def falling_cuts(c: dict) -> None:
        cuts = dict(c["decomposition"]["cuts"])
        cuts["x"] = cuts["x"].flip(0)
        c["decomposition"]["cuts"] = cuts

    for name, change in (
        ("duplicate", duplicate_id),
        ("no_atoms", drop_atoms),
        ("short", short_positions),
        ("cuts", falling_cuts),
    ):
        write_checkpoint_file(tmp_path / f"{name}.pt", _damaged(content, change))
    expected = {
        "flipped": "damaged|is not a",
        "duplicate": "global ids are not distinct",
        "no_atoms": "no 'atoms' entry",
        "short": rf"atoms/positions has shape \(100, 3\) for {n_atoms} atoms",
        "cuts": "decomposition/cuts: x cuts must rise",
    }
    for name, message in expected.items():
        path = tmp_path / f"{name}.pt"
        errors = _errors_on_every_rank(
            lambda comm, path=path: _parallel(comm, "nve", _Frames()).restore_checkpoint(path)
        )
        for error in errors:
            assert error.startswith("CheckpointFormatError") and re.search(message, error), (
                name,
                error,
            )


def test_a_failed_write_raises_on_every_rank_and_leaves_no_partial_file(tmp_path: Path) -> None:
    """A missing directory (torch.save raises RuntimeError there) or a rename onto a
    directory: OSError on every rank, no `.partial` file left behind."""
    taken = tmp_path / "taken.pt"
    taken.mkdir()
    (taken / "keep").write_text("a directory in the checkpoint's place\n")
    for path in (tmp_path / "missing" / "run.pt", taken):

        def save(comm: Communicator, path: Path = path) -> None:
            dd = _parallel(comm, "nve", _Frames())
            dd.partition(hot_bulk() if comm.rank == 0 else None)
            dd.save_checkpoint(path)

        for error in _errors_on_every_rank(save):
            assert error.startswith("OSError: cannot write the checkpoint"), error
        assert not path.with_name(path.name + ".partial").exists(), path


def test_owners_that_do_not_hold_their_atoms_are_refused(tmp_path: Path) -> None:
    """A file whose digest is good but whose owner table was edited (five atoms handed to
    the other rank) would restore at the same rank count and run with ghosts missing: every
    rank refuses it. At another rank count owners are derived afresh and it restores."""
    saved = tmp_path / "saved.pt"
    run_simulated(2, lambda comm: _first_half(comm, "nve", saved))
    content = read_checkpoint_file(saved)

    def swap_five_owners(c: dict) -> None:
        owner = c["decomposition"]["owner"].clone()
        owner[:5] = 1 - owner[:5]
        c["decomposition"] = {**c["decomposition"], "owner": owner}

    edited = tmp_path / "edited.pt"
    write_checkpoint_file(edited, _damaged(content, swap_five_owners))
    errors = _errors_on_every_rank(
        lambda comm: _parallel(comm, "nve", _Frames()).restore_checkpoint(edited)
    )
    for error in errors:
        assert error.startswith("CheckpointFormatError: decomposition/owner: 5 atoms lie"), error
    restarted = run_simulated(3, lambda comm: _second_half(comm, "nve", edited))[0]
    assert restarted["step"] == N_STEPS
