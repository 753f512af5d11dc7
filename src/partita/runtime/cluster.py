"""Compiling and timing candidates on a Dask cluster: :class:`ClusterEvaluator`.

A tune on a cluster proposes batches as on one machine; each program of a batch becomes two
Dask tasks. The compile task runs on any worker that declares the *compile resource* of the
machine being tuned and returns the bytes of the shared object (compilation uses
``-march=native`` and the compiler's version decides the instructions, so only a worker with
the same machine key may build for it). The measure task runs only on a worker that declares
the *measure resource* (one unit per host: a host runs one measuring worker, so timings never
overlap); it writes the bytes to its own disk and checks and times the program in a worker
process of its own (:class:`~partita.runtime.evaluate.Evaluator`), exactly as a local tune does.

Dask moves a task whose worker dies or is removed to another worker (a nanny restarts a killed
worker process with the same resources); a task that keeps losing its workers, or that no
measuring worker answers in time, is reported with status ``lost`` and a reason naming the
worker. Nothing is dropped: every program of a batch gets a measurement, or is left out only
when it could not start before the tune's deadline (as :meth:`Evaluator.evaluate
<partita.runtime.evaluate.Evaluator.evaluate>` does).
"""

from __future__ import annotations

import atexit
import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from partita.codegen.program import Program
from partita.config import host_name
from partita.runtime.compile import CompileError, Compiler, SharedObject, split_batches
from partita.runtime.data import Reference
from partita.runtime.evaluate import Evaluator, Measurement, timing_limit
from partita.runtime.harness import TimingOptions

MEASURE_PREFIX = "partita-measure-"
COMPILE_PREFIX = "partita-compile-"

BatchLimit = float | Callable[[Sequence[Measurement]], float] | None


def measure_resource(key: str) -> str:
    """The Dask resource a worker declares (one unit) to time programs for the machine of
    records key ``key``."""
    return MEASURE_PREFIX + key


def compile_resource(key: str) -> str:
    """The Dask resource a worker declares to build programs for the machine ``key``."""
    return COMPILE_PREFIX + key


def worker_resources(key: str, *, measure: bool, compile_slots: int = 1) -> dict[str, float]:
    """The resources of a partita worker on a machine of key ``key``: building with
    ``compile_slots`` threads, and timing with ``measure``."""
    resources: dict[str, float] = {}
    if compile_slots > 0:
        resources[compile_resource(key)] = float(compile_slots)
    if measure:
        resources[measure_resource(key)] = 1.0
    return resources


# -- what runs on the workers -------------------------------------------------------------------


@dataclass(frozen=True)
class BuiltChunk:
    """What a compile task sends back: the shared objects' bytes by cache key, and for each
    program in order, ``("so", key, flags, compiler)`` or ``("error", message, stderr)``."""

    blobs: dict[str, bytes]
    items: list[tuple[str, str, str, str]]


def compile_chunk(programs: list[Program], timeout_s: float) -> BuiltChunk:
    """Build ``programs`` (one gcc run where they compile together) on this worker."""
    blobs: dict[str, bytes] = {}
    items: list[tuple[str, str, str, str]] = []
    try:
        results = Compiler(timeout_s=timeout_s).build_all(programs)
    except Exception as e:  # e.g. the worker's cache directory is not writable
        message = f"compilation failed on {host_name()}: {type(e).__name__}: {e}"
        return BuiltChunk({}, [("error", message, "", "")] * len(programs))
    for built in results:
        if isinstance(built, CompileError):
            items.append(("error", str(built), built.stderr, ""))
        else:
            blobs.setdefault(built.key, built.path.read_bytes())
            items.append(("so", built.key, built.flags, built.compiler))
    return BuiltChunk(blobs, items)


_EVALUATORS: dict[tuple[int, TimingOptions], Evaluator] = {}
_EVALUATORS_LOCK = threading.Lock()


