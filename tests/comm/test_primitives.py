"""Halo exchange ops: exact adjoints (gradcheck and inner products), plans, backends agree."""

from __future__ import annotations

import torch
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd
from torch.utils._python_dispatch import TorchDispatchMode

from nvdd_plugins.comm import (
    HaloPlan,
    HaloSlot,
    all_reduce_sum,
    copy_to_ghosts,
    copy_to_ghosts_,
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


class _OpNames(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


def test_eager_calls_run_the_kernels_not_the_registered_ops() -> None:
    """Eager exchanges skip the registered ops' dispatch (~20 us a call); same gradients as
    the in-place form."""

    def run(comm):
        slot = HaloSlot()
        number = slot.bind(_symmetric_plan(comm), comm)
        x = torch.randn(6, 2, dtype=torch.float64, requires_grad=True)
        with _OpNames() as seen:
            y = copy_to_ghosts(x * 1.0, number)
            z = all_reduce_sum(sum_ghosts_into_owners(y * y, number).sum(), number)
            (grad,) = torch.autograd.grad(z, x)
        in_place = copy_to_ghosts_(x * 1.0, number)
        assert torch.equal(in_place, y)
        (again,) = torch.autograd.grad(
            all_reduce_sum(sum_ghosts_into_owners(in_place * in_place, number).sum(), number), x
        )
        assert torch.equal(grad, again)
        return [name for name in seen.names if name.startswith("nvdd.")]

    assert run_simulated(2, run) == [[], []]


def test_compiled_code_runs_the_registered_ops() -> None:
    """Under torch.compile the same operations are the registered ops, forward and backward,
    with the eager values and gradients (one rank whose ghosts are images of its own rows)."""
    names: set[str] = set()

    def recording(graph, example_inputs):
        names.update(str(node.target) for node in graph.graph.nodes if node.op == "call_function")
        return make_boxed_func(graph)

    def run(comm):
        plan = HaloPlan.build(comm, 3, torch.tensor([0, 0]), torch.tensor([2, 0]))
        slot = HaloSlot()
        number = slot.bind(plan, comm)

        def f(x):
            y = copy_to_ghosts(x * 2.0, number)
            return all_reduce_sum(sum_ghosts_into_owners(y * y, number).sum(), number)

        x = torch.randn(5, 2, dtype=torch.float64, requires_grad=True)
        backend = aot_autograd(fw_compiler=recording, bw_compiler=recording)
        value = torch.compile(f, backend=backend, fullgraph=True)(x)
        (grad,) = torch.autograd.grad(value, x)
        (eager,) = torch.autograd.grad(f(x), x)
        assert torch.allclose(value, f(x)) and torch.allclose(grad, eager)

    run_simulated(1, run)
    assert {name for name in names if name.startswith("nvdd.")} == {
        "nvdd.all_reduce_sum.default",
        "nvdd.copy_to_ghosts.default",
        "nvdd.sum_ghosts_into_owners.default",
    }
