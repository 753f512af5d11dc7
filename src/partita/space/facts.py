"""Static facts of one space: what its static predicates say of objects, shared by layouts.

A static condition of a constraint (``Static(predicate, a, b)``) is a fact about the
kernel's objects, not about decisions. The layouts of one space (one per set of fired
triggers) only add objects and never change what holds of the others (a test checks it on
every space), so a fact is computed once per space and each layout's tables are read from
the facts already known.

The C engine reads a two-object condition as a table of flags over every pair of the
layout's objects. Asked pair by pair, the tables of one layout take tens of thousands of
lookups (a few hundred objects, a few dozen predicate and set pairs), and a descent compiles
a layout at nearly every trigger it fires: that was the largest cost of compiling a layout.
:meth:`StaticFacts.pair_flags` keeps, per predicate, a matrix of the values known over every
object name the space has met, evaluates only the pairs never asked before, and cuts a
layout's table out of it in one step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from partita.ir.kernel import Kernel

UNKNOWN, FALSE, TRUE = 0, 1, 2


class StaticFacts:
    """Static predicates' values by object names, for every layout of one space."""

    def __init__(self) -> None:
        self.values: dict[Callable[..., Any], dict[tuple[str, ...], Any]] = {}
        """``predicate -> objects -> value``, as the predicate returned it. Keyed by
        predicate first: a key that held the predicate (a function) would stay tracked by the
        cyclic garbage collector, tens of thousands of them per kernel."""
        self.initial_domains: dict[tuple[str, tuple[str, ...]], int] = {}
        """``(enum, objects) -> domain``: the values whose requirements (static facts) hold,
        which every layout's instance on those objects starts from."""
        self._index: dict[str, int] = {}
        """Every object name met, numbered in the order met."""
        self._known: dict[Callable[..., Any], np.ndarray] = {}
        """Per predicate on two objects: ``UNKNOWN``, ``FALSE`` or ``TRUE`` per pair of
        names' numbers (the truth of the value; a matrix grown as names are met)."""

    def value(self, kernel: Kernel, predicate: Callable[..., Any], *objs: str) -> Any:
        known = self.values.get(predicate)
        if known is None:
            known = self.values[predicate] = {}
        try:
            return known[objs]
        except KeyError:
            found = known[objs] = predicate(kernel, *objs)
            return found

    def pair_flags(self, kernel: Kernel, predicate: Callable[..., Any],
                   objects: Sequence[str], first: Sequence[int], second: Sequence[int]
                   ) -> np.ndarray:
        """``flags[i, j]``: the predicate holds of ``objects[i]`` and ``objects[j]``, for
        ``i`` in ``first`` and ``j != i`` in ``second`` (False elsewhere), as a boolean
        matrix over the layout's objects."""
        n = len(objects)
        flags = np.zeros((n, n), dtype=bool)
        if not first or not second:
            return flags
        number = self._numbers(objects)
        rows, cols = np.asarray(first, dtype=np.intp), np.asarray(second, dtype=np.intp)
        known = self._matrix(predicate)
        block = known[np.ix_(number[rows], number[cols])]
        for r, c in np.argwhere(block == UNKNOWN).tolist():
            i, j = int(rows[r]), int(cols[c])
            if i != j:
                truth = bool(self.value(kernel, predicate, objects[i], objects[j]))
                block[r, c] = known[number[i], number[j]] = TRUE if truth else FALSE
        flags[np.ix_(rows, cols)] = block == TRUE
        flags[np.arange(n), np.arange(n)] = False  # a pair of one object is no pair
        return flags

    def _numbers(self, objects: Sequence[str]) -> np.ndarray:
        index = self._index
        for name in objects:
            if name not in index:
                index[name] = len(index)
        return np.fromiter((index[name] for name in objects), dtype=np.intp,
                           count=len(objects))

    def _matrix(self, predicate: Callable[..., Any]) -> np.ndarray:
        """The predicate's matrix, grown to every name met (new rows and columns unknown)."""
        size = len(self._index)
        known = self._known.get(predicate)
        if known is None or known.shape[0] < size:
            grown = np.full((max(size, 64, 2 * (0 if known is None else known.shape[0])),) * 2,
                            UNKNOWN, dtype=np.int8)
            if known is not None:
                grown[:known.shape[0], :known.shape[1]] = known
            known = self._known[predicate] = grown
        return known


def pack_flags(flags: np.ndarray) -> list[int]:
    """Flags (any shape, read row-major) 64 a word, flag ``i`` at bit ``i % 64`` of word
    ``i // 64``, as signed 64-bit words: how the C engine reads static tables."""
    packed = np.packbits(flags.ravel(), bitorder="little")
    padded = np.zeros(-(-packed.size // 8) * 8, dtype=np.uint8)
    padded[:packed.size] = packed
    words: list[int] = padded.view("<i8").tolist()
    return words