def close_evaluators() -> None:
    """Close this process's measuring evaluators (at exit: their worker processes)."""
    with _EVALUATORS_LOCK:
        for ev in _EVALUATORS.values():
            ev.close()
        _EVALUATORS.clear()


atexit.register(close_evaluators)


KEPT_EVALUATORS = 4
"""Evaluators a measuring worker keeps (tunes of other seeds or timing options, each with
its worker process and inputs); the least recently used goes first."""


def worker_evaluator(seed: int, timing: TimingOptions) -> Evaluator:
    """This worker process's evaluator for inputs of ``seed`` timed with ``timing``: kept
    from task to task, so that its worker process and inputs are made once."""
    with _EVALUATORS_LOCK:
        ev = _EVALUATORS.pop((seed, timing), None)
        if ev is None:
            ev = Evaluator(seed=seed, timing=timing)
        _EVALUATORS[(seed, timing)] = ev  # most recently used last
        while len(_EVALUATORS) > KEPT_EVALUATORS:
            _EVALUATORS.pop(next(iter(_EVALUATORS))).close()
        return ev


Describer = Callable[[], dict[str, Any]]
"""A module-level function that describes the machine it runs on (sent by reference)."""

_DESCRIPTIONS: dict[str, dict[str, Any]] = {}
_DESCRIPTIONS_LOCK = threading.Lock()


def worker_description(describe: Describer) -> dict[str, Any]:
    """This worker process's machine description by ``describe``: taken once per process
    (measuring a machine takes seconds, a program's timing far less), then reused."""
    name = f"{describe.__module__}.{describe.__qualname__}"
    with _DESCRIPTIONS_LOCK:
        if name not in _DESCRIPTIONS:
            try:
                _DESCRIPTIONS[name] = describe()
            except Exception as e:  # send what is known: that it could not be described
                _DESCRIPTIONS[name] = {"notes": [
                    f"describing the machine failed: {type(e).__name__}: {e}"]}
        return _DESCRIPTIONS[name]


def unpack(chunk: BuiltChunk, index: int, directory: Path, entry: str
           ) -> SharedObject | CompileError:
    """Program ``index`` of ``chunk`` as the evaluator takes it: its shared object written
    under ``directory`` (once per cache key), or its compile error."""
    kind, first, second, third = chunk.items[index]
    if kind == "error":
        return CompileError(first, second, entries=[entry])
    path = directory / f"{first}.so"
    if not path.exists():
        directory.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{threading.get_ident()}.part")
        partial.write_bytes(chunk.blobs[first])
        partial.replace(path)
    return SharedObject(path, (entry,), first, cached=True, flags=second, compiler=third)


def measure_program(chunk: BuiltChunk, index: int, program: Program, *, seed: int,
                    timing: TimingOptions, references: Mapping[str, Reference] | None,
                    timeout_s: float, abandon_s: float | None,
                    not_after: float | None, describe: Describer | None = None
                    ) -> dict[str, Any] | None:
    """Check and time program ``index`` of ``chunk`` on this (measuring) worker; None where
    it would start after ``not_after`` (a ``time.time()`` deadline). The result names the
    host (:func:`partita.config.host_name`) and worker, and carries the host's machine
    description by ``describe`` (taken once per worker process)."""
    if not_after is not None and time.time() >= not_after:
        return None
    host, worker = host_name(), _worker_address()
    try:
        ev = worker_evaluator(seed, timing)
        ev.references.update(references or {})
        built = unpack(chunk, index, ev.workdir / "so", program.entry)
        m = ev.evaluate_built(program, built, timeout_s, True, abandon_s)
    except Exception as e:  # the evaluator's worker could not start, the disk is full...
        m = Measurement("lost", f"failed on worker {worker} ({host}): {type(e).__name__}: {e}")
    description = worker_description(describe) if describe is not None else {}
    return {"measurement": m, "host": host, "worker": worker, "description": description}


