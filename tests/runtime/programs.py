"""Hand-written C programs that follow the :class:`Program` contract, good and faulty.

They stand in for printed implementations: each defines ``<entry>`` and ``<entry>_packed``,
with sizes fixed in the source as the printer fixes static sizes.
"""

from __future__ import annotations

import itertools

from partita.codegen.program import Program, signature
from partita.ir.builder import KernelBuilder
from partita.ir.kernel import Kernel
from partita.kernels import kernel

CTYPE = {"float32": "float", "float64": "double"}

_ids = itertools.count()


def unique(name: str) -> str:
    """A fresh entry name, so programs of one test never collide in a batch or the cache."""
    return f"{name}_{next(_ids)}"


AXPY = """
#include <stdint.h>
#include <stdlib.h>
void {entry}({t} alpha, const {t} *restrict x, {t} *restrict y) {{
    #pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < {n}; i++) {body}
}}
void {entry}_packed(void **args) {{
    {entry}(*({t} *)args[0], (const {t} *)args[1], ({t} *)args[2]);
}}
"""

AXPY_BODIES = {
    "ok": "y[i] = alpha * x[i] + y[i];",
    # one element past the end of y: lands in the canary
    "out_of_bounds": "{ y[i] = alpha * x[i] + y[i]; if (i == {n} - 1) y[i + 1] = 0; }",
    # forgets y for the last element
    "wrong": "y[i] = (i == {n} - 1) ? alpha * x[i] : alpha * x[i] + y[i];",
    # leaves the tail unwritten: but y is inout, so the old value stays (wrong)
    "skip_tail": "if (i < {n} - 3) y[i] = alpha * x[i] + y[i];",
    # reads the element past the end of x: the canary's NaN reaches y
    "read_past_end": "y[i] = alpha * x[i == {n} - 1 ? i + 1 : i] + y[i];",
    # writes into its input
    "clobber_input": "{ y[i] = alpha * x[i] + y[i]; if (i == 0) ((float *)x)[3] = 7; }",
    "loop_forever": "{ volatile int spin = 1; while (spin) {} }",
    "segfault": "{ if (i == 0) *(volatile int *)0 = 1; y[i] = alpha * x[i] + y[i]; }",
    "abort": "{ if (i == 0) abort(); y[i] = 0; }",
}


def axpy(variant: str = "ok", n: int = 1000, dtype: str = "float32",
         entry: str | None = None) -> Program:
    k = kernel("axpy", n=n, dtype=dtype)
    entry = entry or unique(f"t_axpy_{variant}")
    body = AXPY_BODIES[variant].replace("{n}", str(n))
    source = AXPY.format(entry=entry, t=CTYPE[dtype], n=n, body=body)
    return Program(k, entry, source, signature(k))


MATMUL = """
#include <stdint.h>
void {entry}(const {t} *restrict A, const {t} *restrict B, {t} *restrict C) {{
    #pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < {m}; i++)
        for (int64_t j = 0; j < {n}; j++) {{
            {t} acc = 0;
            for (int64_t r = 0; r < {k}; r++)
                acc += A[i * {sa0} + r * {sa1}] * B[r * {sb0} + j * {sb1}];
            C[i * {sc0} + j * {sc1}] = acc;
        }}
}}
void {entry}_packed(void **args) {{
    {entry}((const {t} *)args[0], (const {t} *)args[1], ({t} *)args[2]);
}}
"""


def matmul(m: int = 8, n: int = 8, k: int = 5, stride_a: int = 1, transpose_a: int = 0,
           dtype: str = "float32", entry: str | None = None, skip_last_k: bool = False) -> Program:
    kern = kernel("matmul", m=m, n=n, k=k, stride_a=stride_a, transpose_a=transpose_a,
                  dtype=dtype)
    params = signature(kern)
    a, b, c = (p for p in params if p.kind == "array")
    entry = entry or unique("t_matmul")
    source = MATMUL.format(entry=entry, t=CTYPE[dtype], m=m, n=n,
                           k=k - 1 if skip_last_k else k,
                           sa0=a.strides[0], sa1=a.strides[1], sb0=b.strides[0],
                           sb1=b.strides[1], sc0=c.strides[0], sc1=c.strides[1])
    return Program(kern, entry, source, params)


