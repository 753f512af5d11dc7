'''C source of the CPU micro-benchmarks that :mod:`partita.targets.cpu.measure` runs.

The source lives in a Python string so that it ships with the package without package-data
configuration. It is one program: each command-line argument after the first two names one
benchmark (a *spec*), and for each the program prints one line::

    <spec> <work per repetition> <seconds>:<share> ... (one pair per repetition)

or ``<spec> unsupported`` when the compiled target lacks what the spec needs (e.g. 512-bit
vectors). Work is counted in flops, bytes, dependent operations or pages faulted in,
depending on the benchmark.
``share`` is how much of the repetition every thread actually ran (its CPU time over its wall
time, times its kernel time over the whole timed region): below 1 when a thread was
descheduled, which on a shared machine is the main source of outliers. Turning times into
rates, rejecting disturbed repetitions and taking medians is left to Python, so that the
statistics are tested there. The first line, ``# wide_bits N``, gives the widest vector
width compiled in.

Every benchmark, single-threaded or not, runs through the same OpenMP loop: buffers are
allocated and first-touched by the thread that uses them, the thread team exists before the
first timed repetition, the repetition count ``n`` is calibrated until one repetition lasts
about the target time, one warm-up repetition is discarded, and then ``R`` repetitions are
timed between barriers by thread 0.

The hot loops are written so that gcc emits exactly the intended instructions:

* vector code uses GCC vector extensions of the widths the target defines (``__AVX512F__``,
  ``__AVX__``, SSE2/NEON for 128 bits); ``a * b + c`` contracts to an FMA instruction under
  the default ``-ffp-contract=fast`` of GNU C;
* the program is compiled with ``-fno-tree-vectorize`` so that scalar benchmarks stay scalar
  (the SLP vectoriser would otherwise pack independent scalar chains into vectors);
* empty ``asm volatile`` statements pin values in registers (``KEEP``) without emitting
  instructions, so loads happen without arithmetic consuming them and chains are not folded.
'''

from __future__ import annotations

