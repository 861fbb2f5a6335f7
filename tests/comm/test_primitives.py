"""Halo exchange ops: exact adjoints (gradcheck and inner products), plans, backends agree."""

from __future__ import annotations

import torch

from nvdd_plugins.comm import (
    HaloPlan,
    HaloSlot,
    all_reduce_sum,
    copy_to_ghosts,
    run_simulated,
    sum_ghosts_into_owners,
)


def _symmetric_plan(comm) -> HaloPlan:
    """Two ranks, 3 owned rows each; ghosts: two rows of the other rank and one self-image."""
    other = 1 - comm.rank
    owner_rank = torch.tensor([other, other, comm.rank])
    owner_row = torch.tensor([2, 0, 1])
    return HaloPlan.build(comm, 3, owner_rank, owner_row)


def test_plan_describes_ghost_owners() -> None:
    plans = run_simulated(2, _symmetric_plan)
    for rank, plan in enumerate(plans):
        assert plan.n_owned == 3 and plan.n_local == 6 and plan.peers == (1 - rank,)
        assert plan.send_rows[1 - rank].tolist() == [2, 0]
        assert plan.recv_rows[1 - rank].tolist() == [3, 4]
        assert plan.self_src.tolist() == [1] and plan.self_dst.tolist() == [5]


def test_copy_to_ghosts_copies_owner_rows() -> None:
    def run(comm):
        slot = HaloSlot()
        x = torch.arange(6.0).unsqueeze(1) + 10 * comm.rank
        return copy_to_ghosts(x, slot.bind(_symmetric_plan(comm), comm)).squeeze(1).tolist()

    assert run_simulated(2, run) == [[0, 1, 2, 12, 10, 1], [10, 11, 12, 2, 0, 11]]


def test_gradcheck_both_ops() -> None:
    def run(comm):
        slot = HaloSlot()
        number = slot.bind(_symmetric_plan(comm), comm)
        torch.manual_seed(comm.rank)
        x = torch.randn(6, 2, dtype=torch.float64, requires_grad=True)
        forward_ok = torch.autograd.gradcheck(lambda t: copy_to_ghosts(t, number), (x,))
        reverse_ok = torch.autograd.gradcheck(lambda t: sum_ghosts_into_owners(t, number), (x,))
        return forward_ok and reverse_ok

    assert all(run_simulated(2, run))


def test_forward_and_reverse_are_adjoint_on_random_plans() -> None:
    def run(comm):
        generator = torch.Generator().manual_seed(100 + comm.rank)
        n_owned = 4 + comm.rank
        sizes = [4 + r for r in range(comm.size)]
        n_ghost = 7
        owner_rank = torch.randint(0, comm.size, (n_ghost,), generator=generator)
        owner_row = torch.tensor(
            [int(torch.randint(0, sizes[r], (1,), generator=generator)) for r in owner_rank]
        )
        slot = HaloSlot()
        number = slot.bind(HaloPlan.build(comm, n_owned, owner_rank, owner_row), comm)
        x = torch.randn(n_owned + n_ghost, 3, dtype=torch.float64, generator=generator)
        y = torch.randn(n_owned + n_ghost, 3, dtype=torch.float64, generator=generator)
        left = (copy_to_ghosts(x, number) * y).sum()
        right = (x * sum_ghosts_into_owners(y, number)).sum()
        return float(all_reduce_sum(left, number) - all_reduce_sum(right, number))

    assert all(abs(d) < 1e-12 for d in run_simulated(3, run))


def test_sum_ghosts_into_owners_zeroes_ghosts() -> None:
    def run(comm):
        slot = HaloSlot()
        y = torch.ones(6, 1)
        return sum_ghosts_into_owners(y, slot.bind(_symmetric_plan(comm), comm)).squeeze(1).tolist()

    assert run_simulated(2, run) == [[2, 2, 2, 0, 0, 0], [2, 2, 2, 0, 0, 0]]
