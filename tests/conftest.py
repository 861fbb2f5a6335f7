"""Test-session set-up: one thread per process (forked ranks must not inherit OpenMP pools),
the CI subset (tests marked `slow` run only with NVDD_ALL_TESTS=1) and a list of the tests
that came near their timeout."""

from __future__ import annotations

import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
os.environ.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")

import pytest
import torch

torch.set_num_threads(1)


ALL_TESTS_ENV = "NVDD_ALL_TESTS"
"""Set to 1 (`make test-all`) to run the tests marked `slow` as well."""


def all_tests() -> bool:
    """Whether this run includes the `slow` tier (`make test-all`)."""
    return os.environ.get(ALL_TESTS_ENV) == "1"


NEAR_TIMEOUT = 1 / 3
"""A test whose call takes more than this share of its timeout is listed at the end of the run."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip `slow` tests (long sweeps, heavy compiles) unless NVDD_ALL_TESTS=1."""
    if all_tests():
        return
    skip = pytest.mark.skip(reason=f"slow: outside the CI subset ({ALL_TESTS_ENV}=1 runs it)")
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)


def _timeout_of(item: pytest.Item) -> float:
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    return float(item.config.getini("timeout") or 0)


_near_timeout: list[tuple[str, float, float]] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """Time each test's call against its timeout."""
    start = time.monotonic()
    yield
    took, limit = time.monotonic() - start, _timeout_of(item)
    if limit and took > NEAR_TIMEOUT * limit:
        _near_timeout.append((item.nodeid, took, limit))


def pytest_terminal_summary(terminalreporter) -> None:
    """List the tests that came near their timeout, so a slow machine's red is seen coming."""
    if not _near_timeout:
        return
    terminalreporter.section(f"tests over {NEAR_TIMEOUT:.0%} of their timeout")
    for nodeid, took, limit in sorted(_near_timeout, key=lambda row: -row[1] / row[2]):
        terminalreporter.write_line(f"{took:7.1f} s of {limit:.0f} s  {nodeid}")


@pytest.fixture(autouse=True)
def _empty_dynamo_cache() -> None:
    """Every test compiles from an empty dynamo cache: the graphs earlier tests compiled of
    the same function count towards dynamo's limit of recompiles per function (8), which
    `fullgraph=True` turns into an error, so a compiled test would pass alone and fail
    after others (0.01 ms a test)."""
    torch._dynamo.reset()


@pytest.fixture
def dynamo_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """`torch.compile` as dynamo's graph capture without code generation (backend "eager")."""
    from tests.helpers.compiling import dynamo_only_compile

    monkeypatch.setattr(torch, "compile", dynamo_only_compile(torch.compile))
