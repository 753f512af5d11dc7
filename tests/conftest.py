"""Options shared by the whole suite."""

from __future__ import annotations

import pytest

FUZZ_DEFAULT = 8
"""Random implementations per case in the kernel families' fuzz tests, unless ``--fuzz``
says otherwise (``make fuzz`` checks 100)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--fuzz", type=int, default=FUZZ_DEFAULT, metavar="N",
                     help="random implementations per case in the kernel families' fuzz "
                          f"tests (default {FUZZ_DEFAULT})")


@pytest.fixture(scope="session")
def fuzz_count(request: pytest.FixtureRequest) -> int:
    count = int(request.config.getoption("--fuzz"))
    if count < 1:
        raise pytest.UsageError(f"--fuzz {count}: give at least one implementation per case")
    return count
