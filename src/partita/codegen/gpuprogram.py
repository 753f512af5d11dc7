"""A printed GPU kernel and how to launch it: grid, block, workspace buffers, memory."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from partita.codegen.program import Program

GridSize = int | str
"""A grid extent: a number, or a C expression of the dynamic sizes."""


@dataclass(frozen=True)
class Workspace:
    """A device buffer a ``GLOBAL`` temporary needs: ``elements`` items of ``dtype``."""

    name: str
    dtype: str
    elements: int | str


@dataclass(frozen=True)
class GpuProgram(Program):
    """A CUDA or OpenCL kernel and how to launch it.

    The kernel's parameters are :attr:`params` (as for C programs: dynamic sizes as 64-bit
    integers, scalars by value, arrays as pointers to their buffers), followed by one pointer
    per :attr:`workspace` buffer. ``grid`` and ``block`` are the numbers of blocks and of
    threads per block along x, y and z (OpenCL: work-groups and work-items per group).
    ``dynamic_shared_bytes`` is the dynamic shared memory a CUDA launch must request.
    """

    grid: tuple[GridSize, GridSize, GridSize] = (1, 1, 1)
    block: tuple[int, int, int] = (1, 1, 1)
    workspace: tuple[Workspace, ...] = ()
    shared_bytes: int = 0
    dynamic_shared_bytes: int = 0
    private_bytes: int = 0
    """Per thread, the arrays of ``REGISTER`` temporaries (local memory where an index is
    not a constant)."""
    hardware: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Which dimensions each hardware index implements: (``threadIdx.x``, dims), ..."""

    def launch(self, sizes: dict[str, int] | None = None
               ) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """Concrete (grid, block), the dynamic sizes taken from ``sizes`` or :attr:`sizes`."""
        values = dict(self.sizes) | (sizes or {})
        grid = tuple(_evaluate(g, values) for g in self.grid)
        return (grid[0], grid[1], grid[2]), self.block

    def workspace_elements(self, sizes: dict[str, int] | None = None) -> list[int]:
        """Elements of each workspace buffer, in parameter order."""
        values = dict(self.sizes) | (sizes or {})
        return [_evaluate(w.elements, values) for w in self.workspace]

    @property
    def threads_per_block(self) -> int:
        return math.prod(self.block)


def _evaluate(expr: int | str, sizes: dict[str, int]) -> int:
    """The value of a size expression the printer produced (integers, names, + * / ())."""
    if isinstance(expr, int):
        return expr
    text = str(expr)
    if not re.fullmatch(r"[A-Za-z0-9_+*/() ]*", text):
        raise ValueError(f"not a size expression: {text!r}")
    try:
        return int(eval(text.replace("/", "//"), {"__builtins__": {}}, dict(sizes)))
    except NameError as exc:
        raise ValueError(f"no value for a dynamic size in {text!r}: {exc}") from None
