"""Kernels whose arrays are updated in place: dependences through memory decide which
implementations are legal (:mod:`partita.ir.dependences`).

Sizes count the points a kernel computes; the arrays are larger by their borders (one
element for the recurrence, one ring for the stencils), so every size from 1 builds. The
numpy references are written independently of the kernel definitions, loop for loop where
the updates depend on one another, and run in float64.
"""

from __future__ import annotations

import numpy as np

from partita.ir.builder import KernelBuilder
from partita.ir.kernel import Array, Kernel, LogicalDim
from partita.ir.operands import Affine, Instruction
from partita.kernels.registry import KernelSpec, ParamSpec, register

ROWS = (1, 2, 4, 8)
COLS = (1, 2, 4, 8, 16)
STEPS = (1, 2, 4)


def prefix_sum(n: int, dtype: str = "float32") -> Kernel:
    """``x[i + 1] += x[i]`` for ``i`` in ``[0, n)``: the running sum of ``x``'s ``n + 1``
    elements, in place (a first-order recurrence)."""
    b = KernelBuilder("prefix_sum", dtype)
    size = b.size("n", n)
    x = b.array("x", None, [n + 1], role="inout")
    i = b.dim("i", size, tiles=[COLS], divisible=False)
    prev = b.load(x, [i], name="ld_prev")
    here = b.load(x, [Affine.of(i) + 1], name="ld_here")
    total = b.add(prev, here, dims=[i], name="sum")
    b.store(x, [Affine.of(i) + 1], total, name="st_x")
    return b.build()


def _neighbourhood(b: KernelBuilder, A: Array, dims: list[LogicalDim],
                   points: list[tuple[int, int]], scale: float, tag: str) -> Instruction:
    """``scale * sum(A[1 + i + di, 1 + j + dj])`` over ``dims = [t, i, j]``."""
    _, i, j = dims

    def load(n: int, di: int, dj: int) -> Instruction:
        return b.load(A, [Affine.of(i) + 1 + di, Affine.of(j) + 1 + dj], dims=dims,
                      name=f"ld_{tag}{n}")

    total = load(0, *points[0])
    for n, (di, dj) in enumerate(points[1:], start=1):
        total = b.add(total, load(n, di, dj), dims=dims, name=f"add_{tag}{n}")
    return b.mul(total, scale, dims=dims, name=f"scale_{tag}")


NINE = [(di, dj) for di in (-1, 0, 1) for dj in (-1, 0, 1)]
FIVE = [(0, 0), (0, -1), (0, 1), (1, 0), (-1, 0)]


def seidel_2d(n: int, steps: int = 2, dtype: str = "float64") -> Kernel:
    """Gauss-Seidel in place (PolyBench seidel-2d): ``steps`` sweeps of
    ``A[i][j] = (sum of the 3x3 neighbourhood) / 9`` over the ``n x n`` interior of the
    ``(n + 2) x (n + 2)`` array, each point reading its updated upper and left neighbours."""
    b = KernelBuilder("seidel_2d", dtype)
    size, steps_ = b.size("n", n), b.size("steps", steps)
    A = b.array("A", None, [n + 2, n + 2], role="inout")
    t = b.dim("t", steps_)
    i = b.dim("i", size, tiles=[ROWS], divisible=False)
    j = b.dim("j", size, tiles=[COLS], divisible=False)
    value = _neighbourhood(b, A, [t, i, j], NINE, 1.0 / 9.0, "a")
    b.store(A, [Affine.of(i) + 1, Affine.of(j) + 1], value, dims=[t, i, j], name="st_a")
    return b.build()


