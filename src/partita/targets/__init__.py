"""Targets: one folder each, with its capabilities (data), decision space, printer and runner,
and one :class:`~partita.targets.base.Target` object that tuning and the command line ask.

:func:`get` returns a target by name; :data:`TARGETS` lists the names.
"""

from __future__ import annotations

from partita.ir.kernel import Kernel
from partita.space.decl import SpaceDef, SpaceError
from partita.targets.base import FirstBatch, Runner, Sampling, Target, TargetUnavailable
from partita.targets.cpu.machine import AVX2_REFERENCE, AVX512_REFERENCE, CpuCapabilities
from partita.targets.cpu.target import CPU, kernel_itemsize
from partita.targets.gpu.target import GPU

REGISTRY: dict[str, Target] = {t.name: t for t in (CPU, GPU)}
"""Every target, by name: a new one is added here."""

TARGETS = tuple(REGISTRY)


class UnknownTarget(SpaceError):
    """A target name that is not in :data:`REGISTRY` (a ValueError)."""


def get(name: str) -> Target:
    """The target named ``name``; :class:`UnknownTarget` (a ValueError) naming the known ones
    otherwise."""
    try:
        return REGISTRY[name]
    except (KeyError, TypeError):
        raise UnknownTarget(f"unknown target {name!r} (targets: {', '.join(TARGETS)})"
                            ) from None


def space_def(target: str, kernel: Kernel, cpu: CpuCapabilities | None = None) -> SpaceDef:
    """The decision space of ``target`` for ``kernel``'s element type."""
    return get(target).space_def(kernel, cpu)


__all__ = [
    "AVX2_REFERENCE", "AVX512_REFERENCE", "REGISTRY", "TARGETS", "FirstBatch", "Runner",
    "Sampling", "Target", "TargetUnavailable", "UnknownTarget", "get", "kernel_itemsize",
    "space_def",
]
