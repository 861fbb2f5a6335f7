"""`Communicator.all_to_all` (the simulated mesh here; gloo and mpi4py ranks in
tests/multiprocess/test_gloo_pme_slabs.py) and the differentiable `all_to_all_rows`."""

from __future__ import annotations

import torch

from nvdd_plugins.comm import Communicator, LocalCommunicator, all_to_all_rows, run_simulated


def _counts(rank: int, size: int) -> list[int]:
    """The rows rank `rank` sends to each rank: uneven, some zero."""
    return [(rank + 2 * q) % 3 for q in range(size)]


def exchange_check(comm: Communicator) -> dict[str, object]:
    """Every rank sends rank-tagged rows. Returns what it received, and both sides of the
    adjoint identity <A x, w> = <x, A^T w> on this rank (A^T w: the gradient)."""
    size = comm.size
    send = _counts(comm.rank, size)
    recv = [_counts(q, size)[comm.rank] for q in range(size)]
    rows = torch.arange(sum(send), dtype=torch.float64)[:, None] + 100.0 * comm.rank
    x = torch.cat([rows, -rows], dim=1).requires_grad_()
    received = all_to_all_rows(x, send, recv, comm)
    weights = torch.randn(received.shape, dtype=torch.float64)
    (grad,) = torch.autograd.grad((received * weights).sum(), x)
    return {
        "received": received.detach(),
        "forward": float((received * weights).sum()),
        "backward": float((x * grad).sum()),
    }


def expected(rank: int, size: int) -> torch.Tensor:
    """The rows `rank` receives: from each rank q in order, q's block for `rank`."""
    blocks = []
    for q in range(size):
        counts = _counts(q, size)
        start = sum(counts[:rank])
        rows = torch.arange(start, start + counts[rank], dtype=torch.float64)[:, None] + 100.0 * q
        blocks.append(torch.cat([rows, -rows], dim=1))
    return torch.cat(blocks)


def assert_exchanged(results: list[dict[str, object]]) -> None:
    """Each rank received its blocks; the backward is the adjoint of the exchange."""
    for rank, result in enumerate(results):
        assert torch.equal(result["received"], expected(rank, len(results)))
    forward = sum(result["forward"] for result in results)
    backward = sum(result["backward"] for result in results)
    assert abs(forward - backward) < 1e-9 * max(1.0, abs(forward))


def test_simulated_all_to_all_and_its_adjoint() -> None:
    assert_exchanged(run_simulated(4, exchange_check))


def test_one_rank_is_the_identity() -> None:
    assert_exchanged([exchange_check(LocalCommunicator())])
