"""Targets: capabilities (data) and the decision space each one offers."""

from __future__ import annotations

from partita.ir.kernel import Kernel
from partita.space.decl import SpaceDef, SpaceError
from partita.targets.cpu.machine import (
    AVX2_REFERENCE,
    AVX512_REFERENCE,
    CpuCapabilities,
    host,
)
from partita.targets.cpu.space import cpu_space
from partita.targets.gpu.device import H100
from partita.targets.gpu.space import gpu_space

TARGETS = ("cpu", "gpu")


def kernel_itemsize(kernel: Kernel) -> int:
    """The widest element type of a kernel's arrays (it sets the vector lanes)."""
    return max((a.dtype.itemsize for a in kernel.arrays), default=4)


def space_def(target: str, kernel: Kernel, cpu: CpuCapabilities | None = None) -> SpaceDef:
    """The decision space of ``target`` for ``kernel``'s element type."""
    if target == "cpu":
        return cpu_space(cpu or host(), kernel_itemsize(kernel))
    if target == "gpu":
        return gpu_space(H100)
    raise SpaceError(f"unknown target {target!r} (targets: {', '.join(TARGETS)})")


__all__ = ["AVX2_REFERENCE", "AVX512_REFERENCE", "TARGETS", "kernel_itemsize", "space_def"]
