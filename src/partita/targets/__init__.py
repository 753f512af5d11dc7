"""Targets: one folder each, with its capabilities (data), decision space, printer and runner,
and one :class:`~partita.targets.base.Target` object that tuning and the command line ask.

:func:`get` returns a target by name; :data:`TARGETS` lists the names.

The targets themselves (their printers, runners and models) are imported when first asked
for, not with this package: the layers they are built on (code generation, the models,
searches) read the decision values the targets' spaces declare, in
``partita.targets.<name>.space``, and importing one of those must not import the targets
that print with those layers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from partita.ir.kernel import Kernel
from partita.space.decl import SpaceDef, SpaceError
from partita.targets.cpu.machine import AVX2_REFERENCE, AVX512_REFERENCE, CpuCapabilities

if TYPE_CHECKING:
    from partita.targets.base import (
        FirstBatch,
        Runner,
        Sampling,
        Target,
        TargetUnavailable,
        UnsupportedKernel,
    )
    from partita.targets.cpu.target import kernel_itemsize

    REGISTRY: dict[str, Target]
    TARGETS: tuple[str, ...]

_LAZY = {
    "FirstBatch": "partita.targets.base", "Runner": "partita.targets.base",
    "Sampling": "partita.targets.base", "Target": "partita.targets.base",
    "TargetUnavailable": "partita.targets.base", "UnsupportedKernel": "partita.targets.base",
    "kernel_itemsize": "partita.targets.cpu.target",
}


def _registry() -> dict[str, Target]:
    """Every target, by name: a new one is added here."""
    from partita.targets.cpu.target import CPU
    from partita.targets.gpu.target import GPU
    return {t.name: t for t in (CPU, GPU)}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name == "REGISTRY":
        value = _registry()
    elif name == "TARGETS":
        value = tuple(__getattr__("REGISTRY"))
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # imported once: later lookups find the module attribute
    return value


class UnknownTarget(SpaceError):
    """A target name that is not in :data:`REGISTRY` (a ValueError)."""


def get(name: str) -> Target:
    """The target named ``name``; :class:`UnknownTarget` (a ValueError) naming the known ones
    otherwise."""
    registry: dict[str, Target] = globals().get("REGISTRY") or __getattr__("REGISTRY")
    try:
        return registry[name]
    except (KeyError, TypeError):
        raise UnknownTarget(f"unknown target {name!r} (targets: {', '.join(registry)})"
                            ) from None


def space_def(target: str, kernel: Kernel, cpu: CpuCapabilities | None = None) -> SpaceDef:
    """The decision space of ``target`` for ``kernel``'s element type."""
    return get(target).space_def(kernel, cpu)


__all__ = [
    "AVX2_REFERENCE", "AVX512_REFERENCE", "REGISTRY", "TARGETS", "FirstBatch", "Runner",
    "Sampling", "Target", "TargetUnavailable", "UnknownTarget", "UnsupportedKernel", "get",
    "kernel_itemsize", "space_def",
]
