"""The C timing harness compiled into every shared object, and its Python side.

Timing happens in C so that nothing between two kernel calls (the interpreter, ctypes argument
conversion, the garbage collector) ends up inside a timed interval. The protocol of
:c:func:`partita_measure`:

1. an empty ``#pragma omp parallel`` region creates the OpenMP thread pool (and records the
   pool's thread ids), so no timed call pays for thread creation;
2. warm-up calls, at least ``warmups`` of them and for at least ``warmup_s`` seconds: caches,
   TLBs, page tables of fresh buffers and the CPU clock frequency settle;
3. timed repetitions, each one call between two ``clock_gettime(CLOCK_MONOTONIC)`` readings
   taken at nanosecond resolution, until the median of the times so far moved by less than
   ``rel_tol`` between two checks (after at least ``min_reps``), or ``max_reps`` were taken,
   or ``budget_s`` seconds went by (one repetition at least), or, when ``abandon_s`` is set, as
   soon as the fastest call so far is slower than ``abandon_s``: a tuner racing candidates
   against its best time learns all it needs from one slow call (a warm-up call after the
   first counts as that repetition, so a hopeless candidate costs three calls in all).

Before every timed call (outside its interval) every pool thread runs a short *speed probe*, a
loop bound by FMA throughput, and the slowest thread's time is kept. The median probe over the
repetitions, against the fastest probe seen, says whether some core ran slowed while the
candidate was timed (:func:`measure_probed` then times it again): a core shared unseen with
another process or guest would otherwise pass its slowdown on to the candidate's time.

Before every call (warm-up or timed) the harness can write a buffer larger than the last-level
cache from every thread (so timed calls start from cold caches) and copy saved contents back
into ``inout`` arrays (so repeated calls see the same data); neither is inside the timed
interval.

The shared object is linked with ``--wrap`` for the allocation functions: an allocation that
fails inside a kernel is reported on stderr before the kernel, most likely, crashes on the null
pointer, which lets the runtime tell "out of memory" from an ordinary crash.
"""

from __future__ import annotations

import ctypes
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ALLOC_FAILED_MARK = "partita: allocation failed"
"""Prefix of the line the wrapped allocators print when an allocation inside a kernel fails."""

ALLOC_WRAP_FLAGS = (
    "-Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=aligned_alloc,"
    "--wrap=posix_memalign",
)
"""Link flags that route the kernels' allocations through the harness's reporting wrappers."""

MAX_POOL = 1024
"""Thread ids of at most this many pool threads are recorded."""

