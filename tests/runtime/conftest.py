"""Shared fixtures: a private shared-object cache and one evaluator per test module.

The cache lives in a fresh temporary directory, so the suite never reads or writes the user's
``~/.cache/partita`` and every run really compiles. Timing options are minimal: the tests check
the protocol and the statuses, never the times themselves.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from partita.runtime import Compiler, Evaluator, TimingOptions

FAST = TimingOptions(warmups=1, warmup_s=0.0, min_reps=3, max_reps=10, budget_s=0.05)

MEMORY_LIMIT = 4 << 30
"""Plenty for the tests' kernels, far less than the 1 TiB the out-of-memory kernel asks for."""


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("partita-cache")


@pytest.fixture(scope="session")
def compiler(cache_dir: Path) -> Compiler:
    return Compiler(cache_dir=cache_dir)


@pytest.fixture(scope="module")
def evaluator(compiler: Compiler, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[Evaluator]:
    with Evaluator(timeout_s=10.0, timing=FAST, compiler=compiler,
                   memory_limit=MEMORY_LIMIT,
                   workdir=tmp_path_factory.mktemp("evaluator")) as ev:
        yield ev
