"""A real Dask cluster for tests: a LocalCluster of worker processes on this machine (one
measuring, one compiling) and what tests ask of it. Tests that use it skip where
``distributed`` is not installed (``pytest.importorskip`` in the test module)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import partita
from partita.db import Records
from partita.runtime.cluster import local_cluster, measure_resource, worker_spec
from partita.tuning.tuned import host_machine, kernel_params

KEY = host_machine()["key"]


@contextmanager
def cluster(allowed_failures: int | None = None) -> Iterator[Any]:
    """A client of a fresh LocalCluster (a measuring and a compiling worker process), or a
    skip saying why one could not start."""
    import dask
    import distributed
    options = {} if allowed_failures is None else {
        "distributed.scheduler.allowed-failures": allowed_failures}
    try:
        with dask.config.set(options):
            cl = local_cluster(KEY, 2)
    except Exception as e:  # no sockets, no processes: nothing of partita's to test
        pytest.skip(f"a Dask LocalCluster could not start here: {type(e).__name__}: {e}")
    with cl, distributed.Client(cl) as client:
        yield client


def worker(*, measure: bool = True, compile_slots: int = 1, host_name: str | None = None
           ) -> dict[str, Any]:
    """The spec of a worker process of this machine, measuring or not, whose host is named
    ``host_name`` (``PARTITA_HOST``; None: the system's name)."""
    env = {"PARTITA_HOST": host_name} if host_name else None
    return worker_spec(KEY, measure=measure, compile_slots=compile_slots, host="127.0.0.1",
                       env=env)


@contextmanager
def cluster_of(workers: dict[str, dict[str, Any]]) -> Iterator[Any]:
    """A client of a fresh cluster of the ``workers`` specs by name (:func:`worker`), every
    one started, or a skip saying why it could not start."""
    import distributed
    try:
        cl = distributed.SpecCluster(
            workers=workers, silence_logs=False,
            scheduler={"cls": distributed.Scheduler, "options": {
                "host": "127.0.0.1", "dashboard": False, "dashboard_address": ":0"}})
    except Exception as e:  # no sockets, no processes: nothing of partita's to test
        pytest.skip(f"a Dask cluster could not start here: {type(e).__name__}: {e}")
    with cl, distributed.Client(cl) as client:
        client.wait_for_workers(len(workers), timeout=120)
        yield client


def addresses(client: Any) -> dict[str, str]:
    """The address of each worker of ``client``'s cluster, by its spec's name."""
    return {str(info["name"]): address for address, info in
            client.scheduler_info(n_workers=-1)["workers"].items()}


def measuring_worker(client: Any) -> tuple[str, int]:
    """(address, process id) of the worker that declares this machine's measure resource."""
    for address, info in client.scheduler_info(n_workers=-1)["workers"].items():
        if measure_resource(KEY) in (info.get("resources") or {}):
            return address, client.run(os.getpid, workers=[address])[address]
    raise AssertionError("the cluster has no measuring worker")


def recorded(db: Path, k: partita.Kernel) -> list[Any]:
    """The evaluations recorded in ``db`` for kernel ``k``, oldest first."""
    with Records(db) as rec:
        return rec.evaluations(rec.kernel_id(k, kernel_params(k)))
