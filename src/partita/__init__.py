"""partita: fast code for data-parallel kernels, found by searching spaces of partially
specified implementations.

The names below are imported on first use (PEP 562), not with the package: every process
that runs a part of partita (the sandboxed worker that times kernels, a cluster's workers,
each ``partita`` command) imports ``partita`` first, and most of them need none of the
search, the records or the printers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from partita.lazy import exports

if TYPE_CHECKING:
    from partita.api import (
        GenericTuned,
        Tuned,
        kernel,
        load,
        space,
        tune,
        tune_generic,
        tune_suite,
    )
    from partita.ir.builder import KernelBuilder
    from partita.ir.kernel import Kernel
    from partita.ir.types import DType, KernelError
    from partita.runtime.arrays import aligned_copy, empty
    from partita.space.candidate import Candidate, DeadEnd, Decision, Space

__version__ = "0.1.0"

_HOMES = {
    "partita.api": ("GenericTuned", "Tuned", "kernel", "load", "space", "tune", "tune_generic",
                    "tune_suite"),
    "partita.ir.builder": ("KernelBuilder",),
    "partita.ir.kernel": ("Kernel",),
    "partita.ir.types": ("DType", "KernelError"),
    "partita.runtime.arrays": ("aligned_copy", "empty"),
    "partita.space.candidate": ("Candidate", "DeadEnd", "Decision", "Space"),
}

__all__ = [
    "Candidate", "DType", "DeadEnd", "Decision", "GenericTuned", "Kernel", "KernelBuilder",
    "KernelError", "Space", "Tuned", "aligned_copy", "empty", "kernel", "load", "space", "tune",
    "tune_generic", "tune_suite",
]

__getattr__, __dir__ = exports(__name__, _HOMES, globals())

# ``partita.space`` is the function, and a subpackage's first import binds its name on the
# package: the subpackage is imported here, before anything else can, and its binding
# dropped, so that the name reaches ``__getattr__``.
importlib.import_module("partita.space")
del globals()["space"]
