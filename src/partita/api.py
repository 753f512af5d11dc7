"""The Python API: library kernels and their decision spaces."""

from __future__ import annotations

from partita.ir.kernel import Kernel
from partita.kernels import kernel
from partita.space.candidate import Space
from partita.targets import space_def
from partita.targets.cpu.machine import CpuCapabilities


def space(k: Kernel, target: str = "cpu", cpu: CpuCapabilities | None = None) -> Space:
    """The decision space of kernel ``k`` on ``target`` (``cpu`` or ``gpu``)."""
    return Space(space_def(target, k, cpu), k)


__all__ = ["kernel", "space"]


from partita.tuning import Tuned, load, tune  # noqa: E402  (the layers above come first)

__all__ += ["Tuned", "load", "tune"]
