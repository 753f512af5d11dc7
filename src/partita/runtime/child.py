"""An object that lives in a child process, so that a call that never returns can be stopped.

A GPU kernel launch cannot be interrupted: a candidate that deadlocks (a barrier some threads
never reach) or runs for minutes holds the process that launched it until it ends. Measured on
an H200: a tune of matmul 1024^3 evaluated 50 implementations in 29 s, then waited on one
launch for the rest of its budget and beyond. :class:`ChildProcess` builds an object (a CUDA
runner) in a process of its own and calls its methods one at a time; a call that does not
answer within its limit ends that process (the driver then frees its context and stops its
kernels), raises :class:`ChildTimeout`, and the next call starts a fresh one.

The child is *spawned*, never forked: a process that has initialised CUDA cannot be forked
into one that uses it. ``factory`` and the calls' arguments and results travel pickled.
"""

from __future__ import annotations

import multiprocessing
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

START_LIMIT_S = 120.0
"""Time a new child has to build its object (import, driver initialisation)."""


class ChildTimeout(RuntimeError):
    """A call did not answer within its limit; its process was stopped."""


class ChildFailed(RuntimeError):
    """The child could not build its object, or died during a call (its exit code said)."""


def _serve(conn: Connection, factory: Callable[[], Any]) -> None:
    """The child's loop: build the object, then answer ``(method, args, kwargs)`` requests
    with ``("ok", result)`` or ``("raised", exception or its text)`` until ``None``."""
    try:
        obj = factory()
    except BaseException as exc:  # everything reaches the parent, which reports it
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", None))
    try:
        while True:
            try:
                request = conn.recv()
            except EOFError:
                return
            if request is None:
                return
            method, args, kwargs = request
            try:
                conn.send(("ok", getattr(obj, method)(*args, **kwargs)))
            except Exception as exc:
                try:
                    conn.send(("raised", exc))
                except Exception:  # an exception that does not pickle: its text
                    conn.send(("raised", RuntimeError(traceback.format_exc(limit=3))))
    finally:
        close = getattr(obj, "close", None)
        if callable(close):
            close()


class ChildProcess:
    """``factory()`` built in a spawned child; :meth:`call` runs one of its methods there.

    ``factory`` must pickle (a module-level function, or a :func:`functools.partial` of one).
    The child starts at the first call and again after a call that timed out or killed it.
    """

    def __init__(self, factory: Callable[[], Any], *,
                 start_limit_s: float = START_LIMIT_S) -> None:
        self.factory = factory
        self.start_limit_s = start_limit_s
        self.starts = 0
        """Children started so far (1 + restarts after timeouts and deaths)."""
        self._process: multiprocessing.process.BaseProcess | None = None
        self._conn: Connection | None = None

    def __enter__(self) -> ChildProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.is_alive()

    def _start(self) -> Connection:
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        process = ctx.Process(target=_serve, args=(child, self.factory), daemon=True,
                              name="partita-child")
        process.start()
        child.close()
        self._process, self._conn = process, parent
        self.starts += 1
        if not parent.poll(self.start_limit_s):
            self._stop()
            raise ChildFailed(f"the child process did not start within {self.start_limit_s:g} s")
        try:
            kind, detail = parent.recv()
        except EOFError:
            code = process.exitcode
            self._stop()
            raise ChildFailed(f"the child process died while starting (exit code {code})") \
                from None
        if kind != "ready":
            self._stop()
            raise ChildFailed(f"the child process could not start: {detail}")
        return parent

    def call(self, method: str, *args: Any, limit_s: float, **kwargs: Any) -> Any:
        """``obj.method(*args, **kwargs)`` in the child. :class:`ChildTimeout` where it does
        not answer within ``limit_s`` seconds (the child is stopped), :class:`ChildFailed`
        where the child dies; an exception the method raised is raised here."""
        conn = self._conn if self.alive and self._conn is not None else self._start()
        conn.send((method, args, kwargs))
        if not conn.poll(limit_s):
            self._stop()
            raise ChildTimeout(f"{method} did not answer within {limit_s:.3g} s; its process "
                               "was stopped")
        try:
            kind, value = conn.recv()
        except EOFError:
            code = self._process.exitcode if self._process is not None else None
            self._stop()
            raise ChildFailed(f"the child process died during {method} (exit code {code})") \
                from None
        if kind == "raised":
            raise value
        return value

    def _stop(self) -> None:
        if self._process is not None and self._process.is_alive():
            self._process.kill()
            self._process.join(10)
        if self._conn is not None:
            self._conn.close()
        self._process = self._conn = None

    def close(self) -> None:
        """Ask the child to end (it closes its object), then make sure it has."""
        if self.alive and self._conn is not None:
            try:
                self._conn.send(None)
                assert self._process is not None
                self._process.join(10)
            except (OSError, EOFError):
                pass
        self._stop()
