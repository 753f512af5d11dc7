"""Every environment variable partita reads, each behind one small function.

Algorithms never read the environment themselves: they take these values as arguments or ask
this module, so what a run depends on outside its arguments is listed here and nowhere else.

=======================  =======================================================================
``PARTITA_DB``           the tuning records database, a file or a PostgreSQL URL
                         (:func:`records_file`, :func:`records_location`)
``PARTITA_CACHE``        partita's cache directory (:func:`cache_dir`)
``XDG_CACHE_HOME``       the user's cache directory, where the records live by default
                         (:func:`xdg_cache_home`)
``PARTITA_NATIVE``       ``0`` keeps decision spaces on the Python engine (:func:`native_engine`)
``PARTITA_NATIVE_CALL``  ``0`` checks a tuned kernel's arguments in Python, not in C
                         (:func:`native_call`)
``PARTITA_GPU_ISOLATE``  ``0`` runs GPU launches in the tuning process, not a child that can be
                         stopped (:func:`gpu_isolate`)
``CC``                   the C compiler of the native constraint engine and of the calls'
                         checks (:func:`c_compiler`)
``CUDA_HOME``,           CUDA installations searched for nvcc (:func:`cuda_roots`)
``CUDA_PATH``
``PARTITA_HOST``         the name a cluster worker gives its host in the records
                         (:func:`host_name`, default the system's host name)
=======================  =======================================================================

Child processes (the timing worker, the CPU micro-benchmarks) inherit the whole environment
(:func:`child_environment`).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

RECORDS_VARIABLE = "PARTITA_DB"
"""The variable that names the records database (error messages name it)."""


def records_file() -> Path | None:
    """``$PARTITA_DB`` (``~`` expanded), or None where it is unset or blank."""
    value = os.environ.get(RECORDS_VARIABLE, "").strip()
    return Path(value).expanduser() if value else None


def records_location() -> str:
    """``$PARTITA_DB`` as written (blank where unset): a file path or a PostgreSQL URL."""
    return os.environ.get(RECORDS_VARIABLE, "").strip()


def xdg_cache_home() -> Path | None:
    """``$XDG_CACHE_HOME``, or None where it is unset, blank or relative (the XDG Base
    Directory specification says a relative value is invalid and must be ignored)."""
    value = os.environ.get("XDG_CACHE_HOME", "").strip()
    return Path(value) if value and Path(value).is_absolute() else None


def cache_dir() -> Path | None:
    """``$PARTITA_CACHE``, or None where it is unset or empty."""
    value = os.environ.get("PARTITA_CACHE")
    return Path(value) if value else None


def native_engine() -> bool:
    """False where ``PARTITA_NATIVE=0``: every space then runs on the Python engine."""
    return os.environ.get("PARTITA_NATIVE", "1") != "0"


def native_call() -> bool:
    """False where ``PARTITA_NATIVE_CALL=0``: a tuned kernel's arguments are then checked by
    its Python fast path rather than in C (:mod:`partita.runtime.native_call`)."""
    return os.environ.get("PARTITA_NATIVE_CALL", "1") != "0"


def gpu_isolate() -> bool:
    """``PARTITA_GPU_ISOLATE=0`` runs the gpu target's launches in the tuning process, not in
    a child process that can be stopped when a launch never ends."""
    return os.environ.get("PARTITA_GPU_ISOLATE", "1") != "0"


def c_compiler() -> str:
    """``$CC``, else ``gcc``: the compiler that builds the native constraint engine."""
    return os.environ.get("CC", "gcc")


def cuda_roots() -> list[str]:
    """``$CUDA_HOME`` and ``$CUDA_PATH`` (empty strings where unset), in that order."""
    return [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", "")]


HOST_VARIABLE = "PARTITA_HOST"
"""The variable that names this host in the records of a tune on a cluster."""


def host_name() -> str:
    """``$PARTITA_HOST``, else the system's host name: the name under which a measuring
    worker's timings and machine description are recorded (two workers on one machine may
    be given two names, as a test of several hosts does)."""
    return os.environ.get(HOST_VARIABLE, "").strip() or socket.gethostname()


def child_environment(**overrides: str) -> dict[str, str]:
    """A copy of this process's environment for a child process, with ``overrides``."""
    return {**os.environ, **overrides}