def jacobi_2d(n: int, steps: int = 2, dtype: str = "float32") -> Kernel:
    """Jacobi with a time loop (PolyBench jacobi-2d): each of ``steps`` steps computes
    ``B = 0.2 * (5-point sum of A)`` over the ``n x n`` interior, then the same of ``B`` back
    into ``A``; the borders of both arrays are never written."""
    b = KernelBuilder("jacobi_2d", dtype)
    size, steps_ = b.size("n", n), b.size("steps", steps)
    A = b.array("A", None, [n + 2, n + 2], role="inout")
    B = b.array("B", None, [n + 2, n + 2], role="inout")
    t = b.dim("t", steps_)
    for tag, src, dst in (("b", A, B), ("a", B, A)):
        i = b.dim(f"i_{tag}", size, tiles=[ROWS, COLS], divisible=False)
        j = b.dim(f"j_{tag}", size, tiles=[COLS, (1, 4, 8, 16)], divisible=False)
        value = _neighbourhood(b, src, [t, i, j], FIVE, 0.2, tag)
        b.store(dst, [Affine.of(i) + 1, Affine.of(j) + 1], value, dims=[t, i, j],
                name=f"st_{tag}")
    return b.build()


def _prefix_sum_ref(x: np.ndarray) -> dict[str, np.ndarray]:
    return {"x": np.cumsum(x)}


def _seidel_ref(A: np.ndarray, *, steps: int) -> dict[str, np.ndarray]:
    A = A.copy()
    n = A.shape[0] - 2
    for _ in range(steps):
        for i in range(1, n + 1):
            for j in range(1, n + 1):
                A[i, j] = A[i - 1:i + 2, j - 1:j + 2].sum() / 9.0
    return {"A": A}


def _jacobi_ref(A: np.ndarray, B: np.ndarray, *, steps: int) -> dict[str, np.ndarray]:
    A, B = A.copy(), B.copy()

    def sweep(src: np.ndarray, dst: np.ndarray) -> None:
        dst[1:-1, 1:-1] = 0.2 * (src[1:-1, 1:-1] + src[1:-1, :-2] + src[1:-1, 2:]
                                 + src[2:, 1:-1] + src[:-2, 1:-1])

    for _ in range(steps):
        sweep(A, B)
        sweep(B, A)
    return {"A": A, "B": B}


SIZE = "size"
DTYPE32 = ParamSpec("dtype", "dtype", "float32", "element type")
DTYPE64 = ParamSpec("dtype", "dtype", "float64", "element type")
STEPS_PARAM = ParamSpec("steps", SIZE, 2, "time steps (sweeps)")

register(KernelSpec(
    "prefix_sum", "x[i + 1] += x[i]: the running sum of x in place (a recurrence)",
    (ParamSpec("n", SIZE, 1 << 16, "additions (x has n + 1 elements)"), DTYPE32),
    prefix_sum, _prefix_sum_ref,
    flops=lambda n, **_: n,
    bytes=lambda n, dtype: 2 * (n + 1) * np.dtype(dtype).itemsize,
    outputs=("x",),
))

register(KernelSpec(
    "seidel_2d", "Gauss-Seidel 9-point sweeps of A's n x n interior, in place",
    (ParamSpec("n", SIZE, 1000, "interior points per side (A is (n + 2)^2)"), STEPS_PARAM,
     DTYPE64),
    seidel_2d, _seidel_ref,
    flops=lambda n, steps, **_: 9 * n * n * steps,
    bytes=lambda n, dtype, **_: 2 * (n + 2) ** 2 * np.dtype(dtype).itemsize,
    outputs=("A",),
    reference_params=("steps",),
    baseline=False,  # Python loops: no numpy routine computes Gauss-Seidel
))

register(KernelSpec(
    "jacobi_2d", "Jacobi 5-point steps A -> B -> A over an n x n interior",
    (ParamSpec("n", SIZE, 1000, "interior points per side (A, B are (n + 2)^2)"),
     STEPS_PARAM, DTYPE32),
    jacobi_2d, _jacobi_ref,
    flops=lambda n, steps, **_: 10 * n * n * steps,
    bytes=lambda n, dtype, **_: 4 * (n + 2) ** 2 * np.dtype(dtype).itemsize,
    outputs=("A", "B"),
    reference_params=("steps",),
))
