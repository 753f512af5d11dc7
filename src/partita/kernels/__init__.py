"""The kernel library: builders with numpy references, flop and byte counts, default sizes."""

from partita.kernels import families, histogram, linalg, polybench, stencils
from partita.kernels.registry import KernelSpec, ParamSpec, get_spec, kernel, list_kernels

__all__ = ["KernelSpec", "ParamSpec", "families", "get_spec", "histogram", "kernel", "linalg",
           "list_kernels", "polybench", "stencils"]
