"""The Python API: library kernels and their decision spaces."""

from __future__ import annotations

from collections.abc import Sequence

from partita.ir.kernel import Kernel
from partita.kernels import kernel
from partita.space.candidate import Space
from partita.targets import space_def
from partita.targets.cpu.machine import CpuCapabilities


def space(k: Kernel, target: str = "cpu", cpu: CpuCapabilities | None = None,
          choice_order: str | Sequence[str] = "default") -> Space:
    """The decision space of kernel ``k`` on ``target`` (``cpu`` or ``gpu``).

    ``choice_order`` changes the order in which decisions are taken (see
    :meth:`~partita.space.decl.SpaceDef.reordered`): ``"default"`` (source 000 §6.1: layouts,
    sizes, kinds, memory spaces, order, prefetching), ``"reverse"``, or the choices to take first.
    """
    return Space(space_def(target, k, cpu).reordered(choice_order), k)


__all__ = ["kernel", "space"]


from partita.tuning import Tuned, load, tune  # noqa: E402  (the layers above come first)

__all__ += ["Tuned", "load", "tune"]
