"""Compile, check and time candidate programs: :class:`Evaluator` and :class:`Measurement`.

The parent process (the tuner) never runs candidate code. It compiles programs in batches on a
background thread, so gcc works on the next batch while the current one is being measured, and
hands each compiled program to a worker process (:mod:`partita.runtime.worker`) that checks and
times it. Measurements are serialised: one kernel runs at a time, so candidates do not compete
for cores or memory bandwidth with each other, and background gcc processes are stopped while a
kernel is being timed (they still run while inputs load, outputs are checked and workers
restart).

Failures map to statuses:

==================  ===============================================================
``ok``              outputs within tolerance, timed
``compile_error``   gcc failed (``reason``: first error line, ``detail``: all of it)
``crash``           the worker died from a signal or exited (``reason``: the signal)
``timeout``         no answer within the time limit; the worker is killed
``wrong``           an output off by more than its tolerance, NaN, or an input modified
``out_of_bounds``   a write outside an array's buffer (or into the gaps of a strided view)
``oom``             an allocation failed, or the worker was killed by the OOM killer
``lost``            on a cluster only: the Dask workers that ran it died, or none answered
                    in time (``reason`` names the worker; :mod:`partita.runtime.cluster`)
==================  ===============================================================

After a crash, timeout or out-of-memory kill the next evaluation starts a fresh worker.

A timing taken while some core ran slowed (another process, or the host, sharing it unseen) is
taken again; a :class:`Measurement` says how slowed its kept timing still was (``slowdown``,
``slowed``), from the harness's speed probe.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from partita import config
from partita.codegen.program import Program
from partita.runtime.buffers import CANARY_BYTES, ArraySpec
from partita.runtime.compile import CompileError, Compiler, SharedObject, split_batches
from partita.runtime.data import Case, Reference, case_key, make_case, settle_blas
from partita.runtime.harness import ALLOC_FAILED_MARK, TimingOptions, summarize
from partita.runtime.protocol import Reader, write_message

STATUSES = ("ok", "compile_error", "crash", "timeout", "wrong", "out_of_bounds", "oom", "lost")

OOM_MARKS = (ALLOC_FAILED_MARK, "MemoryError", "Out of memory", "out of memory",
             "Cannot allocate memory", "Thread creation failed", "std::bad_alloc")
"""Lines on the worker's stderr that mean the worker died for lack of memory."""

