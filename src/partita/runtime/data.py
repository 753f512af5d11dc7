"""Inputs, reference outputs and error tolerances of a kernel, computed once per seed.

Every candidate implementation of a kernel is checked against the same data, so the parent
process generates it once per (kernel, sizes, parameters, seed) and stores it in ``.npy`` files
the worker maps from disk; no large array crosses the pipe per candidate.

Inputs. ``numpy.random.default_rng(seed)`` draws, in signature order, every scalar and then
every ``in``/``inout`` array's whole buffer (``footprint`` elements, including the gaps of a
strided view), uniformly in ``[-1, 1)`` for floating-point types (in float64 and rounded to the
element type, so float32 and float64 runs see nearly the same numbers) and in ``[-8, 8)`` for
integers.

Reference. The library kernel's numpy reference (or one the caller gives) runs in float64 on
the inputs widened from their element type (the very values the kernel reads), giving outputs
far more accurate than any float32 implementation. A kernel with neither is held to its own
sequential meaning, run by the interpreter of :mod:`partita.ir.interpret` in float64: every
candidate of every kernel is checked.

Tolerance. For output element ``i`` the check is ``|got_i - ref_i| <= tol_i`` with ::

    tol_i = LAMBDA * (u + u_ref) * sqrt(L + 2) * s_i + tiny

- ``u`` is the unit roundoff of the least precise floating-point type of the kernel
  (``2**-24`` for float32, ``2**-53`` for float64) and ``u_ref = 2**-53`` that of the float64
  reference, whose own error matters when the kernel is float64 too;
- ``L`` is :func:`partita.codegen.program.reduction_length`, the longest chain of accumulations
  into one output element; ``+ 2`` counts the rounding of the product and of the final store;
- ``s_i`` is the condition scale of the element: the reference evaluated on the absolute values
  of the inputs (``sum |a_k * b_k|`` for a dot product), or ``|ref_i|`` where larger;
- ``sqrt(L + 2) * u * s_i`` is the probabilistic rounding error bound of Higham and Mary
  (SIAM J. Sci. Comput. 41(5), 2019) for sums of products evaluated in any order: modelling
  rounding errors as independent and of mean zero, it fails for an element with probability
  below ``2 (L + 2) exp(-LAMBDA**2 / 2)``, about ``2.5e-14 (L + 2)`` with ``LAMBDA = 8``. The
  worst-case bound ``(L + 2) * u * s_i`` would grow with ``L`` instead of its square root and
  let real bugs in large reductions (a skipped remainder tile) pass unnoticed. A reduction
  split into ``t`` pieces (partial sums, or a reduction loop split across cores, whose private
  sums start at zero and are joined with the init at the end) rounds a term at most
  ``ceil(L / t) - 1`` times in its piece and ``t`` times in the join: never more than the
  ``L`` roundings of the sequential chain, so the same ``L`` (never a larger one) bounds
  every order.

The absolute-value evaluation bounds the error only when the kernel combines values with
``add``, ``mul``, ``fma``, ``max`` and non-negative constants. Otherwise (subtraction,
division, ``min``, negation, negative constants) ``s_i`` falls back to the largest ``|ref|``
of the output (a normwise scale). Integer outputs must match exactly. NaN or infinity in an
output never passes.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from partita.codegen.program import Param, Program, reduction_length
from partita.ir.interpret import sequential_reference
from partita.ir.kernel import Kernel
from partita.ir.operands import Const

LAMBDA = 8.0
"""Confidence multiplier of the probabilistic error bound (see the module docstring)."""

U_REF = 2.0 ** -53
"""Unit roundoff of the float64 reference."""

ABS_SAFE_OPS = frozenset({"load", "store", "mov", "cast", "add", "mul", "fma", "max"})
"""Operations for which evaluating on absolute values bounds the magnitude of every term."""

Reference = Callable[..., Mapping[str, Any]]


def unit_roundoff(dtype: Any) -> float:
    """Half the machine epsilon of a floating-point type; 0 for integers (exact results)."""
    dt = np.dtype(dtype)
    return float(np.finfo(dt).eps) / 2 if dt.kind == "f" else 0.0


def kernel_unit_roundoff(kernel: Kernel) -> float:
    """Unit roundoff of the least precise floating-point type the kernel computes or stores in."""
    dtypes = [a.dtype.value for a in kernel.arrays]
    dtypes += [s.dtype.value for s in kernel.scalars]
    dtypes += [i.dtype.value for i in kernel.instructions]
    return max((unit_roundoff(d) for d in dtypes), default=0.0)


def abs_reference_bounds(kernel: Kernel) -> bool:
    """Whether the reference on absolute values bounds each element's rounding error scale."""
    for inst in kernel.instructions:
        if inst.op not in ABS_SAFE_OPS:
            return False
        for op in inst.operands:
            if isinstance(op, Const) and op.value < 0:
                return False
    return True


