"""Options shared by the whole suite."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator

import pytest

FUZZ_DEFAULT = 8
"""Random implementations per case in the kernel families' fuzz tests, unless ``--fuzz``
says otherwise (``make fuzz`` checks 100)."""


FULL_COLLECTION_EVERY = 100
"""Tests between two full garbage collections of a test process. A process of the suite holds
hundreds of thousands of objects alive on purpose (the compiled layouts that spaces of equal
kernels share, the memoized space definitions); Python's automatic full collections, started
whenever the objects kept grew by a quarter, walked them all about 85 times per process: 45-55
s of each worker's time, where a tune in one process spends a fraction of a second. The young
generations are still collected automatically."""

_tests_since_collection = 0


def pytest_configure(config: pytest.Config) -> None:
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, 1 << 30)  # the oldest generation: by the hook below


def pytest_runtest_teardown(item: pytest.Item) -> None:
    global _tests_since_collection
    _tests_since_collection += 1
    if _tests_since_collection >= FULL_COLLECTION_EVERY:
        _tests_since_collection = 0
        gc.collect()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--fuzz", type=int, default=FUZZ_DEFAULT, metavar="N",
                     help="random implementations per case in the kernel families' fuzz "
                          f"tests (default {FUZZ_DEFAULT})")
    parser.addoption("--soak", type=float, default=0.0, metavar="SECONDS",
                     help="how long the four tuners of the shared-records test write to one "
                          "PostgreSQL database (default: six evaluations each)")


@pytest.fixture(scope="session")
def fuzz_count(request: pytest.FixtureRequest) -> int:
    count = int(request.config.getoption("--fuzz"))
    if count < 1:
        raise pytest.UsageError(f"--fuzz {count}: give at least one implementation per case")
    return count


@pytest.fixture(autouse=True, scope="session")
def records_of_the_suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Tests that record without naming a database write to one of their own, never to the
    user's records (``$PARTITA_DB``, else the cache directory), which may be of another
    schema or hold real tunes."""
    old = os.environ.get("PARTITA_DB")
    os.environ["PARTITA_DB"] = str(tmp_path_factory.mktemp("records") / "records.sqlite")
    yield
    if old is None:
        os.environ.pop("PARTITA_DB", None)
    else:
        os.environ["PARTITA_DB"] = old