HARNESS_C = r"""
/* partita timing harness: see partita/runtime/harness.py for the protocol. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define PARTITA_MAX_POOL 1024

typedef void (*partita_packed_fn)(void **);

/* ---- allocation wrappers ------------------------------------------------------------- */

void *__real_malloc(size_t);
void *__real_calloc(size_t, size_t);
void *__real_realloc(void *, size_t);
void *__real_aligned_alloc(size_t, size_t);
int __real_posix_memalign(void **, size_t, size_t);

volatile int64_t partita_alloc_failures = 0;

static void partita_alloc_failed(const char *what, size_t bytes) {
    char line[160];
    int n = snprintf(line, sizeof line, "partita: allocation failed: %s(%zu bytes)\n",
                     what, bytes);
    /* Reported a few times only: a kernel may fail the same way on every call. */
    if (__atomic_add_fetch(&partita_alloc_failures, 1, __ATOMIC_RELAXED) <= 8 && n > 0) {
        ssize_t ignored = write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line);
        (void)ignored;
    }
}

void *__wrap_malloc(size_t n) {
    void *p = __real_malloc(n);
    if (!p && n) partita_alloc_failed("malloc", n);
    return p;
}

void *__wrap_calloc(size_t k, size_t n) {
    void *p = __real_calloc(k, n);
    if (!p && k && n) partita_alloc_failed("calloc", k * n);
    return p;
}

void *__wrap_realloc(void *q, size_t n) {
    void *p = __real_realloc(q, n);
    if (!p && n) partita_alloc_failed("realloc", n);
    return p;
}

void *__wrap_aligned_alloc(size_t a, size_t n) {
    void *p = __real_aligned_alloc(a, n);
    if (!p && n && errno == ENOMEM) partita_alloc_failed("aligned_alloc", n);
    return p;
}

int __wrap_posix_memalign(void **p, size_t a, size_t n) {
    int rc = __real_posix_memalign(p, a, n);
    if (rc == ENOMEM) partita_alloc_failed("posix_memalign", n);
    return rc;
}

/* ---- thread pool ----------------------------------------------------------------------- */

int64_t partita_pool_tids[PARTITA_MAX_POOL];
int64_t partita_pool_size = 0;

static void partita_create_pool(void) {
#ifdef _OPENMP
#pragma omp parallel
    {
        int t = omp_get_thread_num();
        if (t < PARTITA_MAX_POOL) partita_pool_tids[t] = (int64_t)syscall(SYS_gettid);
        if (t == 0) partita_pool_size = omp_get_num_threads();
    }
#else
    partita_pool_tids[0] = (int64_t)syscall(SYS_gettid);
    partita_pool_size = 1;
#endif
}

/* ---- clock, statistics, cache flush ------------------------------------------------------ */

static int64_t partita_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + (int64_t)t.tv_nsec;
}

static int partita_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double partita_median(const double *t, int64_t n, double *scratch) {
    memcpy(scratch, t, (size_t)n * sizeof *t);
    qsort(scratch, (size_t)n, sizeof *scratch, partita_cmp);
    return n % 2 ? scratch[n / 2] : 0.5 * (scratch[n / 2 - 1] + scratch[n / 2]);
}

/* A global, so the compiler cannot drop the stores as dead. */
unsigned char *partita_flush_buffer = NULL;
int64_t partita_flush_size = 0;

static int partita_flush(int64_t bytes, int64_t round) {
    if (bytes <= 0) return 0;
    if (partita_flush_size < bytes) {
        free(partita_flush_buffer);
        partita_flush_buffer = malloc((size_t)bytes);
        partita_flush_size = partita_flush_buffer ? bytes : 0;
        if (!partita_flush_buffer) return -1;
    }
    unsigned char *buf = partita_flush_buffer;
    /* One store per cache line from every thread evicts the kernel's data from the shared
       last-level cache and from each core's private caches. */
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (int64_t i = 0; i < bytes; i += 64) buf[i] = (unsigned char)(round + i);
    __asm__ __volatile__("" ::: "memory");
    return 0;
}

static void partita_restore(int64_t n, void *const *dst, void *const *src,
                            const int64_t *bytes) {
    for (int64_t i = 0; i < n; i++) memcpy(dst[i], src[i], (size_t)bytes[i]);
}

/* ---- the speed probe --------------------------------------------------------------------- */

typedef float partita_probe_v8 __attribute__((vector_size(32)));
volatile float partita_probe_sink;

/* Eight independent chains of 256-bit multiply-adds: bound by the core's FMA throughput, not
   by latency, so a core that another hardware thread or the host shares runs it slower. */
static double partita_probe_once(int64_t iters) {
    partita_probe_v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    partita_probe_v8 a4 = {0}, a5 = {0}, a6 = {0}, a7 = {0};
    a1 += 1.0f; a2 += 2.0f; a3 += 3.0f; a4 += 4.0f; a5 += 5.0f; a6 += 6.0f; a7 += 7.0f;
    const float m = 0.999999f, c = 1e-7f;
    int64_t t0 = partita_ns();
    for (int64_t i = 0; i < iters; i++) {
        a0 = a0 * m + c; a1 = a1 * m + c; a2 = a2 * m + c; a3 = a3 * m + c;
        a4 = a4 * m + c; a5 = a5 * m + c; a6 = a6 * m + c; a7 = a7 * m + c;
    }
    int64_t t1 = partita_ns();
    partita_probe_v8 s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
    partita_probe_sink = s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
    return (double)(t1 - t0) * 1e-9;
}

/* Every pool thread runs the probe ``repeats`` times at once (a barrier before each run) and
   keeps its fastest run in thread_s[thread]. Returns the number of threads. */
int64_t partita_probe(int64_t iters, int64_t repeats, double *thread_s) {
    int64_t threads = 1;
#ifdef _OPENMP
#pragma omp parallel
    {
        int t = omp_get_thread_num();
        double best = -1.0;
        for (int64_t r = 0; r < repeats; r++) {
#pragma omp barrier
            double s = partita_probe_once(iters);
            if (best < 0.0 || s < best) best = s;
        }
        if (t < PARTITA_MAX_POOL) thread_s[t] = best;
        if (t == 0) threads = omp_get_num_threads();
    }
#else
    double best = -1.0;
    for (int64_t r = 0; r < repeats; r++) {
        double s = partita_probe_once(iters);
        if (best < 0.0 || s < best) best = s;
    }
    thread_s[0] = best;
#endif
    return threads < PARTITA_MAX_POOL ? threads : PARTITA_MAX_POOL;
}

/* The slowest pool thread's time for one simultaneous run of the probe on every thread. */
static double partita_probe_slowest(int64_t iters) {
    double thread_s[PARTITA_MAX_POOL];
    int64_t threads = partita_probe(iters, 1, thread_s);
    double slowest = 0.0;
    for (int64_t t = 0; t < threads; t++)
        if (thread_s[t] > slowest) slowest = thread_s[t];
    return slowest;
}

/* ---- the protocol ------------------------------------------------------------------------ */

enum { PARTITA_STABLE = 0, PARTITA_MAX_REPS = 1, PARTITA_BUDGET = 2, PARTITA_ABANDONED = 3 };

/* Before every timed call (outside its interval), when probe_iters > 0, the speed probe runs
   once on every thread and probe_times[rep] gets the slowest thread's time.
   info[0] warm-up calls made, info[1] timed repetitions, info[2] pool threads,
   info[3] why timing stopped (PARTITA_*), info[4] CLOCK_MONOTONIC ns at the start of the
   first timed call, info[5] CLOCK_MONOTONIC ns when the pool had been created.
   Returns 0, or -1 when a buffer of the harness could not be allocated. */
int partita_measure(partita_packed_fn fn, void **args, int64_t warmups, double warmup_s,
                    int64_t min_reps, int64_t max_reps, double budget_s, double rel_tol,
                    double abandon_s, int64_t flush_bytes, int64_t n_restore,
                    void *const *restore_dst, void *const *restore_src,
                    const int64_t *restore_bytes, int64_t probe_iters, double *probe_times,
                    double *times, int64_t *info) {
    if (max_reps < 1) max_reps = 1;
    if (min_reps < 1) min_reps = 1;
    double *scratch = malloc((size_t)max_reps * sizeof *scratch);
    if (!scratch) return -1;

    partita_create_pool();
    info[2] = partita_pool_size;
    info[5] = partita_ns();

    int64_t round = 0, w = 0;
    const int64_t w_start = partita_ns();
    const int64_t w_min_ns = (int64_t)(warmup_s * 1e9);
    while (w < warmups || partita_ns() - w_start < w_min_ns) {
        if (partita_flush(flush_bytes, round++)) { free(scratch); return -1; }
        partita_restore(n_restore, restore_dst, restore_src, restore_bytes);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        fn(args);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        w++;
        double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
        if (abandon_s > 0.0 && w >= 2 && s > abandon_s) {
            /* A warm call already slower than the threshold: it is the one repetition. */
            info[0] = w - 1;
            info[1] = 1;
            info[3] = PARTITA_ABANDONED;
            info[4] = (int64_t)t0.tv_sec * 1000000000 + (int64_t)t0.tv_nsec;
            times[0] = s;
            if (probe_iters > 0) probe_times[0] = partita_probe_slowest(probe_iters);
            free(scratch);
            return 0;
        }
    }
    info[0] = w;

    const int64_t start = partita_ns();
    const int64_t budget_ns = (int64_t)(budget_s * 1e9);
    int64_t reps = 0, next_check = min_reps, reason = PARTITA_MAX_REPS;
    double previous = -1.0, fastest = -1.0;
    while (reps < max_reps) {
        if (probe_iters > 0) probe_times[reps] = partita_probe_slowest(probe_iters);
        if (partita_flush(flush_bytes, round++)) { free(scratch); return -1; }
        partita_restore(n_restore, restore_dst, restore_src, restore_bytes);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        fn(args);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (reps == 0) info[4] = (int64_t)t0.tv_sec * 1000000000 + (int64_t)t0.tv_nsec;
        int64_t ns = (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000
                     + (int64_t)(t1.tv_nsec - t0.tv_nsec);
        times[reps++] = (double)ns * 1e-9;
        if (fastest < 0.0 || times[reps - 1] < fastest) fastest = times[reps - 1];
        if (abandon_s > 0.0 && fastest > abandon_s) { reason = PARTITA_ABANDONED; break; }
        if (reps >= max_reps) break;
        if (partita_ns() - start >= budget_ns) { reason = PARTITA_BUDGET; break; }
        if (reps >= next_check) {
            double m = partita_median(times, reps, scratch);
            if (previous > 0.0 && (m - previous <= rel_tol * previous)
                && (previous - m <= rel_tol * previous)) {
                reason = PARTITA_STABLE;
                break;
            }
            previous = m;
            int64_t step = reps / 4;
            next_check = reps + (step > 2 ? step : 2);
        }
    }
    info[1] = reps;
    info[3] = reason;
    free(scratch);
    return 0;
}

"""