def view(buffer: np.ndarray, param: Param) -> np.ndarray:
    """The logical array ``param`` describes inside its flat ``buffer`` (no copy)."""
    item = buffer.dtype.itemsize
    return np.lib.stride_tricks.as_strided(
        buffer, shape=param.shape, strides=tuple(s * item for s in param.strides),
        writeable=buffer.flags.writeable)


def exact_inputs(kernel: Kernel) -> bool:
    """Whether the kernel is checked on inputs of +-1, where it computes exactly.

    With values +-1, sums and products of a kernel that only adds, multiplies, takes maxima
    and uses integer constants are integers; while every partial sum stays below ``2**p`` (p
    the significand bits), any order of evaluation gives the exact result, so the check can
    demand equality and catches a single missing or repeated term, which no rounding-error
    tolerance can in a long reduction.
    """
    if not abs_reference_bounds(kernel):
        return False
    return all(float(op.value).is_integer() for inst in kernel.instructions
               for op in inst.operands if isinstance(op, Const))


def exact_limit(kernel: Kernel) -> float:
    """The largest integer every floating-point type of the kernel represents with its
    neighbours (``2**24`` for float32)."""
    dtypes = [a.dtype.value for a in kernel.arrays] + [i.dtype.value for i in kernel.instructions]
    bits = min((np.finfo(np.dtype(d)).nmant + 1 for d in dtypes if np.dtype(d).kind == "f"),
               default=53)
    return float(2 ** bits)


def _signs(rng: np.random.Generator, dtype: np.dtype, count: int | None,
           extent: int | None = None) -> Any:
    return (rng.integers(0, 2, count) * 2 - 1).astype(dtype)


def _uniform(rng: np.random.Generator, dtype: np.dtype, count: int | None,
             extent: int | None = None) -> Any:
    if dtype.kind == "f":
        values = rng.uniform(-1.0, 1.0, count).astype(dtype)
        # Rounding to a narrower type can turn values just below 1 into 1.
        return np.minimum(values, np.nextafter(dtype.type(1), dtype.type(0)))
    if extent is not None:
        # Indices spread over the axis they index, and two past each end to check the
        # clamping; the range -8..7 put half of 2^26 histogram elements in bin 0, past the
        # counts a float32 bin holds exactly (2^24).
        return rng.integers(-2, extent + 2, count).astype(dtype)
    return rng.integers(-8, 8, count).astype(dtype)


def generate_inputs(params: Sequence[Param], seed: int, exact: bool = False) -> dict[str, Any]:
    """Scalars (numpy scalars) and ``in``/``inout`` buffers (flat arrays of ``footprint``
    elements), drawn in signature order so the same seed always gives the same data; with
    ``exact``, floating-point values are +-1 (see :func:`exact_inputs`)."""
    rng = np.random.default_rng(seed)
    values: dict[str, Any] = {}
    for p in params:
        dt = np.dtype(p.dtype)
        draw = _signs if exact and dt.kind == "f" else _uniform
        if p.kind == "scalar":
            values[p.name] = dt.type(draw(rng, dt, 1)[0])
        elif p.kind == "array" and p.role in ("in", "inout"):
            values[p.name] = draw(rng, dt, p.footprint, p.index_extent)
    return values


def _wide(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.float64 if dtype.kind == "f" else np.int64)


