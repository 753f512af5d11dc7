"""The layouts of a space, shared by every space of one definition and kernel in a process.

A :class:`~partita.space.candidate.Space` compiles a layout (a
:class:`~partita.space.compiler.CompiledSpace` and its C engine's program) for each backbone
its descents reach, tens of milliseconds each, and most of the time a descent takes. Two
spaces of the same sealed definition (:meth:`~partita.space.decl.SpaceDef.seal`: the
targets build one per machine and element size) and of equal kernels compile the same
layouts: a tune after another of the same kernel, the replay of a tuned kernel's decisions,
the versions of a size-generic kernel replayed on one dynamic space. They share them here:
a layout depends on nothing but its definition and backbone (and on whether the C engine
runs, which ``PARTITA_NATIVE`` decides), and is never changed once compiled, only read.

A layout takes 1-4 MB (its tables and its program), so what spaces no longer use is kept
within :data:`SHARED_LAYOUTS` layouts, the most recently used definitions and kernels first. A
definition that is not sealed (one built by hand, which may still change) shares nothing.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from partita import config
from partita.ir.kernel import Kernel
from partita.space.compiler import CompiledSpace
from partita.space.decl import SpaceDef
from partita.space.facts import StaticFacts

if TYPE_CHECKING:
    from partita.space.candidate import Candidate, DeadEnd

Lowered = frozenset[tuple[str, tuple[str, ...]]]

SHARED_LAYOUTS = 64
"""Layouts kept over the definitions and kernels used last (the last one's all kept)."""


@dataclass
class Layouts:
    """What a space compiles as its descents reach new backbones."""

    sdef: SpaceDef
    """Kept so that its identity, part of the key, is not reused while shared."""
    kernel: Kernel
    """The kernel of the first of these spaces, which the lowering steps start from (the
    others' kernels equal it)."""
    compiled: dict[Lowered, CompiledSpace] = field(default_factory=dict)
    """The layout of each set of fired triggers."""
    by_backbone: dict[str, CompiledSpace] = field(default_factory=dict)
    """The layout of each backbone (sets that lower to one backbone share it)."""
    steps: dict[tuple[int, str, tuple[str, ...]], tuple[Kernel, Kernel]] = \
        field(default_factory=dict)
    """Each lowering step's (input kernel, result), by the input's identity."""
    kernels: dict[str, Kernel] = field(default_factory=dict)
    """One kernel per structural hash, so that equal results of two steps are one object."""
    facts: StaticFacts = field(default_factory=StaticFacts)
    """Static predicates' values, shared by the layouts."""
    root: Candidate | DeadEnd | None = None
    """The root candidate (or its dead end) once propagated, None before."""


_SHARED: OrderedDict[tuple[int, Kernel, bool], Layouts] = OrderedDict()
_LOCK = threading.Lock()


def layouts_of(sdef: SpaceDef, kernel: Kernel) -> Layouts:
    """The layouts of the spaces of ``sdef`` on ``kernel``: shared where ``sdef`` is sealed,
    a space's own otherwise."""
    if not sdef.sealed:
        return Layouts(sdef, kernel)
    key = (id(sdef), kernel, config.native_engine())
    with _LOCK:
        found = _SHARED.get(key)
        if found is None:
            found = _SHARED[key] = Layouts(sdef, kernel)
        else:
            _SHARED.move_to_end(key)
        held = sum(len(layouts.by_backbone) for layouts in _SHARED.values())
        while len(_SHARED) > 1 and held > SHARED_LAYOUTS:
            _, dropped = _SHARED.popitem(last=False)
            held -= len(dropped.by_backbone)
    return found


def forget_shared() -> None:
    """Drop every shared layout (the next spaces compile theirs again)."""
    with _LOCK:
        _SHARED.clear()