STOP_REASONS = ("stable", "max_reps", "budget", "abandoned")


def last_level_cache_bytes() -> int | None:
    """Size of the largest CPU cache, from sysfs (None where it cannot be read)."""
    best = None
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in base.glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            size = int(digits) * scale
            best = size if best is None else max(best, size)
    return best


@dataclass(frozen=True)
class TimingOptions:
    """How many calls to make and when to stop; see the module docstring for the protocol.

    ``flush_cache`` writes ``flush_bytes`` (default: twice the last-level cache, or 256 MiB
    when sysfs does not say) before every call. ``restore_inout`` copies the original contents
    back into ``inout`` arrays before every call, for kernels whose repeated application would
    drift into denormals or overflow.
    """

    warmups: int = 2
    warmup_s: float = 0.01
    min_reps: int = 5
    max_reps: int = 200
    budget_s: float = 1.0
    rel_tol: float = 0.01
    abandon_s: float = 0.0
    """Stop timing once the fastest call is slower than this (0: never)."""
    flush_cache: bool = False
    flush_bytes: int | None = None
    restore_inout: bool = False
    probe_iters: int = 1 << 13
    """Iterations of the speed probe (about 12 us on a 3.5 GHz core) run on every pool thread
    before every timed call; 0 runs no probe."""
    slow_limit: float = 1.5
    """Timed calls slowed beyond this (see :func:`measure_probed`) are timed again: some core
    ran slowed. A core whose hardware thread another vCPU or process shares runs about 2x
    slower; on a quiet virtual machine, timings stay within about 1.3x."""
    retime_slowed: int = 2
    """How many times a slowed timing is taken again (the least slowed attempt is kept)."""
    retime_pause_s: float = 0.5
    """Wait before timing again after a slowed timing."""

    def resolved_flush_bytes(self) -> int:
        if not self.flush_cache:
            return 0
        if self.flush_bytes is not None:
            return int(self.flush_bytes)
        llc = last_level_cache_bytes()
        return 2 * llc if llc else 256 << 20

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Timing:
    """Raw result of one :c:func:`partita_measure` call."""

    times: list[float]
    warmups: int
    threads: int
    stop: str
    first_timed_ns: int
    pool_ready_ns: int
    stats: dict[str, float] = field(default_factory=dict)
    probe_s: list[float] = field(default_factory=list)
    """The speed probe's time before each timed call, on the slowest thread (empty when no
    probe ran)."""
    slowdown: float | None = None
    """How slowed the machine was while these calls were timed (:func:`measure_probed`)."""
    retimed: int = 0
    """Timings taken again because an earlier one was slowed."""


