"""Uniform random descents that end in implementations (dead ends are retried)."""

from __future__ import annotations

import random
from collections.abc import Iterator

from partita.space.candidate import Candidate, DeadEnd
from partita.space.estimate import random_descent


class NoImplementation(RuntimeError):
    """Random descents kept ending in dead ends."""


def random_implementation(root: Candidate | DeadEnd, rng: random.Random,
                          tries: int = 1000) -> Candidate:
    """One implementation drawn by uniform random descent from ``root``."""
    if isinstance(root, DeadEnd):
        raise NoImplementation(f"the space has no implementation: {root.reason}")
    for _ in range(tries):
        leaf, _, _ = random_descent(root, rng)
        if isinstance(leaf, Candidate):
            return leaf
    raise NoImplementation(f"{tries} random descents all ended in dead ends")


def sample_implementations(root: Candidate | DeadEnd, count: int, rng: random.Random,
                           tries: int = 1000) -> Iterator[Candidate]:
    """``count`` implementations, each drawn independently by :func:`random_implementation`."""
    for _ in range(count):
        yield random_implementation(root, rng, tries)