def _worker_address() -> str:
    from distributed import get_worker
    try:
        return str(get_worker().address)
    except ValueError:  # called outside a worker (a test calling it directly)
        return ""


# -- the tuner's side ---------------------------------------------------------------------------


def connect(cluster: Any) -> tuple[Any, bool]:
    """(a Dask client of ``cluster``, whether it was made here and must be closed):
    ``cluster`` is a scheduler address, or a ``distributed.Client`` used as it is."""
    from distributed import Client
    if isinstance(cluster, Client):
        return cluster, False
    if not isinstance(cluster, str) or not cluster:
        raise ValueError(f"cluster: a scheduler address or a distributed.Client, got "
                         f"{cluster!r}")
    try:
        return Client(cluster, timeout="30s"), True
    except OSError as e:
        raise RuntimeError(f"cannot reach the Dask scheduler at {cluster}: {e}") from e


def lost_reason(exc: BaseException) -> str:
    """Why a task's result never came, naming the worker it was lost with where Dask says."""
    from distributed import KilledWorker
    if isinstance(exc, KilledWorker):
        last = getattr(exc, "last_worker", None)
        name = getattr(last, "address", None) or str(last or "unknown")
        return (f"lost with worker {name}: every worker that ran it died "
                f"(allowed failures: {getattr(exc, 'allowed_failures', '?')})")
    return f"failed on the cluster: {type(exc).__name__}: {exc}"


WORKER_RETURN_S = 20.0
"""How long opening a cluster evaluator waits for a worker of this machine to (re)join: a
nanny restarts a worker killed in a task within seconds, and a ``--continue`` right after
the loss found none yet."""