MICROBENCH_C = r"""
#define _GNU_SOURCE
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define MAXT 1024
#define ACC 12     /* independent FMA chains: covers latency x ports (4-5 cycles x 2) */
#define LINE 64

/* ---------- registers pinned without instructions ---------- */
#if defined(__x86_64__) || defined(__i386__)
#define KEEP(x) __asm__ volatile("" : "+v"(x))
#elif defined(__aarch64__)
#define KEEP(x) __asm__ volatile("" : "+w"(x))
#else
#define KEEP(x) __asm__ volatile("" : "+m"(x))
#endif
#define KEEPR(x) __asm__ volatile("" : "+r"(x))
#define CLOBBER() __asm__ volatile("" ::: "memory")

/* ---------- vector types ---------- */
#if defined(__AVX512F__)
#define HAVE512 1
#endif
#if defined(__AVX__)
#define HAVE256 1
#endif
#if defined(__SSE2__) || defined(__ARM_NEON) || defined(__aarch64__)
#define HAVE128 1
#endif

typedef float f32x4 __attribute__((vector_size(16)));
typedef double f64x2 __attribute__((vector_size(16)));
typedef float f32x8 __attribute__((vector_size(32)));
typedef double f64x4 __attribute__((vector_size(32)));
typedef float f32x16 __attribute__((vector_size(64)));
typedef double f64x8 __attribute__((vector_size(64)));

#if defined(HAVE512)
typedef f32x16 vwide; typedef f64x8 vwided; static const int WIDE_BITS = 512;
#elif defined(HAVE256)
typedef f32x8 vwide; typedef f64x4 vwided; static const int WIDE_BITS = 256;
#elif defined(HAVE128)
typedef f32x4 vwide; typedef f64x2 vwided; static const int WIDE_BITS = 128;
#else
typedef float vwide; typedef double vwided; static const int WIDE_BITS = 0;
#endif

volatile double sink_d;
volatile uint64_t sink_u;
volatile uintptr_t sink_p;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU time of the calling thread: less than the wall time when it was descheduled. */
static double thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---------- compute kernels: n iterations, return work done ---------- */

#define R4(s) s s s s
#define R16(s) R4(s) R4(s) R4(s) R4(s)

/* Integer add chain: one cycle per add on every core we know, so it measures the clock. */
static __attribute__((noinline)) double k_iadd(long n) {
    uint64_t x = 0, y = 1;
    KEEPR(y);
    for (long i = 0; i < n; i++) {
#if defined(__x86_64__)
        R16(__asm__ volatile("add %1, %0" : "+r"(x) : "r"(y));)
#else
        R16(x += y; KEEPR(x);)
#endif
    }
    sink_u = x;
    return 16.0 * (double)n;
}

/* ACC independent chains c = c * a + b (one FMA each), two rounds per iteration. */
#define FMA_STEP(i) c##i = c##i * a + b;
#define DEF_FMA(NAME, T, E)                                                          \
    static double NAME##_tp(long n) {                                                \
        T a = (T){0} + (E)0.9999999, b = (T){0} + (E)1e-7;                            \
        T c0 = (T){0} + (E)1, c1 = c0 + (E)0.1, c2 = c0 + (E)0.2, c3 = c0 + (E)0.3;    \
        T c4 = c0 + (E)0.4, c5 = c0 + (E)0.5, c6 = c0 + (E)0.6, c7 = c0 + (E)0.7;     \
        T c8 = c0 + (E)0.8, c9 = c0 + (E)0.9, c10 = c0 + (E)1.0, c11 = c0 + (E)1.1;   \
        KEEP(a); KEEP(b);                                                            \
        for (long i = 0; i < n; i++) {                                               \
            FMA_STEP(0) FMA_STEP(1) FMA_STEP(2) FMA_STEP(3) FMA_STEP(4) FMA_STEP(5)   \
            FMA_STEP(6) FMA_STEP(7) FMA_STEP(8) FMA_STEP(9) FMA_STEP(10) FMA_STEP(11) \
            FMA_STEP(0) FMA_STEP(1) FMA_STEP(2) FMA_STEP(3) FMA_STEP(4) FMA_STEP(5)   \
            FMA_STEP(6) FMA_STEP(7) FMA_STEP(8) FMA_STEP(9) FMA_STEP(10) FMA_STEP(11) \
        }                                                                            \
        T s = c0 + c1 + c2 + c3 + c4 + c5 + c6 + c7 + c8 + c9 + c10 + c11;             \
        sink_d = ((E *)&s)[0];                                                       \
        return 2.0 * 2 * ACC * (double)(sizeof(T) / sizeof(E)) * (double)n;           \
    }                                                                                \
    static double NAME##_lat(long n) {                                               \
        T a = (T){0} + (E)0.9999999, b = (T){0} + (E)1e-7, c = (T){0} + (E)1;          \
        KEEP(a); KEEP(b);                                                            \
        for (long i = 0; i < n; i++) { R16(c = c * a + b;) }                         \
        sink_d = ((E *)&c)[0];                                                       \
        return 16.0 * (double)n;                                                     \
    }                                                                                \
    static double NAME##_addlat(long n) {                                            \
        T b = (T){0} + (E)1e-7, c = (T){0} + (E)1;                                    \
        KEEP(b);                                                                     \
        for (long i = 0; i < n; i++) { R16(c = c + b;) }                             \
        sink_d = ((E *)&c)[0];                                                       \
        return 16.0 * (double)n;                                                     \
    }

DEF_FMA(f32s, float, float)
DEF_FMA(f64s, double, double)
#if defined(HAVE128)
DEF_FMA(f32x4, f32x4, float)
DEF_FMA(f64x2, f64x2, double)
#endif
#if defined(HAVE256)
DEF_FMA(f32x8, f32x8, float)
DEF_FMA(f64x4, f64x4, double)
#endif
#if defined(HAVE512)
DEF_FMA(f32x16, f32x16, float)
DEF_FMA(f64x8, f64x8, double)
#endif

typedef double (*compute_fn)(long);

/* kind 0: throughput, 1: FMA latency, 2: add latency */
static compute_fn compute_kernel(int dbl, int bits, int kind) {
#define PICK(NAME) return kind == 0 ? NAME##_tp : kind == 1 ? NAME##_lat : NAME##_addlat
    if (bits == 0) { if (dbl) PICK(f64s); else PICK(f32s); }
#if defined(HAVE128)
    if (bits == 128) { if (dbl) PICK(f64x2); else PICK(f32x4); }
#endif
#if defined(HAVE256)
    if (bits == 256) { if (dbl) PICK(f64x4); else PICK(f32x8); }
#endif
#if defined(HAVE512)
    if (bits == 512) { if (dbl) PICK(f64x8); else PICK(f32x16); }
#endif
    return NULL;
#undef PICK
}

/* ---------- memory kernels ---------- */

/* L1 pointer chase: each load's address is the previous load's value. */
static __attribute__((noinline)) double k_chase(long n, void **start) {
    void **p = start;
    for (long i = 0; i < n; i++) { R16(p = (void **)*p;) }
    sink_p = (uintptr_t)p;
    return 16.0 * (double)n;
}

/* Pure loads (values pinned in registers, nothing consumes them) and pure stores of an
   opaque register, of elements of type T: the widest vectors, and 4-byte scalars (some cores
   issue more of those per cycle; the vectorisers are off so that they stay scalar). */
#define DEF_LOAD_STORE(LOAD, STORE, T, ATTR)                                          \
    static ATTR double LOAD(long n, char *buf, size_t bytes) {                        \
        T *p = (T *)buf;                                                             \
        size_t ne = bytes / sizeof(T) / 8 * 8;                                       \
        for (long r = 0; r < n; r++) {                                               \
            for (size_t i = 0; i < ne; i += 8) {                                     \
                T v0 = p[i], v1 = p[i + 1], v2 = p[i + 2], v3 = p[i + 3];             \
                T v4 = p[i + 4], v5 = p[i + 5], v6 = p[i + 6], v7 = p[i + 7];         \
                KEEP(v0); KEEP(v1); KEEP(v2); KEEP(v3);                              \
                KEEP(v4); KEEP(v5); KEEP(v6); KEEP(v7);                              \
            }                                                                        \
            CLOBBER();                                                               \
        }                                                                            \
        return (double)n * (double)(ne * sizeof(T));                                 \
    }                                                                                \
    static ATTR double STORE(long n, char *buf, size_t bytes) {                       \
        T *p = (T *)buf;                                                             \
        size_t ne = bytes / sizeof(T) / 8 * 8;                                       \
        T v = (T){0} + 1.5f;                                                         \
        for (long r = 0; r < n; r++) {                                               \
            KEEP(v);                                                                 \
            for (size_t i = 0; i < ne; i += 8) {                                     \
                p[i] = v; p[i + 1] = v; p[i + 2] = v; p[i + 3] = v;                  \
                p[i + 4] = v; p[i + 5] = v; p[i + 6] = v; p[i + 7] = v;              \
            }                                                                        \
            CLOBBER();                                                               \
        }                                                                            \
        return (double)n * (double)(ne * sizeof(T));                                 \
    }

DEF_LOAD_STORE(k_load, k_store, vwide, __attribute__((noinline)))
DEF_LOAD_STORE(k_sload, k_sstore, float,
               __attribute__((noinline, optimize("no-tree-vectorize", "no-tree-slp-vectorize"))))

/* Working sets larger than a block are walked one block per repetition unit, the block
   moving round the buffer, so that a unit of work stays short (a few hundred microseconds)
   whatever the working set: repetitions then stay short enough to fall between the
   scheduler's interruptions, and data still comes from the level the whole set lives in. */
#define BLOCK ((size_t)1 << 20)

static size_t blocks_of(size_t bytes) { return (bytes + BLOCK - 1) / BLOCK; }
static size_t block_of(size_t bytes) { return bytes / blocks_of(bytes) / 512 * 512; }

/* Read-mostly streaming: a sum over the buffer with eight independent accumulators. */
static __attribute__((noinline)) double k_read(long n, char *buf, size_t bytes,
                                                size_t *cursor) {
    size_t block = block_of(bytes), blocks = blocks_of(bytes);
    size_t nv = block / sizeof(vwide) / 8 * 8;
    vwide s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0}, s4 = {0}, s5 = {0}, s6 = {0}, s7 = {0};
    size_t at = *cursor;
    for (long r = 0; r < n; r++) {
        vwide *p = (vwide *)(buf + at * block);
        for (size_t i = 0; i < nv; i += 8) {
            s0 += p[i]; s1 += p[i + 1]; s2 += p[i + 2]; s3 += p[i + 3];
            s4 += p[i + 4]; s5 += p[i + 5]; s6 += p[i + 6]; s7 += p[i + 7];
        }
        at = at + 1 == blocks ? 0 : at + 1;
        CLOBBER();
    }
    *cursor = at;
    vwide s = s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7;
    sink_d = ((float *)&s)[0];
    return (double)n * (double)(nv * sizeof(vwide));
}

/* STREAM triad a = b + s * c, counted as STREAM does (3 x 8 bytes per element). */
static __attribute__((noinline)) double k_triad(long n, char *a, char *b, char *c,
                                                 size_t bytes, size_t *cursor) {
    size_t block = block_of(bytes), blocks = blocks_of(bytes);
    size_t nv = block / sizeof(vwided) / 4 * 4;
    vwided s = (vwided){0} + 3.0;
    KEEP(s);
    size_t at = *cursor;
    for (long r = 0; r < n; r++) {
        vwided *pa = (vwided *)(a + at * block);
        vwided *pb = (vwided *)(b + at * block), *pc = (vwided *)(c + at * block);
        for (size_t i = 0; i < nv; i += 4) {
            pa[i] = pb[i] + s * pc[i];
            pa[i + 1] = pb[i + 1] + s * pc[i + 1];
            pa[i + 2] = pb[i + 2] + s * pc[i + 2];
            pa[i + 3] = pb[i + 3] + s * pc[i + 3];
        }
        at = at + 1 == blocks ? 0 : at + 1;
        CLOBBER();
    }
    *cursor = at;
    return 3.0 * (double)n * (double)(nv * sizeof(vwided));
}

/* In-place update y += s * x (axpy), counted as the lower-bound model counts an updated
   array: x read, y read and y written back (3 x 8 bytes per element). Written-back lines
   land in a victim L3, which read-only streams do not fill, so sets that overflow the
   caches stream faster this way than as reads. */
static __attribute__((noinline)) double k_update(long n, char *x, char *y, size_t bytes,
                                                 size_t *cursor) {
    size_t block = block_of(bytes), blocks = blocks_of(bytes);
    size_t nv = block / sizeof(vwided) / 4 * 4;
    vwided s = (vwided){0} + 1e-3;
    KEEP(s);
    size_t at = *cursor;
    for (long r = 0; r < n; r++) {
        vwided *px = (vwided *)(x + at * block), *py = (vwided *)(y + at * block);
        for (size_t i = 0; i < nv; i += 4) {
            py[i] += s * px[i];
            py[i + 1] += s * px[i + 1];
            py[i + 2] += s * px[i + 2];
            py[i + 3] += s * px[i + 3];
        }
        at = at + 1 == blocks ? 0 : at + 1;
        CLOBBER();
    }
    *cursor = at;
    return 3.0 * (double)n * (double)(nv * sizeof(vwided));
}

/* Memory allocated anew: what a generated kernel does with a temporary on the heap at
   every call. The buffer is allocated as the generated code allocates it, one byte per 4 KiB
   written (the first write of a fresh page faults, and the kernel zeroes the page), then
   freed; the work is the pages touched. Buffers above the C library's largest threshold
   for serving blocks from its heap (32 MiB in glibc) are mapped on allocation and unmapped
   on free, so every repetition touches fresh pages; a library that reuses them makes this
   fast, and the model's charge small. */
static __attribute__((noinline)) double k_fresh(long n, size_t bytes) {
    size_t size = (bytes + 63) / 64 * 64;
    for (long r = 0; r < n; r++) {
        char *p = aligned_alloc(64, size);
        if (!p) return -1.0;
        for (size_t i = 0; i < size; i += 4096) p[i] = (char)r;
        __asm__ volatile("" :: "r"(p) : "memory");
        free(p);
    }
    return (double)n * (double)(size / 4096);
}

/* ---------- specs ---------- */

enum { IADD, FMA_TP, FMA_LAT, ADD_LAT, CHASE, LOAD, STORE, READ, TRIAD, SLOAD, SSTORE,
       UPDATE, FRESH };

typedef struct {
    int kind, dbl, bits, threads;
    size_t bytes;           /* per thread (per array for TRIAD and UPDATE) */
    size_t cursor[MAXT];    /* next block of each thread (READ, TRIAD, UPDATE) */
    compute_fn fn;
    char *buf[MAXT][3];
} spec_t;

static char *alloc_touch(size_t bytes) {
    size_t align = bytes >= (4u << 20) ? (2u << 20) : 4096;
    size_t size = (bytes + align - 1) / align * align;
    void *p = NULL;
    if (posix_memalign(&p, align, size) != 0) return NULL;
#if defined(MADV_HUGEPAGE)
    if (align > 4096) madvise(p, size, MADV_HUGEPAGE);
#endif
    memset(p, 1, size);
    return (char *)p;
}

static int setup(spec_t *s, int tid) {
    int arrays = s->kind == TRIAD ? 3 : s->kind == UPDATE ? 2 : s->kind == FRESH ? 0
               : (s->kind == CHASE || s->kind >= LOAD) ? 1 : 0;
    for (int k = 0; k < arrays; k++) {
        s->buf[tid][k] = alloc_touch(s->bytes);
        if (!s->buf[tid][k]) return -1;
    }
    if (s->kind == UPDATE)    /* y grows by a thousandth of x per pass: finite, normal */
        for (int k = 0; k < 2; k++) {
            double *p = (double *)s->buf[tid][k];
            for (size_t i = 0; i < s->bytes / 8; i++) p[i] = 1.0;
        }
    if (s->kind == TRIAD) {   /* zero-ish values keep the triad finite */
        double *pb = (double *)s->buf[tid][1], *pc = (double *)s->buf[tid][2];
        for (size_t i = 0; i < s->bytes / 8; i++) { pb[i] = 1.0; pc[i] = 0.5; }
    }
    if (s->kind == READ || s->kind == LOAD || s->kind == SLOAD) {
        float *f = (float *)s->buf[tid][0];
        for (size_t i = 0; i < s->bytes / 4; i++) f[i] = 1.0f;
    }
    if (s->kind == CHASE) {   /* one pointer per cache line, lines in a random cycle */
        size_t lines = s->bytes / LINE;
        size_t *order = malloc(lines * sizeof(size_t));
        if (!order) return -1;
        for (size_t i = 0; i < lines; i++) order[i] = i;
        uint64_t st = 0x9E3779B97F4A7C15ull;
        for (size_t i = lines - 1; i > 0; i--) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            size_t j = (size_t)((st >> 33) % (i + 1));
            size_t t = order[i]; order[i] = order[j]; order[j] = t;
        }
        char *base = s->buf[tid][0];
        for (size_t i = 0; i < lines; i++)
            *(void **)(base + order[i] * LINE) = base + order[(i + 1) % lines] * LINE;
        free(order);
    }
    return 0;
}

static double run_kernel(spec_t *s, int tid, long n) {
    char **b = s->buf[tid];
    switch (s->kind) {
    case IADD: return k_iadd(n);
    case FMA_TP: case FMA_LAT: case ADD_LAT: return s->fn(n);
    case CHASE: return k_chase(n, (void **)b[0]);
    case LOAD: return k_load(n, b[0], s->bytes);
    case STORE: return k_store(n, b[0], s->bytes);
    case SLOAD: return k_sload(n, b[0], s->bytes);
    case SSTORE: return k_sstore(n, b[0], s->bytes);
    case READ: return k_read(n, b[0], s->bytes, &s->cursor[tid]);
    case TRIAD: return k_triad(n, b[0], b[1], b[2], s->bytes, &s->cursor[tid]);
    case UPDATE: return k_update(n, b[0], b[1], s->bytes, &s->cursor[tid]);
    case FRESH: return k_fresh(n, s->bytes);
    }
    return 0;
}

/* spec syntax:  iadd | fma:f32:512:T | fmalat:f64:0 | addlat:f32:256 | chase:BYTES
                 | load:BYTES | store:BYTES | sload:BYTES | sstore:BYTES
                 | read:BYTES:T | triad:BYTES:T | update:BYTES:T | fresh:BYTES:T      */
static int parse(const char *text, spec_t *s) {
    char kind[16] = {0}, dt[8] = {0};
    unsigned long long bytes = 0;
    int bits = 0, threads = 1;
    memset(s, 0, sizeof *s);
    s->threads = 1;
    if (sscanf(text, "%15[a-z]", kind) != 1) return -1;
    if (!strcmp(kind, "iadd")) { s->kind = IADD; return 0; }
    if (!strcmp(kind, "fma") || !strcmp(kind, "fmalat") || !strcmp(kind, "addlat")) {
        if (!strcmp(kind, "fma")) {
            if (sscanf(text, "fma:%7[a-z0-9]:%d:%d", dt, &bits, &threads) != 3) return -1;
            s->kind = FMA_TP;
        } else {
            if (sscanf(text + strlen(kind), ":%7[a-z0-9]:%d", dt, &bits) != 2) return -1;
            s->kind = !strcmp(kind, "fmalat") ? FMA_LAT : ADD_LAT;
        }
        s->dbl = !strcmp(dt, "f64");
        s->bits = bits;
        s->threads = threads;
        s->fn = compute_kernel(s->dbl, bits, s->kind - FMA_TP);
        return s->fn ? 0 : 1;
    }
    if (!strcmp(kind, "sload") || !strcmp(kind, "sstore")) {
        if (sscanf(text + strlen(kind), ":%llu", &bytes) != 1) return -1;
        s->kind = !strcmp(kind, "sload") ? SLOAD : SSTORE;
        s->bytes = (size_t)bytes;
        return s->bytes < 512 ? -1 : 0;
    }
    if (!strcmp(kind, "chase") || !strcmp(kind, "load") || !strcmp(kind, "store")) {
        if (sscanf(text + strlen(kind), ":%llu", &bytes) != 1) return -1;
        s->kind = !strcmp(kind, "chase") ? CHASE : !strcmp(kind, "load") ? LOAD : STORE;
        s->bytes = (size_t)bytes;
        if (s->bytes < (s->kind == CHASE ? 2 * LINE : 512)) return -1;
        return s->kind != CHASE && WIDE_BITS == 0 ? 1 : 0;
    }
    if (!strcmp(kind, "read") || !strcmp(kind, "triad") || !strcmp(kind, "update")
        || !strcmp(kind, "fresh")) {
        if (sscanf(text + strlen(kind), ":%llu:%d", &bytes, &threads) != 2) return -1;
        s->kind = !strcmp(kind, "read") ? READ : !strcmp(kind, "triad") ? TRIAD
                : !strcmp(kind, "update") ? UPDATE : FRESH;
        s->bytes = (size_t)bytes;
        if (s->bytes < 512) return -1;
        s->threads = threads;
        return 0;
    }
    return -1;
}

static int bench(spec_t *s, double target, int reps, double *times, double *share,
                 double *work_out) {
    int T = s->threads < 1 ? 1 : s->threads > MAXT ? MAXT : s->threads;
    long n = 1;
    int phase = 0, failed = 0, warmups = 0;   /* 0 calibrate, 1 warm up, 2.. timed, -1 done */
    double work[MAXT], cpu[MAXT], wall[MAXT];
    double t0 = 0.0;
#pragma omp parallel num_threads(T) if (T > 1)
    {
        int tid = omp_get_thread_num();
        if (setup(s, tid) != 0) {
#pragma omp atomic write
            failed = 1;
        }
        for (;;) {
#pragma omp barrier
            long my_n = n;
            int my_phase = phase;
            if (my_phase < 0 || failed) break;
#pragma omp barrier
            if (tid == 0) t0 = now();
            double w0 = now(), c0 = thread_cpu();
            work[tid] = run_kernel(s, tid, my_n);
            if (work[tid] < 0) {   /* an allocation failed */
#pragma omp atomic write
                failed = 1;
            }
            cpu[tid] = thread_cpu() - c0;
            wall[tid] = now() - w0;
#pragma omp barrier
            if (tid == 0) {
                double el = now() - t0;
                /* CPU time is what the kernel needed when it ran: interference that
                   descheduled a thread must not shrink the calibrated count */
                double busy = 0;
                for (int t = 0; t < T; t++) busy = cpu[t] > busy ? cpu[t] : busy;
                double cal = busy > 0 && busy < el ? busy : el;
                if (phase == 0) {
                    if (cal < 0.25 * target) {
                        double f = cal > 0 ? target / cal : 16.0;
                        n = (long)((double)n * (f > 16.0 ? 16.0 : f < 2.0 ? 2.0 : f));
                    } else {
                        double m = (double)n * target / cal;
                        n = m < 1.0 ? 1 : (long)m;
                        phase = 1;
                    }
                } else if (phase == 1) {
                    /* a calibration run slowed by interference leaves n too small */
                    if (cal < 0.5 * target && warmups++ < 4) {
                        double m = (double)n * target / (cal > 0 ? cal : 1e-9);
                        n = m < 1.0 ? 1 : (long)m;
                    } else {
                        phase = 2;
                    }
                } else {
                    /* share: the worst thread's CPU time over its own wall time (was it
                       descheduled mid-kernel?) times the longest kernel over the timed
                       region (did a thread start late, descheduled at the barrier?) */
                    double w = 0, sh = 1.0, longest = 0;
                    for (int t = 0; t < T; t++) {
                        w += work[t];
                        double r = wall[t] > 0 ? cpu[t] / wall[t] : 1.0;
                        if (r < sh) sh = r;
                        if (wall[t] > longest) longest = wall[t];
                    }
                    if (el > 0 && longest < el) sh *= longest / el;
                    times[phase - 2] = el;
                    share[phase - 2] = sh;
                    *work_out = w;
                    phase = phase - 1 >= reps ? -1 : phase + 1;
                }
            }
        }
        for (int k = 0; k < 3; k++) free(s->buf[tid][k]);
    }
    return failed ? -1 : 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s TARGET_SECONDS REPS SPEC...\n", argv[0]);
        return 2;
    }
    double target = atof(argv[1]);
    int reps = atoi(argv[2]);
    if (reps < 1) reps = 1;
    double *times = calloc((size_t)reps, sizeof(double));
    double *share = calloc((size_t)reps, sizeof(double));
    static spec_t spec;
    printf("# wide_bits %d\n", WIDE_BITS);
    for (int i = 3; i < argc; i++) {
        int rc = parse(argv[i], &spec);
        if (rc < 0) { fprintf(stderr, "bad spec %s\n", argv[i]); return 2; }
        if (rc > 0) { printf("%s unsupported\n", argv[i]); fflush(stdout); continue; }
        double work = 0;
        if (bench(&spec, target, reps, times, share, &work) != 0) {
            printf("%s failed\n", argv[i]);
            fflush(stdout);
            continue;
        }
        printf("%s %.17g", argv[i], work);
        for (int r = 0; r < reps; r++) printf(" %.9g:%.4f", times[r], share[r]);
        printf("\n");
        fflush(stdout);
    }
    free(times);
    free(share);
    return 0;
}
"""
"""The benchmark program (see the module docstring for its protocol)."""
