"""The histogram: counts of integer bin indices, ``hist[x[i]] += 1``.

Written with the builder, since its update reads and writes the element of ``hist`` that the
data names (an indirect access, :class:`~partita.ir.operands.Access`): one nest clears the
bins, a second one walks ``x`` and adds 1 to the bin each element names. A bin index below 0
counts in bin 0 and one past the last bin in the last bin (the indirect access clamps), so the
result is ``np.bincount(np.clip(x, 0, bins - 1), minlength=bins)``: for ``x`` in
``[0, bins)``, numpy's ``np.bincount(x, minlength=bins)``. The counts have the kernel's
``dtype`` (exact up to 2**24 per bin in float32, 2**53 in float64).

Two iterations may update one bin: the scatter loop carries a dependence to itself and runs
in order unless each thread counts into private bins joined after the loop (see
:mod:`partita.targets.cpu.space`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from partita.ir.builder import KernelBuilder
from partita.ir.kernel import Kernel
from partita.kernels.registry import KernelSpec, ParamSpec, register
from partita.mdh.lower import default_tiles, divisible


def histogram(n: int, bins: int, dtype: str = "float32") -> Kernel:
    """Counts of the ``n`` int32 bin indices of ``x`` in ``bins`` bins (see the module
    docstring for indices outside ``[0, bins)``)."""
    b = KernelBuilder("histogram", dtype)
    size_n, size_bins = b.size("n", n), b.size("bins", bins)
    x = b.array("x", "int32", [size_n])
    hist = b.array("hist", None, [size_bins], role="out")
    # The bins start at 0.
    j = b.dim("j", size_bins, default_tiles(bins, False), divisible=divisible(bins))
    b.store(hist, [j], b.mov(0.0, dims=[j], name="zero"), name="clear")
    # Each element adds 1 to its bin: a load, an add and a store at the index it reads.
    i = b.dim("i", size_n, default_tiles(n, True), divisible=divisible(n))
    bin_of = b.load(x, [i], name="ld_x")
    count = b.load(hist, [bin_of], dims=[i], name="ld_bin")
    more = b.add(count, 1.0, dims=[i], name="count")
    b.store(hist, [bin_of], more, dims=[i], name="st_bin")
    return b.build()


def _histogram_ref(x: np.ndarray, bins: int) -> dict[str, np.ndarray]:
    return {"hist": np.bincount(np.clip(x, 0, bins - 1), minlength=bins).astype(np.float64)}


def _itemsize(dtype: str) -> int:
    return int(np.dtype(dtype).itemsize)


def _bytes(n: int, bins: int, dtype: str, **_: Any) -> int:
    # x once, the bins read and written once (their updates stay in cache between).
    return 4 * n + 2 * bins * _itemsize(dtype)


register(KernelSpec(
    "histogram", "hist = np.bincount(x, minlength=bins) for int32 bin indices x (indices "
    "outside [0, bins) count in the first or last bin)",
    (ParamSpec("n", "size", 1 << 20, "elements of x"),
     ParamSpec("bins", "size", 256, "bins of the histogram"),
     ParamSpec("dtype", "dtype", "float32", "type of the counts")),
    histogram, _histogram_ref,
    flops=lambda n, **_: n,  # one add per element
    bytes=_bytes,
    outputs=("hist",),
    reference_params=("bins",),
))