class ClusterEvaluator:
    """Evaluates programs on a Dask cluster: compiled on workers that build for the machine
    of records key ``key``, checked and timed on its measuring worker.

    Like :class:`~partita.runtime.evaluate.Evaluator` it has :meth:`prepare` (compile ahead)
    and :meth:`evaluate`; :attr:`measured_on` says, by program digest, which host timed each
    program measured, and :attr:`descriptions` the machine description each measuring host
    sent (by ``describe``, run on the workers). ``cluster`` is a scheduler address or a
    ``distributed.Client``.
    """

    def __init__(self, cluster: Any, *, key: str, seed: int, timing: TimingOptions,
                 references: Mapping[str, Reference] | None, compile_timeout_s: float,
                 setup_timeout_s: float = 300.0, batch_size: int = 16,
                 program_limit_s: float | None = None,
                 describe: Describer | None = None) -> None:
        self.key, self.seed, self.timing = key, seed, timing
        self.references = dict(references or {})
        self.compile_timeout_s = compile_timeout_s
        self.setup_timeout_s = setup_timeout_s
        self.batch_size = batch_size
        self.program_limit_s = program_limit_s
        self.compiler = Compiler(timeout_s=compile_timeout_s)
        """The flags and compiler the workers build with (the records keep them)."""
        self.describe = describe
        self.measured_on: dict[str, str] = {}
        self.descriptions: dict[str, dict[str, Any]] = {}
        """The latest machine description each measuring host sent, by host name."""
        self.measuring_hosts: set[str] = set()
        """The host names of the measuring workers found at the start."""
        self.client, self._owned = connect(cluster)
        self._pending: dict[tuple[str, str], tuple[Any, int]] = {}
        try:
            self.check_workers()
        except BaseException:
            self.close()
            raise

    def check_workers(self) -> None:
        """Raise where no worker of the cluster can build or time for this machine: the
        tasks would wait for one forever. A worker that a nanny is restarting (after it died
        in a task) counts: the check waits up to :data:`WORKER_RETURN_S` for one."""
        wanted = ((measure_resource(self.key), " --measure"), (compile_resource(self.key), ""))
        deadline = time.monotonic() + WORKER_RETURN_S
        while True:
            workers = self.client.scheduler_info(n_workers=-1)["workers"]
            declared = [set(w.get("resources") or {}) for w in workers.values()]
            missing = [(r, flag) for r, flag in wanted if not any(r in d for d in declared)]
            if not missing or time.monotonic() >= deadline:
                break
            time.sleep(0.25)
        if missing:
            resource, flag = missing[0]
            raise RuntimeError(
                f"no worker of the cluster declares the resource {resource} (this "
                f"machine's): start one here with `partita worker "
                f"{self.client.scheduler.address}{flag}`")
        measuring = [a for a, w in workers.items()
                     if measure_resource(self.key) in (w.get("resources") or {})]
        with contextlib.suppress(Exception):  # a worker gone meanwhile: its host is unknown
            self.measuring_hosts = {str(h) for h in self.client.run(
                host_name, workers=measuring, on_error="ignore").values()
                if isinstance(h, str)}

    def __enter__(self) -> ClusterEvaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Cancel the compilations still pending and let go of the client (closed only
        where it was made here)."""
        futures = [f for f, _ in self._pending.values()]
        self._pending.clear()
        if futures:
            with contextlib.suppress(Exception):
                self.client.cancel(futures)
        if self._owned:
            self._owned = False
            self.client.close()

    def prepare(self, programs: Sequence[Program]) -> None:
        """Start compiling ``programs`` on the cluster (batches of ``batch_size``)."""
        todo = [p for p in programs if (p.entry, p.source) not in self._pending]
        for chunk in split_batches(todo, self.batch_size):
            future = self.client.submit(
                compile_chunk, chunk, self.compile_timeout_s, pure=False,
                resources={compile_resource(self.key): 1})
            for i, p in enumerate(chunk):
                self._pending.setdefault((p.entry, p.source), (future, i))

    def limit_s(self, timeout_s: float) -> float:
        """The longest one program may take on the cluster, compiled, loaded, checked and
        timed (``program_limit_s`` where given); past it (times the programs of its batch)
        its worker is taken as hung."""
        if self.program_limit_s is not None:
            return self.program_limit_s
        return (self.compile_timeout_s + 2 * self.setup_timeout_s
                + timing_limit(self.timing, timeout_s))

    def evaluate(self, programs: Sequence[Program], *, timeout_s: BatchLimit = None,
                 abandon_s: BatchLimit = None, until: float | None = None
                 ) -> list[Measurement]:
        """A :class:`Measurement` per program, in order (status ``lost`` where the cluster
        lost it); with ``until`` (a ``time.monotonic()`` deadline), only for the programs
        started before it. The limits are taken as the batch starts (a callable is called
        with no measurements)."""
        limit = (timeout_s([]) if callable(timeout_s) else timeout_s) or 10.0
        abandon = abandon_s([]) if callable(abandon_s) else abandon_s
        not_after = None if until is None else time.time() + (until - time.monotonic())
        self.prepare(programs)
        futures = []
        for p in programs:
            chunk, index = self._pending[(p.entry, p.source)]
            futures.append(self.client.submit(
                measure_program, chunk, index, p, seed=self.seed, timing=self.timing,
                references=self.references, timeout_s=limit, abandon_s=abandon,
                not_after=not_after, describe=self.describe, pure=False,
                resources={measure_resource(self.key): 1}))
        for p in programs:  # the measure tasks hold their compile tasks from here on
            self._pending.pop((p.entry, p.source), None)
        deadline = time.monotonic() + len(programs) * self.limit_s(limit)
        outcomes = self.collect(futures, deadline)
        results: list[Measurement] = []
        for p, outcome in zip(programs, outcomes, strict=True):
            if outcome is None:  # not started before the tune's deadline: nor those after
                break
            if isinstance(outcome, Measurement):
                results.append(outcome)
                continue
            results.append(outcome["measurement"])
            self.measured_on[p.digest] = host = str(outcome["host"])
            if outcome.get("description") or host not in self.descriptions:
                self.descriptions[host] = dict(outcome.get("description") or {})
        return results

    def collect(self, futures: list[Any], deadline: float) -> list[Any]:
        """What each measure task returned, as they finish: its result, None (not started)
        or a ``lost`` :class:`Measurement` naming the worker."""
        from distributed import wait
        outcomes: list[Any] = [None] * len(futures)
        where = {f.key: i for i, f in enumerate(futures)}
        pending = set(futures)
        while pending:
            left = deadline - time.monotonic()
            done: set[Any] = set()
            if left > 0:
                with contextlib.suppress(TimeoutError):
                    done, pending = wait(list(pending), timeout=left,
                                         return_when="FIRST_COMPLETED")
            if not done:
                self.give_up(pending, where, outcomes)
                break
            for f in done:
                outcomes[where[f.key]] = self.outcome(f)
        return outcomes

    def outcome(self, future: Any) -> Any:
        """A finished measure task's result, or the ``lost`` measurement of a failed one."""
        if future.status == "finished":
            return future.result()
        if future.status == "cancelled":
            return Measurement("lost", "cancelled on the cluster (a worker or the scheduler "
                                       "restarted)")
        return Measurement("lost", lost_reason(future.exception()))

    def give_up(self, pending: set[Any], where: dict[Any, int], outcomes: list[Any]) -> None:
        """Mark the tasks still pending at the deadline lost, naming the worker running
        each, and cancel them."""
        running: dict[Any, str] = {}
        with contextlib.suppress(Exception):
            for worker, keys in self.client.processing().items():
                running.update((k, worker) for k in keys)
        for f in pending:
            worker = running.get(f.key)
            who = f"worker {worker}" if worker else "any measuring worker"
            outcomes[where[f.key]] = Measurement(
                "lost", f"no answer in time from {who} (hung, or none left)")
        with contextlib.suppress(Exception):
            self.client.cancel(list(pending))


