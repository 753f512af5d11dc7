"""The numpy baseline a tuned kernel is compared with, and a kernel's speed in GFLOP/s and GB/s."""

from __future__ import annotations

import time

import numpy as np

from partita.codegen.program import signature
from partita.ir.kernel import Kernel
from partita.kernels.registry import get_spec, library_name, library_reference
from partita.runtime.data import exact_inputs, generate_inputs, note_blas_call, view
from partita.tuning.tuned import kernel_params


def numpy_time(kernel: Kernel, seed: int = 0, reps: int = 7,
               min_s: float = 0.5, flush_bytes: int = 0) -> float | None:
    """Median time of the kernel's numpy reference on the same inputs (library kernels):
    at least ``reps`` calls and ``min_s`` seconds of them (timed calls only). OpenBLAS runs
    even small products on every core, so while anything else runs a call waits for a
    scheduler slice (a 256x256x32 product measured 12 ms instead of 0.08 ms over 7 calls);
    over half a second of calls, a short disturbance stays a minority and the median ignores
    it. With ``flush_bytes``, a buffer of that size is written before every call, outside the
    timed interval, so every call starts from cold caches (as the harness's ``flush_cache``
    does for generated code)."""
    name = library_name(kernel)
    reference = library_reference(kernel)
    if name is None or reference is None or not get_spec(name).baseline:
        return None
    params = signature(kernel)
    values = generate_inputs(params, seed, exact_inputs(kernel))
    args = []
    for p in params:
        if p.kind == "scalar":
            args.append(values[p.name])
        elif p.kind == "array" and p.role in ("in", "inout"):
            args.append(view(values[p.name], p))
    flush = np.empty(flush_bytes, dtype=np.uint8) if flush_bytes > 0 else None
    reference(*args)  # warm-up (threads, caches)
    times: list[float] = []
    total = 0.0  # kept as it goes: summing the list each call is quadratic (a 1 us kernel
    # takes 10^5 calls to fill half a second; summed each time, 35 s instead of 0.5 s)
    while len(times) < reps or total < min_s:
        if flush is not None:
            flush.fill(len(times) & 0xFF)
        t0 = time.perf_counter()
        reference(*args)
        times.append(time.perf_counter() - t0)
        total += times[-1]
    note_blas_call()  # a kernel timed next waits for OpenBLAS's threads to fall asleep
    return float(np.median(times))


def kernel_rates(kernel: Kernel, t: float) -> tuple[float | None, float | None]:
    """(GFLOP/s, GB/s) of a library kernel run in ``t`` seconds."""
    name = library_name(kernel)
    if name is None or not t:
        return None, None
    spec = get_spec(name)
    given = kernel_params(kernel)
    params = spec.resolve({k: v for k, v in given.items() if k in spec.names(given)})
    return spec.flops(**params) / t / 1e9, spec.bytes(**params) / t / 1e9