BLAS_SETTLE_S = 0.25
"""How long OpenBLAS's threads may keep spinning after a call in this process (about 2^28
cycles), sharing the cores with a kernel timed meanwhile: timed right after a numpy product,
sgemm 256x256x32 measured 8.0 ms instead of 0.022 ms in 3 of 10 rounds, and in none of 5 after
a 0.15 s pause."""

_last_blas_call = -math.inf


def note_blas_call() -> None:
    """Record that numpy (OpenBLAS) just ran in this process; see :func:`settle_blas`."""
    global _last_blas_call
    _last_blas_call = time.monotonic()


def settle_blas() -> None:
    """Before a timing: wait until :data:`BLAS_SETTLE_S` has passed since numpy last ran in
    this process (references, numpy timings), so that its threads are asleep."""
    wait = _last_blas_call + BLAS_SETTLE_S - time.monotonic()
    if wait > 0:
        time.sleep(wait)


def run_reference(reference: Reference, params: Sequence[Param], values: Mapping[str, Any],
                  transform: Callable[[np.ndarray], np.ndarray] | None = None
                  ) -> dict[str, np.ndarray]:
    """Outputs of ``reference`` on the inputs widened to float64 (int64 for integers). A
    kernel timed next in this process waits for numpy's threads (:func:`settle_blas`)."""
    args: list[Any] = []
    for p in params:
        if p.kind == "scalar":
            x = np.asarray(values[p.name]).astype(_wide(np.dtype(p.dtype)))
            args.append((transform(x) if transform else x)[()])
        elif p.kind == "array" and p.role in ("in", "inout"):
            buf = np.asarray(values[p.name]).astype(_wide(np.dtype(p.dtype)))
            if transform:
                buf = transform(buf)
            args.append(view(buf, p))
    result = reference(*args)
    note_blas_call()
    out: dict[str, np.ndarray] = {}
    for p in params:
        if p.kind == "array" and p.role in ("out", "inout"):
            if p.name not in result:
                raise ValueError(f"the reference returned no value for output {p.name!r}")
            arr = np.asarray(result[p.name])
            if arr.shape != tuple(p.shape):
                raise ValueError(f"the reference's {p.name!r} has shape {arr.shape}, "
                                 f"expected {tuple(p.shape)}")
            out[p.name] = np.ascontiguousarray(arr, dtype=_wide(np.dtype(p.dtype)))
    return out


def tolerance(expected: np.ndarray, magnitude: np.ndarray | None, u: float,
              length: int) -> np.ndarray:
    """Per-element error bound (see the module docstring); zeros for exact (integer) types."""
    if u == 0.0 or expected.dtype.kind != "f":
        return np.zeros(expected.shape, dtype=np.float64)
    ref = np.abs(expected)
    if magnitude is not None:
        scale = np.maximum(np.abs(magnitude), ref)
    else:
        scale = np.full(expected.shape, float(ref.max()) if ref.size else 0.0)
    factor = LAMBDA * (u + U_REF) * math.sqrt(length + 2)
    return factor * scale + np.finfo(np.float64).tiny


def find_reference(kernel: Kernel) -> Reference | None:
    """The library reference of a kernel built by :func:`partita.kernels.kernel`, if any."""
    from partita.kernels.registry import library_reference

    return library_reference(kernel)


@dataclass
class Case:
    """Data of one (kernel, sizes, parameters, seed) stored in ``directory``.

    ``inputs`` maps ``in``/``inout`` arrays to ``.npy`` files of their whole buffers;
    ``expected`` and ``tolerance`` map output arrays to ``.npy`` files shaped like the logical
    array. ``reference`` says what computed the expected outputs (:data:`REFERENCE_KINDS`).
    """

    directory: Path
    seed: int
    sizes: dict[str, int]
    scalars: dict[str, Any]
    inputs: dict[str, str]
    expected: dict[str, str] = field(default_factory=dict)
    tolerance: dict[str, str] = field(default_factory=dict)
    reference: str = "numpy"


REFERENCE_KINDS = ("numpy", "given", "sequential semantics")
"""What expected outputs come from: the library's numpy reference, one the caller gave, or
the kernel's own sequential meaning (:func:`partita.ir.interpret.sequential_reference`)."""


