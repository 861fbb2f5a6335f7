"""A restored checkpoint rebuilds through the model, as every other rebuild does: the
engine re-decides for the restored view which pairs the model is handed."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import torch
from ase.md.velocitydistribution import thermalize_momenta

from nvdd_plugins import Batch, DomainConfig, DomainParallel
from nvdd_plugins.comm import Communicator, run_simulated
from nvdd_plugins.geometry import images_unambiguous
from nvdd_plugins.parallel import domain_parallel
from tests.helpers.systems import MD_SKIN, lj_model, md_integrator, small_box


def _parallel(comm: Communicator) -> DomainParallel:
    config = DomainConfig(cutoff=lj_model().cutoff, skin=MD_SKIN, mesh=comm)
    return DomainParallel(md_integrator("nve", lj_model()), config, n_steps=3)


def _model_input_edges(dd: DomainParallel) -> torch.Tensor:
    return dd.model.compute_view(dd.batch).edge_index


def test_restored_view_hands_the_model_the_pairs_the_saved_run_did(tmp_path: Path) -> None:
    """In a box narrower than 2 x (cutoff + skin) the Verlet pairs in the skin must be
    filtered out before the model sees them (a skin pair can fold onto another image); the
    saved run's engine decided so at its rebuild, and the restored one must too."""
    path = tmp_path / "small.pt"
    atoms = small_box()
    thermalize_momenta(atoms, temperature_K=300, rng=np.random.default_rng(0))
    full = Batch.from_atoms(atoms)
    reach = lj_model().cutoff + MD_SKIN
    assert not images_unambiguous(full.cell[0], full.pbc[0], reach), "the box must be narrow"

    def saved(comm: Communicator) -> torch.Tensor:
        dd = _parallel(comm)
        dd.partition(full if comm.rank == 0 else None)
        dd.run()
        dd.save_checkpoint(path)
        return _model_input_edges(dd)

    def restored(comm: Communicator) -> torch.Tensor:
        dd = _parallel(comm)
        dd.restore_checkpoint(path)
        return _model_input_edges(dd)

    before = run_simulated(2, saved)
    after = run_simulated(2, restored)
    for rank, (edges, edges_restored) in enumerate(zip(before, after, strict=True)):
        n_rows = int(edges.max())
        assert bool((edges == n_rows).any()), "some skin pairs must be filtered out"
        assert torch.equal(edges_restored, edges), rank


def test_domain_parallel_rebuilds_through_the_model_only() -> None:
    """`DomainParallel` asks its model, never the model's decomposition state, to rebuild."""
    source = Path(domain_parallel.__file__)
    reached = [
        node.lineno
        for node in ast.walk(ast.parse(source.read_text()))
        if isinstance(node, ast.Attribute)
        and node.attr == "domain"
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "model"
    ]
    assert not reached, f"{source.name} reaches through model.domain at lines {reached}"
