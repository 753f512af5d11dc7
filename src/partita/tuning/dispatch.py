"""The C dispatcher of a size-generic kernel, and the in-process runs that tune its thresholds.

A size-generic kernel is several versions of one kernel, each printed over dynamic sizes (its
tiles' remainders handled by the printer's versioned tiles), joined by one entry point that
takes the sizes with the arrays and chooses a version through a chain of branches (Munksgaard's
thesis, "Futhark", ch. 7)::

    if (P1 >= T1) V1(...); else if (P2 >= T2) V2(...); ... else Vn+1(...);

Each branch compares its own property, a product of the kernel's sizes: the *work* (the
product of every size the kernel iterates over, ``m * n * k`` for a matmul), or another
product (``m``, ``m * n``, ``k``) where the training times say it separates the sizes its
version should take (:mod:`partita.tuning.chain` chooses the order and the properties). A
chain with no properties given compares the work at every branch.

While thresholds are tuned, the entry ``<entry>_tuning`` takes them as its first argument (an
array, ``INT64_MAX`` for an infinite threshold); the final entry has them as constants.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cffi
import numpy as np

from partita.codegen.program import (
    Param,
    c_parameters,
    packed_args,
    prototype,
    reduction_length,
    signature,
)
from partita.ir.kernel import Kernel
from partita.ir.types import DType
from partita.runtime.data import (
    abs_reference_bounds,
    find_reference,
    generate_inputs,
    kernel_unit_roundoff,
    run_reference,
    settle_blas,
    tolerance,
    view,
)

INT64_MAX = (1 << 63) - 1
"""An infinite threshold in C: no work reaches it."""


def work_names(kernel: Kernel) -> list[str]:
    """The sizes whose product is the work: those some dimension iterates over (a
    convolution's iteration count ``n * p * q * k * r * s * c``, not its image's rows and
    columns, which only shape an array)."""
    iterated = {d.size for d in kernel.logical_dims}
    return [s.name for s in kernel.sizes if s.name in iterated]


def work_expression(kernel: Kernel) -> str:
    """:func:`work` as a C expression of the entry's parameters (static sizes as numbers)."""
    return product_expression(kernel, work_names(kernel))


def product_expression(kernel: Kernel, names: Sequence[str]) -> str:
    """The product of the sizes ``names`` as a C expression of the entry's parameters
    (static sizes as numbers), in the kernel's order of sizes."""
    terms = [s.name if not s.is_static else str(s.value) for s in kernel.sizes
             if s.name in names]
    return " * ".join(terms) or "1"


def c_threshold(t: float) -> str:
    """A threshold as a C constant: ``INT64_MAX`` for infinity, never chosen."""
    if t == math.inf:
        return "INT64_MAX"
    return f"INT64_C({math.ceil(t)})"


def dispatcher_source(kernel: Kernel, entry: str, versions: Sequence[str],
                      thresholds: Sequence[float] | None = None,
                      properties: Sequence[Sequence[str]] | None = None) -> str:
    """The C source of the entry ``entry`` that chooses among the entries ``versions`` (all
    with the signature of ``kernel`` over dynamic sizes). With ``thresholds`` (one fewer than
    the versions), they are constants; without, the entry is ``<entry>_tuning`` and takes
    them as an ``int64_t`` array before the other parameters. ``properties[i]`` names the
    sizes whose product branch ``i`` compares (default: the work at every branch)."""
    params = signature(kernel)
    names = ", ".join(p.name for p in params)
    work_of = tuple(work_names(kernel))
    props = [tuple(p) for p in properties] if properties else [work_of] * (len(versions) - 1)
    if len(props) != max(len(versions) - 1, 0):
        raise ValueError(f"{len(props)} branch properties for {len(versions)} versions")
    lines = [f"/* partita: kernel {kernel.name} ({kernel.structural_hash}), size-generic entry: "
             f"{len(versions)} versions chosen by thresholds on "
             f"{'the work' if set(props) <= {work_of} else 'products of the sizes'}. */",
             "#include <stdint.h>", ""]
    lines += [prototype(v, params) + ";" for v in versions]
    lines.append("")
    tuning = thresholds is None
    name = f"{entry}_tuning" if tuning else entry
    decls = c_parameters(params)
    if tuning:
        decls.insert(0, "const int64_t *thresholds")
    lines += [f"void {name}({', '.join(decls)})", "{",
              f"    const int64_t work = (int64_t)({work_expression(kernel)});",
              "    (void)work;  /* unused with a single version */"]
    for i, v in enumerate(versions):
        if i == len(versions) - 1:
            lines.append(f"    {'else ' if i else ''}{v}({names});")
            break
        t = f"thresholds[{i}]" if tuning else c_threshold((thresholds or [])[i])
        p = ("work" if props[i] == work_of
             else f"(int64_t)({product_expression(kernel, props[i])})")
        lines.append(f"    {'else ' if i else ''}if ({p} >= {t}) {v}({names});")
    lines.append("}")
    if not tuning:
        lines += [f"void {entry}_packed(void **args)", "{",
                  f"    {entry}({', '.join(packed_args(params))});", "}"]
    return "\n".join(lines) + "\n"


_LIBRARIES: dict[tuple[str, str], tuple[cffi.FFI, Any, Any]] = {}
"""Libraries stay loaded for the life of the process (see :mod:`partita.runtime.call`)."""