def reference_kind(kernel: Kernel, given: Reference | None = None) -> str:
    """Which of :data:`REFERENCE_KINDS` checks the candidates of ``kernel``."""
    if given is not None:
        return "given"
    return "numpy" if find_reference(kernel) is not None else "sequential semantics"


class TooLarge(ValueError):
    """The kernel's data cannot fit this machine's memory; the message says how much."""


def available_memory() -> int:
    """Bytes this machine can still give (MemAvailable), else its physical memory."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


DATA_COPIES = 4
"""Copies of the kernel's arrays a check needs at once: the inputs, the worker's buffers, and
the float64 reference with its tolerances (twice the float32 bytes)."""


def check_memory(kernel: Kernel, sizes: Mapping[str, int] | None = None) -> int:
    """The bytes of the kernel's arrays; :class:`TooLarge` before anything is allocated when
    :data:`DATA_COPIES` of them exceed the memory this machine has available."""
    values = {s.name: s.value for s in kernel.sizes if s.value is not None} | dict(sizes or {})
    parts = {a.name: a.footprint(values) * a.dtype.itemsize
             for a in kernel.arrays if not a.is_temporary}
    total = sum(parts.values())
    have = available_memory()
    if DATA_COPIES * total > have:
        biggest = ", ".join(f"{n} {b / 2**30:.3g} GiB" for n, b in
                            sorted(parts.items(), key=lambda kv: -kv[1])[:3])
        raise TooLarge(f"kernel {kernel.name!r}: its arrays take {total / 2**30:.3g} GiB "
                       f"({biggest}), and checking a candidate needs about {DATA_COPIES} "
                       f"copies; this machine has {have / 2**30:.3g} GiB available")
    return total


def case_key(program: Program, seed: int) -> tuple[Any, ...]:
    """Programs of one kernel with the same sizes and parameters share a case."""
    return (program.kernel.structural_hash, tuple(sorted(program.sizes)), program.params, seed)


def make_case(program: Program, seed: int, directory: Path,
              reference: Reference | None = None) -> Case:
    """Generate inputs, compute expected outputs and tolerances, and store them."""
    params = program.params
    sizes = dict(program.sizes)
    for p in params:
        if p.kind == "size" and p.name not in sizes:
            raise ValueError(f"program {program.entry!r}: no value for dynamic size {p.name!r}")
        if p.kind == "array" and (len(p.shape) != len(p.strides)
                                  or (not p.shape and not p.footprint)):
            raise ValueError(f"program {program.entry!r}: array {p.name!r} has no concrete "
                             "shape (give the dynamic sizes to signature())")
    check_memory(program.kernel, sizes)
    directory.mkdir(parents=True, exist_ok=True)
    exact = exact_inputs(program.kernel)
    values = generate_inputs(params, seed, exact)
    case = Case(directory, seed, sizes,
                scalars={p.name: values[p.name].item() for p in params if p.kind == "scalar"},
                inputs={})
    for p in params:
        if p.kind == "array" and p.role in ("in", "inout"):
            path = directory / f"in_{p.name}.npy"
            np.save(path, values[p.name])
            case.inputs[p.name] = str(path)
    case.reference = reference_kind(program.kernel, reference)
    reference = (reference or find_reference(program.kernel)
                 or sequential_reference(program.kernel, sizes))
    expected = run_reference(reference, params, values)
    magnitude = (run_reference(reference, params, values, np.abs)
                 if abs_reference_bounds(program.kernel) else {})
    u = kernel_unit_roundoff(program.kernel)
    length = reduction_length(program.kernel, sizes)
    for name, exp in expected.items():
        tol = tolerance(exp, magnitude.get(name), u, length)
        mag = magnitude.get(name)
        if exact and mag is not None and float(np.max(mag, initial=0.0)) <= exact_limit(
                program.kernel):
            # Every partial sum is an integer below 2**p: any evaluation order is exact.
            tol = np.zeros_like(tol)
        exp_path, tol_path = directory / f"exp_{name}.npy", directory / f"tol_{name}.npy"
        np.save(exp_path, exp)
        np.save(tol_path, tol)
        case.expected[name] = str(exp_path)
        case.tolerance[name] = str(tol_path)
    return case
