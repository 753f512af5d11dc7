"""Options shared by the whole suite."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

FUZZ_DEFAULT = 8
"""Random implementations per case in the kernel families' fuzz tests, unless ``--fuzz``
says otherwise (``make fuzz`` checks 100)."""


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