def load_function(library: Path, entry: str, declaration: str) -> tuple[cffi.FFI, Any]:
    """The C function ``entry`` of ``library``, declared by ``declaration``."""
    key = (str(library), entry)
    if key not in _LIBRARIES:
        ffi = cffi.FFI()
        ffi.cdef(declaration + ";")
        lib = ffi.dlopen(str(library))
        _LIBRARIES[key] = (ffi, getattr(lib, entry), lib)
    ffi, fn, _ = _LIBRARIES[key]
    return ffi, fn


def declaration(entry: str, params: Sequence[Param], tuning: bool = False) -> str:
    """The prototype cffi is given for an entry (``restrict`` left out), with the thresholds'
    array first for a tuning entry."""
    decls = c_parameters(tuple(params), restrict="")
    if tuning:
        decls.insert(0, "const int64_t *thresholds")
    return f"void {entry}({', '.join(decls) or 'void'})"


@dataclass
class Dataset:
    """One size's inputs, expected outputs and tolerances, with the arguments (the sizes, the
    scalars, pointers to the buffers) that every version and the dispatcher take."""

    sizes: dict[str, int]
    params: tuple[Param, ...]
    """The signature of the kernel with these sizes (no size parameters: shapes concrete)."""
    buffers: dict[str, np.ndarray]
    scalars: dict[str, Any]
    expected: dict[str, np.ndarray]
    tolerance: dict[str, np.ndarray]

    @staticmethod
    def make(kernel: Kernel, static: Kernel, sizes: dict[str, int], seed: int = 0) -> Dataset:
        """The dataset of the dynamic ``kernel`` at ``sizes``; ``static`` is the kernel built
        with those sizes (its reference gives the expected outputs)."""
        params = signature(static)
        values = generate_inputs(params, seed)
        reference = find_reference(static)
        if reference is None:
            raise ValueError(f"kernel {kernel.name} has no reference to check versions with")
        expected = run_reference(reference, params, values)
        magnitude = (run_reference(reference, params, values, np.abs)
                     if abs_reference_bounds(static) else {})
        u, length = kernel_unit_roundoff(static), reduction_length(static)
        tol = {n: tolerance(e, magnitude.get(n), u, length) for n, e in expected.items()}
        buffers = {}
        for p in params:
            if p.kind != "array":
                continue
            if p.role in ("in", "inout"):
                buffers[p.name] = np.array(values[p.name])
            else:
                buffers[p.name] = np.zeros(max(p.footprint, 1), dtype=np.dtype(p.dtype))
        scalars = {p.name: values[p.name] for p in params if p.kind == "scalar"}
        return Dataset(dict(sizes), params, buffers, scalars, expected, tol)

    def arguments(self, ffi: cffi.FFI, kernel: Kernel) -> list[Any]:
        """The C arguments of the dynamic kernel's entry on this dataset (buffers in place)."""
        args: list[Any] = []
        for p in signature(kernel):
            if p.kind == "size":
                args.append(int(self.sizes[p.name]))
            elif p.kind == "scalar":
                args.append(self.scalars[p.name].item())
            else:
                ctype = f"{DType.parse(p.dtype).c_type} *"
                args.append(ffi.cast(ctype, self.buffers[p.name].ctypes.data))
        return args

    def errors(self) -> list[str]:
        """What the outputs written since :meth:`reset` get wrong (empty when right)."""
        wrong = []
        for p in self.params:
            if p.kind != "array" or p.name not in self.expected:
                continue
            got = view(self.buffers[p.name], p).astype(np.float64)
            bad = np.abs(got - self.expected[p.name]) > self.tolerance[p.name]
            bad |= ~np.isfinite(got)
            if bad.any():
                at = tuple(int(x) for x in np.argwhere(bad)[0])
                wrong.append(f"{p.name}{list(at)} = {got[at]:g}, expected "
                             f"{self.expected[p.name][at]:g} ({int(bad.sum())} elements wrong)")
        return wrong

    def run_checked(self, fn: Any, args: Sequence[Any], measure_s: float
                    ) -> tuple[list[str], float | None]:
        """``fn(*args)`` called once on outputs poisoned with NaN (:meth:`reset`) and checked:
        (what it gets wrong, its time per call where it gets nothing wrong, else None)."""
        self.reset()
        fn(*args)
        wrong = self.errors()
        return wrong, None if wrong else per_call(fn, args, measure_s)

    def reset(self) -> None:
        """Outputs poisoned with NaN, so an element a version fails to write is caught."""
        for p in self.params:
            if p.kind == "array" and p.role == "out":
                self.buffers[p.name].fill(np.nan)


def per_call(fn: Any, args: Sequence[Any], min_s: float = 0.05, min_calls: int = 5,
             warmups: int = 2) -> float:
    """The median time of ``fn(*args)`` over batches of calls after warm-up calls (the
    in-process measurement of ``bench/call_bench.py``), once OpenBLAS's threads are asleep
    if numpy ran just before (:func:`~partita.runtime.data.settle_blas`: a training size's
    reference is a float64 product, and a version timed while those threads spin shares the
    cores with them, at up to twice its time)."""
    settle_blas()
    for _ in range(warmups):
        fn(*args)
    t0 = time.perf_counter()
    fn(*args)
    one = max(time.perf_counter() - t0, 1e-7)
    batch = max(1, int(0.005 / one))
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_calls or time.perf_counter() - start < min_s:
        t0 = time.perf_counter()
        for _ in range(batch):
            fn(*args)
        times.append((time.perf_counter() - t0) / batch)
    return statistics.median(times)
