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
from collections.abc import Sequence
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

/* ---- the protocol ------------------------------------------------------------------------ */

enum { PARTITA_STABLE = 0, PARTITA_MAX_REPS = 1, PARTITA_BUDGET = 2, PARTITA_ABANDONED = 3 };

/* info[0] warm-up calls made, info[1] timed repetitions, info[2] pool threads,
   info[3] why timing stopped (PARTITA_*), info[4] CLOCK_MONOTONIC ns at the start of the
   first timed call, info[5] CLOCK_MONOTONIC ns when the pool had been created.
   Returns 0, or -1 when a buffer of the harness could not be allocated. */
int partita_measure(partita_packed_fn fn, void **args, int64_t warmups, double warmup_s,
                    int64_t min_reps, int64_t max_reps, double budget_s, double rel_tol,
                    double abandon_s, int64_t flush_bytes, int64_t n_restore,
                    void *const *restore_dst, void *const *restore_src,
                    const int64_t *restore_bytes, double *times, int64_t *info) {
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
    f.argtypes = [vp, vp, i64, dbl, i64, i64, dbl, dbl, dbl, i64, i64, vp, vp, vp, vp, vp]
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
           ctypes.cast(times, ctypes.c_void_p), ctypes.cast(info, ctypes.c_void_p))
    if rc != 0:
        raise MemoryError("the timing harness could not allocate its buffers")
    reps = int(info[1])
    out = [float(times[i]) for i in range(reps)]
    return Timing(out, int(info[0]), int(info[2]), STOP_REASONS[int(info[3])], int(info[4]),
                  int(info[5]), summarize(out))


def pool_thread_ids(lib: ctypes.CDLL) -> list[int]:
    """Kernel-level thread ids of the OpenMP pool the harness of ``lib`` created last."""
    size = ctypes.c_int64.in_dll(lib, "partita_pool_size").value
    tids = (ctypes.c_int64 * MAX_POOL).in_dll(lib, "partita_pool_tids")
    return [int(tids[i]) for i in range(min(size, MAX_POOL))]


def harness_source() -> str:
    """The harness's C source (part of every shared object's cache key)."""
    return HARNESS_C

