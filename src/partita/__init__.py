"""partita: fast code for data-parallel kernels, found by searching spaces of partially
specified implementations."""

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

__all__ = [
    "Candidate", "DType", "DeadEnd", "Decision", "GenericTuned", "Kernel", "KernelBuilder",
    "KernelError", "Space", "Tuned", "aligned_copy", "empty", "kernel", "load", "space", "tune",
    "tune_generic", "tune_suite",
]