def summarize(times: Sequence[float]) -> dict[str, float]:
    """Median, minimum and spread of repetition times.

    The spread is the inter-decile range relative to the median, ``(p90 - p10) / median``: a
    scale-free noise figure that ignores the occasional interrupted repetition.
    """
    if not times:
        return {"median_s": math.nan, "min_s": math.nan, "spread": math.nan}
    t = np.asarray(times, dtype=np.float64)
    median = float(np.median(t))
    p10, p90 = np.percentile(t, [10, 90])
    spread = float((p90 - p10) / median) if median > 0 else 0.0
    return {"median_s": median, "min_s": float(t.min()), "spread": spread}


def bind(lib: ctypes.CDLL) -> Any:
    """The typed ``partita_measure`` function of a loaded shared object."""
    f = lib.partita_measure
    i64, dbl, vp = ctypes.c_int64, ctypes.c_double, ctypes.c_void_p
    f.argtypes = [vp, vp, i64, dbl, i64, i64, dbl, dbl, dbl, i64, i64, vp, vp, vp, i64, vp,
                  vp, vp]
    f.restype = ctypes.c_int
    return f


def measure(lib: ctypes.CDLL, packed: Any, args: ctypes.Array,
            options: TimingOptions = TimingOptions(),
            restore: Sequence[tuple[int, int, int]] = ()) -> Timing:
    """Time ``packed(args)`` with the harness of ``lib``.

    ``packed`` is the ``<entry>_packed`` function of the same (or any loaded) library, ``args``
    the ``void *`` array it takes; ``restore`` lists ``(dst, src, bytes)`` copies made before
    every call when ``options.restore_inout`` is set. Raises MemoryError when the harness could
    not allocate its buffers.
    """
    f = bind(lib)
    max_reps = max(1, options.max_reps)
    times = (ctypes.c_double * max_reps)()
    probes = (ctypes.c_double * max_reps)()
    info = (ctypes.c_int64 * 6)()
    copies = list(restore) if options.restore_inout else []
    n = len(copies)
    dst = (ctypes.c_void_p * max(n, 1))(*[c[0] for c in copies])
    src = (ctypes.c_void_p * max(n, 1))(*[c[1] for c in copies])
    size = (ctypes.c_int64 * max(n, 1))(*[c[2] for c in copies])
    fn_ptr = ctypes.cast(packed, ctypes.c_void_p)
    rc = f(fn_ptr, ctypes.cast(args, ctypes.c_void_p), options.warmups, options.warmup_s,
           options.min_reps, max_reps, options.budget_s, options.rel_tol,
           float(options.abandon_s), options.resolved_flush_bytes(), n,
           ctypes.cast(dst, ctypes.c_void_p),
           ctypes.cast(src, ctypes.c_void_p), ctypes.cast(size, ctypes.c_void_p),
           max(0, int(options.probe_iters)), ctypes.cast(probes, ctypes.c_void_p),
           ctypes.cast(times, ctypes.c_void_p), ctypes.cast(info, ctypes.c_void_p))
    if rc != 0:
        raise MemoryError("the timing harness could not allocate its buffers")
    reps = int(info[1])
    out = [float(times[i]) for i in range(reps)]
    probe_s = [float(probes[i]) for i in range(reps)] if options.probe_iters > 0 else []
    return Timing(out, int(info[0]), int(info[2]), STOP_REASONS[int(info[3])], int(info[4]),
                  int(info[5]), summarize(out), probe_s)


