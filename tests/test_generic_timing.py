"""The versions of a size-generic kernel timed at a training size alternately, over rounds,
so that a host whose speed drifts slows them all alike."""

from __future__ import annotations

import itertools
import time

from partita.tuning.generic_tune import TIMING_ROUNDS, alternate_timings


def test_versions_at_a_size_are_timed_in_alternating_rounds() -> None:
    log: list[str] = []

    def version(name: str, seconds: float) -> object:
        def call() -> None:
            log.append(name)
            time.sleep(seconds)
        return call

    calls = [(0, (version("a", 0.002), []), [1.0]), (1, (version("b", 0.0005), []), [1.0])]
    alternate_timings(calls, 0.005)
    # Each version's calls come in one run per round, the versions taking turns.
    runs = [name for name, _ in itertools.groupby(log)]
    assert runs == ["a", "b"] * TIMING_ROUNDS
    for (_, _, times), seconds in zip(calls, (0.002, 0.0005), strict=True):
        assert len(times) == 1 + TIMING_ROUNDS
        assert all(seconds <= t < 1.0 for t in times[1:])


def test_a_version_alone_at_a_size_is_not_timed_again() -> None:
    calls = [(0, (lambda: None, []), [1.0])]
    alternate_timings(calls, 0.005)
    assert calls[0][2] == [1.0]
