"""A real PostgreSQL server for the records' tests: one per test session (per xdist worker),
in a temporary folder, stopped at the end. Each test gets a database of its own on it."""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest


def _bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgServer:
    """A postgres cluster in ``folder``, listening on 127.0.0.1:``port``, run as ``user``
    (initdb refuses to run as root)."""

    def __init__(self, bin_dir: Path, folder: Path, user: str) -> None:
        self.bin_dir, self.folder, self.user = bin_dir, folder, user
        self.data = folder / "data"
        self.port = _free_port()
        self._names = itertools.count()

    def _run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        command = [str(self.bin_dir / args[0]), *args[1:]]
        if os.geteuid() == 0:
            command = ["runuser", "-u", self.user, "--", *command]
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              check=False)

    def init(self) -> None:
        done = self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust",
                         "--no-sync", "-E", "UTF8", "--no-locale")
        if done.returncode:
            raise RuntimeError(f"initdb failed: {done.stderr.strip()}")

    def start(self) -> None:
        options = (f"-h 127.0.0.1 -p {self.port} -k {self.folder} -c fsync=off "
                   f"-c max_connections=60")
        done = self._run("pg_ctl", "-D", str(self.data), "-l", str(self.folder / "log"),
                         "-o", options, "-w", "-t", "30", "start")
        if done.returncode:
            log = (self.folder / "log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"postgres did not start: {done.stderr.strip()} {log}")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def restart(self) -> None:
        """Stop (ending every connection) and start again on the same port."""
        self.stop()
        self.start()

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def new_database(self) -> str:
        """The URL of a new, empty database."""
        name = f"records_{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    bin_dir = _bin_dir()
    if bin_dir is None:
        pytest.skip("PostgreSQL's initdb is not installed (make system installs it)")
    user = "postgres" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(user)
        except KeyError:
            pytest.skip("running as root and there is no 'postgres' user to run the server")
    folder = Path(tempfile.mkdtemp(prefix="partita-pg-"))
    if os.geteuid() == 0:
        shutil.chown(folder, user)
    server = PgServer(bin_dir, folder, user)
    try:
        server.init()
        server.start()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        shutil.rmtree(folder, ignore_errors=True)
        pytest.skip(f"cannot start a PostgreSQL server: {exc}")
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server: PgServer) -> str:
    """A fresh, empty records database on the session's server."""
    return pg_server.new_database()


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll ``predicate`` (a callable) until true; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