DEFAULT_ENV = {"OMP_STACKSIZE": "64M", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
"""Worker environment defaults: large OpenMP stacks for kernels with big private arrays, and a
single-threaded numpy BLAS (the worker's numpy only copies and compares)."""


def default_memory_limit() -> int | None:
    """80% of physical memory: large enough for any kernel the machine can run, small enough
    that a runaway kernel fails in its worker before the system's OOM killer steps in."""
    try:
        return int(0.8 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError):
        return None


class Checked(Protocol):
    """What sampling reads of the result of running one program: its status (``ok`` when
    it ran and computed the reference's outputs), why it failed, and its median time where
    the runner timed it (None: checked only, as OpenCL on the CPU checks GPU code)."""

    @property
    def status(self) -> str: ...
    @property
    def reason(self) -> str: ...
    @property
    def median_s(self) -> float | None: ...


class Outcome(Checked, Protocol):
    """What a search reads of the result of running one program: every runner's
    :class:`Measurement` (the CPU evaluator's, the CUDA runner's), or the result of a
    caller's own runner with these fields. ``slowdown`` and ``slowed`` say how slowed the
    machine was while it timed the program (None and False: not judged)."""

    @property
    def min_s(self) -> float | None: ...
    @property
    def spread(self) -> float | None: ...
    @property
    def reps(self) -> int: ...
    @property
    def slowdown(self) -> float | None: ...
    @property
    def slowed(self) -> bool: ...


@dataclass
class Measurement:
    """The outcome of evaluating one program.

    Times are in seconds; ``spread`` is ``(p90 - p10) / median`` of the repetition times.
    ``max_error`` is the largest absolute difference from the reference. ``flags`` and
    ``compiler`` record exactly how the program was built.
    """

    status: str
    reason: str = ""
    median_s: float | None = None
    min_s: float | None = None
    spread: float | None = None
    reps: int = 0
    times: list[float] = field(default_factory=list)
    max_error: float | None = None
    flags: str = ""
    compiler: str = ""
    entry: str = ""
    warmups: int = 0
    threads: int = 0
    stop: str = ""
    """Why timing stopped: ``stable`` median, ``max_reps`` reached, ``budget`` spent, or
    ``abandoned`` (slower than the caller's threshold)."""
    detail: str = ""
    slowdown: float | None = None
    """How slowed the machine was while the kept timing ran: the speed probe against the
    fastest seen, or the time a thread waited for a CPU (1.0: not slowed; None: no verdict,
    see :func:`~partita.runtime.harness.measure_probed`). Above the timing options'
    ``slow_limit``, every retime was slowed too and the times are likely high."""
    retimed: int = 0
    """Timings taken again because the probe found the machine slowed."""
    slowed: bool = False
    """The kept timing was slowed beyond the timing options' ``slow_limit``."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict (non-finite numbers become None)."""
        def clean(x: Any) -> Any:
            if isinstance(x, float) and not math.isfinite(x):
                return None
            if isinstance(x, list):
                return [clean(v) for v in x]
            return x
        return {k: clean(v) for k, v in asdict(self).items()}


class WorkerProcess:
    """One ``python -m partita.runtime.worker`` process and its pipes.

    Its stderr goes to ``log``, which the parent reads to explain a death (an assertion
    message, the allocation-failure line of the harness).
    """

    def __init__(self, env: Mapping[str, str], memory_limit: int | None, log: Path,
                 start_timeout_s: float = 120.0) -> None:
        self.log = log
        self.killed = False
        cmd = [sys.executable, "-m", "partita.runtime.worker",
               "--memory", str(memory_limit or 0)]
        self._log_file = open(log, "ab")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._log_file, env=dict(env),
                                     start_new_session=True, close_fds=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.reader = Reader(self.proc.stdout.fileno())
        try:
            hello = self.reader.read(time.monotonic() + start_timeout_s)
        except (EOFError, TimeoutError) as e:
            self.kill()
            raise RuntimeError(f"the worker did not start: {self.stderr_tail(0)}") from e
        self.pid = int(hello["pid"])

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_size(self) -> int:
        try:
            return self.log.stat().st_size
        except OSError:
            return 0

    def stderr_tail(self, since: int, limit: int = 8192) -> str:
        """What the worker wrote to stderr after offset ``since`` (its last ``limit`` bytes)."""
        try:
            with open(self.log, "rb") as f:
                size = f.seek(0, os.SEEK_END)
                f.seek(max(since, size - limit))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def send(self, message: Any) -> None:
        assert self.proc.stdin is not None
        write_message(self.proc.stdin.fileno(), message)

    def read(self, deadline: float) -> Any:
        return self.reader.read(deadline)

    def wait(self, timeout: float = 10.0) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.proc.wait()

    def kill(self) -> None:
        """SIGKILL the worker's whole process group (it may have forked) and reap it."""
        self.killed = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._close_pipes()

    def stop(self) -> None:
        """Ask the worker to exit, and kill it if it does not."""
        if self.alive:
            try:
                self.send({"op": "exit"})
                self.proc.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                self.kill()
        self._close_pipes()

    def _close_pipes(self) -> None:
        for f in (self.proc.stdin, self.proc.stdout, self._log_file):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass


def timing_limit(t: TimingOptions, timeout_s: float) -> float:
    """How long the timing phase of one program may take with calls limited to
    ``timeout_s``: every retime of a slowed timing included, plus slack."""
    attempts = 1 + (max(0, t.retime_slowed) if t.probe_iters > 0 else 0)
    once = (t.warmups + 2) * timeout_s + t.warmup_s + t.budget_s
    return attempts * once + (attempts - 1) * t.retime_pause_s + 30.0


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


class Evaluator:
    """Evaluates programs: compile (batched, in the background), check, time.

    Use as a context manager; it owns a worker process, a compile thread and a temporary
    directory for shared inputs. Parameters:

    - ``seed``: inputs are drawn from ``numpy.random.default_rng(seed)``;
    - ``timeout_s``: the limit on one kernel call (overridable per :meth:`evaluate`); the
      timing phase may take ``(warmups + 2) * timeout_s + warmup_s + budget_s`` plus slack;
    - ``setup_timeout_s``: the limit on loading inputs and checking outputs;
    - ``timing``: the harness's :class:`TimingOptions`;
    - ``memory_limit``: ``RLIMIT_AS`` of the worker in bytes (default 80% of physical memory;
      None for no limit);
    - ``env``: extra environment variables for the worker (``OMP_NUM_THREADS``,
      ``OMP_PROC_BIND``, ``OMP_PLACES``...); the worker otherwise inherits this process's
      environment, with ``OMP_STACKSIZE=64M`` unless set;
    - ``batch_size``: programs per gcc run; ``overlap``: compile ahead in the background;
      ``quiet_timing``: stop background gcc processes (SIGSTOP) while a kernel is being timed,
      so compilation overlaps loading, checking and restarts but never takes cores from a
      timed call;
    - ``references``: numpy references by kernel name, for kernels outside the library.
    """

    def __init__(self, *, seed: int = 0, timeout_s: float = 10.0,
                 setup_timeout_s: float = 300.0, timing: TimingOptions | None = None,
                 compiler: Compiler | None = None, batch_size: int = 16,
                 memory_limit: int | Literal["auto"] | None = "auto",
                 env: Mapping[str, str] | None = None,
                 overlap: bool = True, quiet_timing: bool = True,
                 canary_bytes: int = CANARY_BYTES, alignment: int = 64,
                 references: Mapping[str, Reference] | None = None,
                 workdir: Path | None = None) -> None:
        self.seed = seed
        self.timeout_s = timeout_s
        self.setup_timeout_s = setup_timeout_s
        self.timing = timing or TimingOptions()
        self.compiler = compiler or Compiler()
        self.batch_size = batch_size
        self.memory_limit = default_memory_limit() if memory_limit == "auto" else memory_limit
        self.overlap = overlap
        self.quiet_timing = quiet_timing
        self.canary_bytes = canary_bytes
        self.alignment = alignment
        self.references = dict(references or {})
        self.workdir = Path(tempfile.mkdtemp(prefix="partita-eval-", dir=workdir))
        self.env = self._worker_env(env)
        self.restarts = 0
        """Workers started after the first (each crash, timeout or OOM kill costs one)."""
        self.probe_reference_s: float | None = None
        """The fastest run of the harness's speed probe so far (see
        :func:`~partita.runtime.harness.measure_probed`)."""
        self._started = 0
        self._worker: WorkerProcess | None = None
        self._cases: dict[Any, Case] = {}
        self._pending: dict[tuple[str, str], tuple[Future, int]] = {}
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="partita-cc")
        self._lock = threading.Lock()

    # -- lifecycle ----------------------------------------------------------------------------

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker and the compile thread (killing a compilation in progress), and
        remove the temporary directory."""
        self.compiler.stop()
        self._executor.shutdown(wait=True, cancel_futures=True)
        self.compiler.restart()
        if self._worker is not None:
            self._worker.stop()
            self._worker = None
        shutil.rmtree(self.workdir, ignore_errors=True)

    @staticmethod
    def _worker_env(extra: Mapping[str, str] | None) -> dict[str, str]:
        env = config.child_environment()
        src = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(
            [src, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
        for key, value in DEFAULT_ENV.items():
            env.setdefault(key, value)
        env.update(extra or {})
        return env

    @property
    def worker_pid(self) -> int | None:
        return self._worker.pid if self._worker is not None and self._worker.alive else None

    def _ensure_worker(self) -> WorkerProcess:
        if self._worker is not None and not self._worker.alive:
            self._worker.stop()
            self._worker = None
        if self._worker is None:
            log = self.workdir / f"worker-{self._started}.log"
            self._worker = WorkerProcess(self.env, self.memory_limit, log)
            if self._started:
                self.restarts += 1
            self._started += 1
        return self._worker

    # -- compilation --------------------------------------------------------------------------

    def prepare(self, programs: Sequence[Program]) -> None:
        """Start compiling ``programs`` in the background (batches of ``batch_size``), so
        that a later :meth:`evaluate` of them finds them built."""
        todo = [p for p in programs if (p.entry, p.source) not in self._pending]
        for batch in split_batches(todo, self.batch_size):
            future = self._executor.submit(self.compiler.build_all, batch)
            for i, p in enumerate(batch):
                self._pending.setdefault((p.entry, p.source), (future, i))

    def _compiled(self, program: Program) -> SharedObject | CompileError:
        key = (program.entry, program.source)
        if key not in self._pending:
            self.prepare([program])
        future, index = self._pending[key]
        try:
            return future.result()[index]
        except Exception as e:  # e.g. the cache directory is not writable
            return CompileError(f"compilation failed: {type(e).__name__}: {e}",
                                entries=[program.entry])

    # -- evaluation ---------------------------------------------------------------------------

    def evaluate(self, programs: Sequence[Program], *,
                 timeout_s: float | Callable[[Sequence[Measurement]], float] | None = None,
                 time_it: bool = True,
                 abandon_s: float | Callable[[Sequence[Measurement]], float] | None = None,
                 until: float | None = None) -> list[Measurement]:
        """A :class:`Measurement` per program, in order; with ``until`` (a
        ``time.monotonic()`` deadline), only for the programs started before it.

        ``timeout_s`` overrides the per-call limit: a number, or a function of the
        measurements of the batch so far (a tuner allows a multiple of the best time, which a
        program earlier in the batch may just have lowered); ``time_it=False`` only checks
        the outputs. ``abandon_s`` (a number or such a function) stops timing a program as
        soon as its fastest call is slower (:class:`TimingOptions`), recorded as stop
        ``abandoned``: its time is then that of one or a few calls.
        """
        with self._lock:
            if self.overlap:
                self.prepare(programs)
            results: list[Measurement] = []
            try:
                for i, p in enumerate(programs):
                    if until is not None and time.monotonic() >= until:
                        break
                    if not self.overlap and (p.entry, p.source) not in self._pending:
                        # One batch at a time: nothing compiles while a kernel is timed.
                        self.prepare(programs[i:i + self.batch_size])
                    limit = timeout_s(results) if callable(timeout_s) else timeout_s
                    abandon = abandon_s(results) if callable(abandon_s) else abandon_s
                    results.append(self._evaluate_one(p, limit or self.timeout_s, time_it,
                                                      abandon))
            finally:
                for p in programs:
                    self._pending.pop((p.entry, p.source), None)
            return results

    def _case(self, program: Program) -> Case:
        key = case_key(program, self.seed)
        case = self._cases.get(key)
        if case is None:
            directory = self.workdir / f"case-{len(self._cases)}"
            reference = self.references.get(program.kernel.name)
            case = make_case(program, self.seed, directory, reference)
            self._cases[key] = case
        return case

    def _evaluate_one(self, program: Program, timeout_s: float, time_it: bool,
                      abandon_s: float | None = None) -> Measurement:
        return self.evaluate_built(program, self._compiled(program), timeout_s, time_it,
                                   abandon_s)

    def evaluate_built(self, program: Program, built: SharedObject | CompileError,
                       timeout_s: float, time_it: bool = True,
                       abandon_s: float | None = None) -> Measurement:
        """The :class:`Measurement` of ``program`` already compiled (elsewhere, as on a
        cluster) into ``built``: checked, and timed with ``time_it``, like :meth:`evaluate`."""
        if isinstance(built, CompileError):
            return Measurement("compile_error", built.first_error, detail=built.stderr,
                               flags=self.compiler.flags_text, compiler=self.compiler.version,
                               entry=program.entry)
        case = self._case(program)
        if time_it:
            settle_blas()
        request = {
            "op": "evaluate", "so": str(built.path), "entry": program.entry,
            "signature": [(p.name, p.kind, p.dtype) for p in program.params],
            "arrays": [ArraySpec(p.name, p.dtype, p.role, tuple(p.shape), tuple(p.strides),
                                 p.footprint) for p in program.params if p.kind == "array"],
            "values": {**case.sizes, **case.scalars},
            "inputs": case.inputs, "expected": case.expected, "tolerance": case.tolerance,
            "timing": (dataclasses.replace(self.timing, abandon_s=abandon_s)
                       if abandon_s else self.timing), "time": time_it,
            "canary_bytes": self.canary_bytes, "alignment": self.alignment,
            "probe_reference_s": self.probe_reference_s,
        }
        m = self._run(request, timeout_s)
        m.flags, m.compiler, m.entry = built.flags, built.compiler, program.entry
        return m

    def _timing_limit(self, timeout_s: float) -> float:
        return timing_limit(self.timing, timeout_s)

    def _run(self, request: dict[str, Any], timeout_s: float) -> Measurement:
        try:
            return self._exchange(request, timeout_s)
        finally:
            self.compiler.resume()

    def _exchange(self, request: dict[str, Any], timeout_s: float) -> Measurement:
        worker = self._ensure_worker()
        mark = worker.log_size()
        worker.send(request)
        phase, limit = "loading inputs", self.setup_timeout_s
        deadline = time.monotonic() + limit
        while True:
            try:
                msg = worker.read(deadline)
            except TimeoutError:
                worker.kill()
                self._worker = None
                return Measurement("timeout", f"no answer within {limit:g} s ({phase})")
            except EOFError:
                return self._death(worker, mark, phase)
            event = msg.get("event")
            now = time.monotonic()
            if event == "calling":
                phase, limit = "kernel call", timeout_s
            elif event == "called":
                phase, limit = "checking outputs", self.setup_timeout_s
            elif event == "timing":
                phase, limit = "timing", self._timing_limit(timeout_s)
                if self.quiet_timing:
                    self.compiler.pause()
            elif event == "result":
                return self._result(msg)
            deadline = now + limit

    def _death(self, worker: WorkerProcess, mark: int, phase: str) -> Measurement:
        code = worker.wait()
        self._worker = None
        worker.stop()
        tail = worker.stderr_tail(mark)
        last = _last_line(tail)
        where = f" during {phase}"
        if code < 0:
            name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
        else:
            name = f"exit status {code}"
        oom_lines = [line.strip() for line in tail.splitlines()
                     if any(m in line for m in OOM_MARKS)]
        if oom_lines:
            return Measurement("oom", f"out of memory{where} ({name}): {oom_lines[0]}",
                               detail=tail)
        if code == -signal.SIGKILL:
            return Measurement("oom", f"SIGKILL{where} (most likely the out-of-memory killer)",
                               detail=tail)
        if code < 0:
            return Measurement("crash", f"{name}{where}" + (f": {last}" if last else ""),
                               detail=tail)
        return Measurement("crash", f"worker exited with status {code}{where}"
                                    + (f": {last}" if last else ""), detail=tail)

    def _result(self, msg: dict[str, Any]) -> Measurement:
        times = list(msg.get("times") or [])
        m = Measurement(msg["status"], msg.get("reason", ""), max_error=msg.get("max_error"),
                        times=times, reps=len(times), warmups=int(msg.get("warmups", 0)),
                        threads=int(msg.get("threads", 0)), stop=msg.get("stop", ""),
                        slowdown=msg.get("slowdown"), retimed=int(msg.get("retimed", 0)))
        if times:
            stats = summarize(times)
            m.median_s, m.min_s, m.spread = stats["median_s"], stats["min_s"], stats["spread"]
        probes = [p for p in msg.get("probe_s") or [] if p > 0.0]
        if probes:
            # The fastest probe seen by any worker of this evaluator: a worker started while
            # the machine was slowed still recognises it.
            self.probe_reference_s = min([*probes, self.probe_reference_s or math.inf])
        m.slowed = m.slowdown is not None and m.slowdown > self.timing.slow_limit
        return m
