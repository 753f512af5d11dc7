"""runtime.child: an object in a spawned process whose calls can be stopped."""

from __future__ import annotations

import functools
import os
import time

import pytest

from partita.runtime.child import ChildFailed, ChildProcess, ChildTimeout


class Sleeper:
    """Stands for a runner: answers, hangs, raises or dies on demand."""

    def __init__(self, tag: str) -> None:
        self.tag = tag

    def echo(self, value: int, *, times: int = 1) -> tuple[str, int, int]:
        return self.tag, value * times, os.getpid()

    def hang(self) -> None:
        time.sleep(3600)

    def fail(self) -> None:
        raise ValueError("wrong values")

    def die(self) -> None:
        os._exit(3)


def broken() -> Sleeper:
    raise OSError("no device")


@pytest.mark.slow
def test_calls_run_in_one_child_until_one_hangs() -> None:
    with ChildProcess(functools.partial(Sleeper, "a")) as child:
        tag, value, pid = child.call("echo", 2, times=3, limit_s=60)
        assert (tag, value) == ("a", 6) and pid != os.getpid()
        assert child.call("echo", 1, limit_s=60)[2] == pid
        t0 = time.perf_counter()
        with pytest.raises(ChildTimeout, match=r"hang did not answer within 0\.5 s"):
            child.call("hang", limit_s=0.5)
        assert time.perf_counter() - t0 < 15
        assert not child.alive
        # The next call starts a fresh child and goes on.
        assert child.call("echo", 5, limit_s=60)[1:] != (5, pid)
        assert child.starts == 2


def test_an_exception_comes_back_and_the_child_stays() -> None:
    with ChildProcess(functools.partial(Sleeper, "b")) as child:
        pid = child.call("echo", 1, limit_s=60)[2]
        with pytest.raises(ValueError, match="wrong values"):
            child.call("fail", limit_s=60)
        assert child.call("echo", 1, limit_s=60)[2] == pid


@pytest.mark.slow
def test_a_child_that_dies_or_cannot_start_is_reported() -> None:
    with ChildProcess(functools.partial(Sleeper, "c")) as child:
        with pytest.raises(ChildFailed, match="died during die"):
            child.call("die", limit_s=60)
        assert child.call("echo", 4, limit_s=60)[1] == 4
    with ChildProcess(broken) as child, pytest.raises(ChildFailed, match="OSError: no device"):
        child.call("echo", 1, limit_s=60)
