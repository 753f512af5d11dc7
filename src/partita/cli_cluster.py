"""``partita cluster`` and ``partita worker``: Dask workers that compile and time for tunes.

A tune with ``--cluster ADDRESS`` compiles its candidates on workers that declare the compile
resource of the machine being tuned and times them on the one worker that declares its measure
resource (:mod:`partita.runtime.cluster`); both resources are keyed by the machine's records
fingerprint, so these commands compute them on the machine they run on.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading

import click

from partita.runtime.cluster import compile_resource, local_cluster, measure_resource, run_worker
from partita.tuning.tuned import host_machine


@click.command("cluster")
@click.option("--workers", type=click.IntRange(1), default=2, show_default=True,
              help="Worker processes: one measures (times), the others compile.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="The interface the scheduler and workers listen on.")
def cluster_cmd(workers: int, host: str) -> None:
    """Start a Dask scheduler and partita workers on this machine, print the scheduler's
    address, and serve until interrupted (Ctrl-C): `partita tune ... --cluster ADDRESS`."""
    key = host_machine()["key"]
    with local_cluster(key, workers, host=host) as cluster:
        click.echo(cluster.scheduler_address)
        compiling = f"{workers - 1} compiling" if workers > 1 else "it compiles too"
        click.echo(f"  {workers} workers: 1 measuring ({measure_resource(key)}), {compiling} "
                   f"({compile_resource(key)})", err=True)
        # SIGTERM (a service manager, kill) stops the workers as Ctrl-C does.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            click.echo("stopping the cluster", err=True)


@click.command("worker")
@click.argument("scheduler")
@click.option("--measure", is_flag=True,
              help="Also time programs for this machine (run one such worker per host: "
                   "timings need the machine alone).")
@click.option("--nthreads", type=click.IntRange(1), default=1, show_default=True,
              help="Programs compiled at once.")
@click.option("--host", default=None, help="The interface the worker listens on.")
def worker_cmd(scheduler: str, measure: bool, nthreads: int, host: str | None) -> None:
    """Run a worker for the Dask scheduler at SCHEDULER that compiles programs for this
    machine (and with --measure times them), until interrupted."""
    key = host_machine()["key"]
    click.echo(f"partita worker for {scheduler}: {compile_resource(key)}"
               + (f", {measure_resource(key)}" if measure else ""), err=True)
    with contextlib.suppress(KeyboardInterrupt):
        run_worker(scheduler, key, measure=measure, nthreads=nthreads, host=host)
