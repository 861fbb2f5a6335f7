"""`Communicator.all_gather_rows` (with sums over ranks), `gather_by_id` and `all_reduce_sums`
(simulated ranks), and the collectives of a steady `ReplicatedModel` call (the ASE
calculator's layout)."""

from __future__ import annotations

import pytest
import torch

from nvdd_plugins import Batch, DomainConfig
from nvdd_plugins.comm import Communicator, run_simulated
from nvdd_plugins.distributed_model import ReplicatedModel
from tests.helpers.systems import SYSTEMS, mpnn_model


def _fields(rank: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Rank `rank`'s rows (rank 1 holds none): ids, and fields of two dtypes and shapes."""
    n = 0 if rank == 1 else 3 + rank
    ids = torch.arange(n) * 4 + rank
    return ids, {
        "energies": ids.double() + 0.5,
        "forces": torch.stack([ids.double(), -ids.double(), 2.0 * ids.double()], dim=1),
        "tensors": ids.double()[:, None, None].expand(n, 3, 3) * torch.eye(3),
        "counts": ids * 10,
    }


@pytest.mark.parametrize("size", [1, 3])
def test_rows_come_back_whole_by_id_whatever_their_dtype_and_shape(size: int) -> None:
    def gathered(comm: Communicator) -> dict[str, torch.Tensor]:
        ids, fields = _fields(comm.rank)
        return comm.gather_by_id(ids, fields)

    every = [_fields(rank) for rank in range(size)]
    ids = torch.cat([ids for ids, _ in every])
    order = torch.argsort(ids)
    for result in run_simulated(size, gathered):
        assert result.keys() == every[0][1].keys()
        for name, value in result.items():
            expected = torch.cat([fields[name] for _, fields in every])[order]
            assert value.dtype == expected.dtype and torch.equal(value, expected), name


def test_sums_over_ranks_come_back_by_name_in_their_dtype_and_shape() -> None:
    def summed(comm: Communicator) -> dict[str, torch.Tensor]:
        rank = float(comm.rank + 1)
        return comm.all_reduce_sums(
            {
                "energy": torch.tensor([rank], dtype=torch.float64),
                "stress": torch.full((1, 3, 3), rank, dtype=torch.float64),
                "count": torch.tensor([comm.rank + 1]),
                "charge": torch.tensor([rank, -rank], dtype=torch.float32),
            }
        )

    for result in run_simulated(3, summed):
        assert torch.equal(result["energy"], torch.tensor([6.0], dtype=torch.float64))
        assert torch.equal(result["stress"], torch.full((1, 3, 3), 6.0, dtype=torch.float64))
        assert torch.equal(result["count"], torch.tensor([6]))
        assert torch.equal(result["charge"], torch.tensor([6.0, -6.0]))


@pytest.mark.parametrize("size", [1, 3])
def test_sums_gathered_with_rows_equal_the_all_reduced_ones(size: int) -> None:
    """Sums taken from the all-gather of the rows, bit for bit those of an all-reduce, in
    one collective; a dtype without rows (the counts) is gathered alone."""

    def both(comm: Communicator) -> tuple[dict[str, torch.Tensor], ...]:
        _, fields = _fields(comm.rank)
        rank = comm.rank + 1.0
        sums = {
            "energy": torch.tensor([rank / 3.0], dtype=torch.float64),
            "stress": torch.full((1, 3, 3), rank / 7.0, dtype=torch.float64),
            "charge": torch.tensor([rank, -rank / 3.0], dtype=torch.float32),
            "none": torch.zeros(0, dtype=torch.float32),
        }
        rows = {"energies": fields["energies"], "forces": fields["forces"]}
        return comm.all_gather_rows(rows, sums), comm.all_reduce_sums(sums), rows

    results = run_simulated(size, both)
    for gathered, reduced, _ in results:
        for name, value in reduced.items():
            assert gathered[name].dtype == value.dtype and torch.equal(gathered[name], value)
        for name in ("energies", "forces"):
            expected = torch.cat([rows[name] for _, _, rows in results])
            assert torch.equal(gathered[name], expected), name


def test_a_steady_replicated_call_gathers_and_sums_once() -> None:
    """Between rebuilds the per-atom results of all ranks and the sums over ranks (energy,
    stress) come back in one all-gather (the order of the rows by id is known since the
    rebuild), besides the rebuild check's all-reduce."""
    atoms = SYSTEMS["bulk"]()
    model = mpnn_model()

    def collectives(comm: Communicator) -> list[dict[str, int]]:
        counts: dict[str, int] = {}
        for name in ("all_gather", "all_reduce"):
            original = getattr(comm, name)

            def counted(*args, _name=name, _original=original, **kwargs):
                counts[_name] = counts.get(_name, 0) + 1
                return _original(*args, **kwargs)

            setattr(comm, name, counted)
        config = DomainConfig(cutoff=model.cutoff, skin=0.5, mesh=comm)
        replicated = ReplicatedModel(model, config)
        full = Batch.from_atoms(atoms)
        per_call = []
        for _ in range(3):
            counts.clear()
            replicated(full, ("energy", "forces", "stress"))
            per_call.append(dict(counts))
        return per_call

    for per_call in run_simulated(2, collectives):
        assert per_call[1:] == [{"all_gather": 1, "all_reduce": 1}] * 2, per_call
