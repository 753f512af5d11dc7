"""The Python API: library kernels, their decision spaces, and tuning them."""

from __future__ import annotations

from collections.abc import Sequence

from partita.ir.kernel import Kernel
from partita.kernels import kernel
from partita.space.candidate import Space
from partita.targets import get as get_target
from partita.targets.cpu.machine import CpuCapabilities
from partita.tuning import GenericTuned, Tuned, load, tune, tune_generic, tune_suite


def space(k: Kernel, target: str = "cpu", cpu: CpuCapabilities | None = None,
          choice_order: str | Sequence[str] = "default") -> Space:
    """The decision space of kernel ``k`` on ``target`` (``cpu`` or ``gpu``).

    ``choice_order`` changes the order in which decisions are taken (see
    :meth:`~partita.space.decl.SpaceDef.reordered`): ``"default"`` (Beaugnon's thesis,
    section 6.1: layouts, sizes, kinds, memory spaces, order, prefetching), ``"reverse"``, or
    the choices to take first.
    """
    return get_target(target).space(k, choice_order, cpu)


__all__ = ["GenericTuned", "Tuned", "kernel", "load", "space", "tune", "tune_generic",
           "tune_suite"]