# -- starting workers ---------------------------------------------------------------------------


def worker_spec(key: str, *, measure: bool, compile_slots: int, host: str,
                env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A ``SpecCluster`` worker: a nanny (it restarts the worker process if it dies) with one
    thread and partita's resources, its process given the environment variables ``env``
    (e.g. ``PARTITA_HOST``). No memory limit of Dask's: the evaluator's worker process has
    its own."""
    from distributed import Nanny
    return {"cls": Nanny, "options": {
        "nthreads": 1, "host": host, "memory_limit": 0, "env": dict(env or {}),
        "resources": worker_resources(key, measure=measure, compile_slots=compile_slots)}}


def local_cluster(key: str, workers: int = 2, *, host: str = "127.0.0.1") -> Any:
    """A scheduler and ``workers`` worker processes on this machine (of records key
    ``key``): one measuring worker and ``workers - 1`` that compile (alone, the measuring
    worker compiles too). Close it (or use it as a context manager) to stop them."""
    from distributed import Scheduler, SpecCluster
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    specs = {"measure": worker_spec(key, measure=True, compile_slots=int(workers == 1),
                                    host=host)}
    specs.update((f"compile-{i}", worker_spec(key, measure=False, compile_slots=1, host=host))
                 for i in range(1, workers))
    return SpecCluster(workers=specs, silence_logs=False, scheduler={
        "cls": Scheduler, "options": {"host": host, "dashboard": False,
                                      "dashboard_address": ":0"}})


def run_worker(scheduler: str, key: str, *, measure: bool, nthreads: int = 1,
               host: str | None = None) -> None:
    """Run a partita worker (under a nanny) for the scheduler at ``scheduler`` until it is
    stopped: it builds for this machine (of records key ``key``) on ``nthreads`` threads,
    and with ``measure`` also times programs for it, one at a time."""
    import asyncio

    from distributed import Nanny

    async def serve() -> None:
        async with Nanny(scheduler, nthreads=nthreads, memory_limit=0, host=host,
                         resources=worker_resources(key, measure=measure,
                                                    compile_slots=nthreads)) as nanny:
            await nanny.finished()

    asyncio.run(serve())