COUNTER = """
#define _GNU_SOURCE
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <omp.h>

#define MAX_CALLS 4096
#define MAX_THREADS 64
int64_t t_calls = 0;
int64_t t_call_ns[MAX_CALLS];
int64_t t_tids[MAX_CALLS][MAX_THREADS];

void {entry}(float alpha, const float *restrict x, float *restrict y) {{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    int64_t c = t_calls;
    if (c < MAX_CALLS) t_call_ns[c] = (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
    #pragma omp parallel
    {{
        int id = omp_get_thread_num();
        if (c < MAX_CALLS && id < MAX_THREADS) t_tids[c][id] = (int64_t)syscall(SYS_gettid);
        #pragma omp for schedule(static)
        for (int64_t i = 0; i < {n}; i++) y[i] = alpha * x[i] + y[i];
    }}
    t_calls = c + 1;
}}
void {entry}_packed(void **args) {{
    {entry}(*(float *)args[0], (const float *)args[1], (float *)args[2]);
}}
"""


def counter(n: int = 1000) -> Program:
    """axpy that counts its calls and records when and on which threads each ran."""
    k = kernel("axpy", n=n)
    entry = unique("t_counter")
    return Program(k, entry, COUNTER.format(entry=entry, n=n), signature(k))


OOM = """
#include <stdint.h>
#include <stdlib.h>
void {entry}(float alpha, const float *restrict x, float *restrict y) {{
    volatile float *tmp = malloc((size_t)1 << 40);  /* 1 TiB: more than the worker may map */
    tmp[0] = alpha;  /* NULL: the usual fate of an unchecked malloc */
    for (int64_t i = 0; i < {n}; i++) y[i] = tmp[0] * x[i] + y[i];
    free((void *)tmp);
}}
void {entry}_packed(void **args) {{
    {entry}(*(float *)args[0], (const float *)args[1], (float *)args[2]);
}}
"""


def oom(n: int = 1000) -> Program:
    k = kernel("axpy", n=n)
    entry = unique("t_oom")
    return Program(k, entry, OOM.format(entry=entry, n=n), signature(k))


def broken() -> Program:
    """Does not compile."""
    k = kernel("axpy", n=16)
    entry = unique("t_broken")
    source = f"void {entry}(float alpha, const float *x, float *y) {{ y[0] = alpha * }}\n"
    return Program(k, entry, source, signature(k))


AXPY_DYNAMIC = """
#include <stdint.h>
void {entry}(int64_t n, float alpha, const float *restrict x, float *restrict y) {{
    #pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) y[i] = alpha * x[i] + y[i];
}}
void {entry}_packed(void **args) {{
    {entry}(*(int64_t *)args[0], *(float *)args[1], (const float *)args[2], (float *)args[3]);
}}
"""


def axpy_kernel_dynamic() -> Kernel:
    """axpy with its length known only at call time."""
    b = KernelBuilder("axpy", "float32")
    n = b.size("n")
    alpha = b.scalar("alpha")
    x = b.array("x", None, [n])
    y = b.array("y", None, [n], role="inout")
    i = b.dim("i", n, tiles=[(1, 4)])
    r = b.fma(alpha, b.load(x, [i]), b.load(y, [i]), dims=[i])
    b.store(y, [i], r)
    return b.build()


def axpy_dynamic(n: int) -> Program:
    k = axpy_kernel_dynamic()
    entry = unique("t_axpy_dyn")
    return Program(k, entry, AXPY_DYNAMIC.format(entry=entry), signature(k, {"n": n}),
                   sizes=(("n", n),))
