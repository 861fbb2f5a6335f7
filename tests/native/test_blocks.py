"""`BlockPool`: a block is handed out again only once no tensor made from it is alive."""

from __future__ import annotations

import threading

import pytest
import torch

from nvdd_plugins.native import native_library
from nvdd_plugins.native.blocks import BlockPool

pytestmark = pytest.mark.skipif(native_library() is None, reason="no C compiler")

ROWS = 1 << 19  # 12 MiB of (rows, 3) int64: a pooled size


def test_block_reused_only_when_free() -> None:
    pool = BlockPool()
    first = pool.take(ROWS, 3, torch.int64)
    first_address = first.data_ptr()
    first.fill_(7)
    held = first[:10]  # a view keeps the block in use
    del first
    second = pool.take(ROWS, 3, torch.int64)
    assert second.data_ptr() != held.data_ptr()
    second.fill_(1)
    assert bool((held == 7).all())  # the held outputs were not overwritten
    del held
    third = pool.take(ROWS, 3, torch.int64)  # the first block is free again
    assert third.data_ptr() == first_address
    second_address = second.data_ptr()
    del second
    fourth = pool.take(ROWS - 5, 3, torch.int64)  # so is the second, for a slightly smaller size
    assert fourth.data_ptr() == second_address
    assert fourth.shape == (ROWS - 5, 3) and fourth.data_ptr() % (2 << 20) == 0


def test_small_tensors_are_not_pooled() -> None:
    pool = BlockPool()
    small = pool.take(10, 3, torch.float64)
    assert small.shape == (10, 3) and small.dtype == torch.float64


def test_threads_never_share_a_block() -> None:
    pool = BlockPool()
    taken: list[torch.Tensor] = []

    def take() -> None:
        for _ in range(20):
            taken.append(pool.take(ROWS, 1, torch.float64))

    threads = [threading.Thread(target=take) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({t.data_ptr() for t in taken}) == len(taken)  # all held: all distinct