def probe(lib: ctypes.CDLL, iters: int, repeats: int = 3) -> list[float]:
    """Seconds the speed probe (``iters`` iterations of eight chains of 256-bit multiply-adds,
    bound by FMA throughput) took on every pool thread of ``lib``'s OpenMP runtime, the fastest
    of ``repeats`` simultaneous runs on each."""
    f = lib.partita_probe
    f.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    f.restype = ctypes.c_int64
    out = (ctypes.c_double * MAX_POOL)()
    n = int(f(int(iters), max(1, int(repeats)), ctypes.cast(out, ctypes.c_void_p)))
    return [float(out[i]) for i in range(n)]


def run_delays() -> dict[int, int]:
    """Nanoseconds each thread of this process has spent runnable but waiting for a CPU, from
    ``/proc/self/task/*/schedstat`` (empty where Linux does not provide it)."""
    out: dict[int, int] = {}
    try:
        tasks = list(Path("/proc/self/task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            fields = (task / "schedstat").read_text().split()
            out[int(task.name)] = int(fields[1])
        except (OSError, ValueError, IndexError):
            continue
    return out


MAX_WAIT_SLOWDOWN = 10.0
"""The largest slowdown the time spent waiting for a CPU is taken to mean."""

MIN_PROBES = 5
"""Timings with fewer probes (abandoned ones: a call or two) get no verdict. A single probe
says little: in a 20 s tune on a quiet machine, the lone probes of abandoned timings ran
1.1-4.7x the fastest, most of them over 1.5x (the threads had just been woken)."""

MIN_WAIT_WINDOW_S = 0.02
"""The time spent waiting for a CPU counts only over timings at least this long: over a
shorter one, the latency of waking the pool's threads alone makes a large fraction."""


def _slowdown(timing: Timing, reference: float, waited: float, wall: float) -> float | None:
    """The larger of the median probe over the reference and of what the pool thread that
    waited longest for a CPU lost (``waited`` seconds of the ``wall`` seconds the timing
    took); each counts where it can tell: the probes from :data:`MIN_PROBES` of them, the
    wait over :data:`MIN_WAIT_WINDOW_S`. None when neither can (an abandoned timing, or a
    short one with few probes). A timing of a few long calls (axpy of 2^24 elements on a
    loaded machine: 2 calls of 11 ms) has too few probes but a long enough wait window."""
    if timing.stop == "abandoned":
        return None
    verdicts: list[float] = []
    probes = [p for p in timing.probe_s if p > 0.0]
    if len(probes) >= MIN_PROBES and reference > 0.0:
        verdicts.append(float(np.median(probes)) / reference)
    if wall >= MIN_WAIT_WINDOW_S:
        verdicts.append(1.0 / max(1.0 - waited / wall, 1.0 / MAX_WAIT_SLOWDOWN))
    return max(verdicts) if verdicts else None


def measure_probed(lib: ctypes.CDLL, packed: Any, args: ctypes.Array,
                   options: TimingOptions = TimingOptions(),
                   restore: Sequence[tuple[int, int, int]] = (),
                   reference_s: float | None = None,
                   sleep: Callable[[float], None] = time.sleep,
                   clock: Callable[[], float] = time.monotonic) -> Timing:
    """:func:`measure`, taken again while the machine ran slowed.

    On a machine whose cores are shared unseen (a vCPU whose hardware thread the host gives to
    another guest, a process competing for a core), a core can run at half speed for minutes,
    and every timing taken meanwhile is too slow. A timing's *slowdown* is the larger of:

    - its median speed probe over the *reference*, the fastest probe seen (``reference_s``,
      what the caller saw earlier, or any probe of this call): a core whose throughput is
      shared. The median, not the worst, probe counts: this machine's cores slow down for a
      fraction of a millisecond all the time, which a timing's median call does not see;
    - ``1 / (1 - w)``, where ``w`` is the fraction of the timing's wall time that the pool
      thread that waited longest spent runnable but without a CPU (Linux's ``schedstat``):
      another process taking turns on a core, which a probe shorter than a time slice misses.

    A timing slowed beyond ``options.slow_limit`` is taken again, at most
    ``options.retime_slowed`` times after a pause, and the least slowed attempt is kept.
    An abandoned timing (a call or two, see :class:`TimingOptions`) gets no verdict
    (``slowdown`` None): too few probes to tell.
    """
    if options.probe_iters <= 0:
        return measure(lib, packed, args, options, restore)
    attempts: list[tuple[Timing, float, float]] = []  # (timing, seconds waited, wall)
    while True:
        delays, start = run_delays(), clock()
        timing = measure(lib, packed, args, options, restore)
        wall = clock() - start
        after = run_delays()
        pool = pool_thread_ids(lib) if delays else []
        waited = max((after.get(t, 0) - delays.get(t, 0) for t in pool if t in after),
                     default=0)
        attempts.append((timing, waited * 1e-9, wall))
        seen = [p for t, _, _ in attempts for p in t.probe_s if p > 0.0]
        reference = min([*seen, *([reference_s] if reference_s else [])], default=0.0)
        for t, w, span in attempts:
            t.slowdown = _slowdown(t, reference, w, span)
        if (timing.slowdown or 1.0) <= options.slow_limit \
                or len(attempts) > options.retime_slowed:
            break
        sleep(options.retime_pause_s)
    best = min((t for t, _, _ in attempts), key=lambda t: t.slowdown or 1.0)
    best.retimed = len(attempts) - 1
    return best


def pool_thread_ids(lib: ctypes.CDLL) -> list[int]:
    """Kernel-level thread ids of the OpenMP pool the harness of ``lib`` created last."""
    size = ctypes.c_int64.in_dll(lib, "partita_pool_size").value
    tids = (ctypes.c_int64 * MAX_POOL).in_dll(lib, "partita_pool_tids")
    return [int(tids[i]) for i in range(min(size, MAX_POOL))]


def harness_source() -> str:
    """The harness's C source (part of every shared object's cache key)."""
    return HARNESS_C

