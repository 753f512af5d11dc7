"""How a lowered plan prints the last, partial tile of a dimension whose tiles do not divide
its size: which tiles are guarded, which loops are versioned (a full-tile copy without
guards, a partial-tile copy with them), which loops stop at the size (the innermost tile) or
after their last iteration in range (a middle tile), and which instructions run past the end
on clamped indices. A part of :class:`~partita.codegen.lower.LoweredPlan`, apart for size."""

from __future__ import annotations

import math
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING

from partita.codegen.looptree import Node
from partita.ir.kernel import Kernel
from partita.ir.operands import Instruction, Reduce


class Remainders:
    """The remainder handling of a :class:`~partita.codegen.lower.LoweredPlan`."""

    k: Kernel
    sizes: dict[str, int | str]
    tree: Node
    loop_clamps: dict[int, frozenset[str]]
    loop_trims: dict[int, tuple[str, int, int]]

    if TYPE_CHECKING:  # defined by the plan
        def factor(self, logical: str) -> int: ...
        def extent(self, logical: str) -> int | str: ...
        def subtree(self, node: Node) -> list[Node]: ...
        def ancestors(self, node: Node) -> list[Node]: ...
        def iterates(self, inst: str, node: Node) -> bool: ...
        def insts_under(self, node: Node) -> list[str]: ...

    def needs_guard(self, logical: str, full_tiles: AbstractSet[str] = frozenset()) -> bool:
        """Whether the indices of ``logical`` may pass its end where the printer is: its
        tiles do not divide it, and it is not among the ``full_tiles`` (inside the
        full-tile version of its outermost tile loop)."""
        if logical in full_tiles:
            return False
        n = self.k.static_size(self.k.logical(logical).size)
        factor = self.factor(logical)
        return factor > 1 and (n is None or n % factor != 0)

    def versioned_tiles(self, loops: list[Node], full_tiles: AbstractSet[str] = frozenset()
                        ) -> list[tuple[str, str]]:
        """(tile dim, logical dim) of each outermost tile that ``loops`` carry of a logical
        dim that may run past its end: the body of those loops is printed twice, for the
        full tiles without that dim's guards and for the last, partial tile with them."""
        out = []
        for node in loops:
            for d in node.dims:
                dim = self.k.dim(d)
                if dim.level == 0 and self.needs_guard(dim.logical, full_tiles):
                    out.append((d, dim.logical))
        return out

    def _plan_loop_clamps(self) -> None:
        """Which loops stop at the size of their logical dims. The innermost tile loop of a
        dim with a remainder stops at the dim's size rather than guarding every instruction
        inside it (the remainder of a reduction tile would otherwise test the index before
        each FMA of the micro-kernel). Only where every dim of the loop is the innermost
        tile of a logical dim that may overflow, the fused dims share one bound, and every
        instruction inside iterates the loop (one that does not must still run every
        iteration)."""
        for node in self.subtree(self.tree):
            if node.inst is not None or not node.dims:
                continue
            stops = set()
            for d in node.dims:
                ld = self.k.dim(d).logical
                if self.k.dims_of(ld)[-1] != d or not self.needs_guard(ld):
                    break
                stops.add(self._stop(node, ld))
            else:
                if len(stops) == 1 and all(self.iterates(i, node)
                                           for i in self.insts_under(node)):
                    self.loop_clamps[id(node)] = frozenset(self.k.dim(d).logical
                                                           for d in node.dims)

    def _stop(self, node: Node, logical: str) -> tuple[object, ...]:
        """What the bound of ``logical`` at the first iteration of its innermost tile loop
        ``node`` is made of: its size less the index of its outer tiles, each term by the
        loop that binds it (none where it is bound to 0) and its stride. Fused dims share one
        bound where these are equal."""
        terms: list[tuple[object, ...]] = []
        stride = 1
        tiles = self.k.dims_of(logical)
        for d in reversed(tiles):
            if d != tiles[-1]:
                binder = next((a for a in self.ancestors(node) if d in a.dims), None)
                if binder is None:
                    terms.append(("unbound", d))
                elif self.sizes[binder.dims[0]] != 1:
                    terms.append((id(binder), stride))
            size = self.sizes[d]
            stride = stride * size if isinstance(size, int) else stride
        return (self.extent(logical), tuple(terms))

    def _plan_loop_trims(self) -> None:
        """Which loops over a middle tile of a dim with a remainder (neither its outermost
        tile, whose count comes from the size, nor its innermost, which
        :meth:`_plan_loop_clamps` stops at the size) stop after their last iteration with an
        index in range. Otherwise the last, partial tile runs as many iterations as a full
        one, computing values past the end that the guards then drop: a version over
        dynamic sizes whose tiles are large for the call (a 1536^3 winner called at 128^3)
        did many times the work of the call. Only where the loop's dims are tiles of one
        level with the same bound and every instruction inside iterates the loop (one that
        does not must run every iteration)."""
        for node in self.subtree(self.tree):
            if node.inst is not None or not node.dims or id(node) in self.loop_clamps:
                continue
            keys = {self._trim_key(node, d) for d in node.dims}
            if len(keys) != 1 or None in keys:
                continue
            if all(self.iterates(i, node) for i in self.insts_under(node)):
                (key,) = keys
                assert key is not None
                self.loop_trims[id(node)] = (self.k.dim(node.dims[0]).logical, key[2], key[1])

    def _trim_key(self, node: Node, d: str
                  ) -> tuple[int | str, int, int, tuple[int | None, ...]] | None:
        """What the trimmed bound of tile ``d`` in loop ``node`` is made of (its logical
        dim's size, its level, the indices one iteration covers, the loops binding the outer
        tiles), or None where it is not trimmed: not a middle tile of a dim with a
        remainder, a tile below it of dynamic size, an outer tile bound by no loop."""
        dim = self.k.dim(d)
        tiles = self.k.dims_of(dim.logical)
        level = tiles.index(d)
        if level in (0, len(tiles) - 1) or not self.needs_guard(dim.logical):
            return None
        inner = [self.sizes[t] for t in tiles[level + 1:]]
        if not all(isinstance(s, int) for s in inner):
            return None
        binders = [next((id(a) for a in self.ancestors(node) if t in a.dims), None)
                   for t in tiles[:level]]
        if None in binders:
            return None
        return (self.extent(dim.logical), level, math.prod(int(s) for s in inner),
                tuple(binders))

    def trimmed(self, node: Node, full_tiles: AbstractSet[str] = frozenset()
                ) -> tuple[str, int, int] | None:
        """(logical dim, indices per iteration, tile level) where the loop ``node`` stops
        after its last iteration in range, None where it runs its full count (inside the
        full-tile version of that dim it never overflows)."""
        trim = self.loop_trims.get(id(node))
        return None if trim is None or trim[0] in full_tiles else trim

    def clamped(self, node: Node, full_tiles: AbstractSet[str] = frozenset()) -> frozenset[str]:
        """The logical dims the loop ``node`` keeps in range by stopping at their size where
        the printer is: none inside the full-tile version of one of them (they do not
        overflow there)."""
        logicals = self.loop_clamps.get(id(node), frozenset())
        return logicals if logicals.isdisjoint(full_tiles) else frozenset()

    def speculated(self, inst: Instruction, logical: str) -> bool:
        """Whether ``inst`` runs unguarded past the end of ``logical`` (on clamped indices),
        computing values nothing stores: not a store to the kernel's arrays, not a reduction
        along ``logical`` (the values past the end would join the sum), not an integer
        division (it would trap). Guards in a micro-kernel cost a test and a branch per
        instruction; a consumer that reduces along the dim keeps its own guard."""
        if inst.op == "store" or (inst.op == "div" and not inst.dtype.is_float):
            return False
        return not any(isinstance(op, Reduce) and logical in op.dims for op in inst.operands)

    def lane_logicals(self, inst: Instruction, lane_dims: set[str],
                      full_tiles: AbstractSet[str] = frozenset()) -> list[str]:
        """The logical dims of ``inst`` that move along the lanes and may overflow."""
        return [ld for ld in inst.dims if self.needs_guard(ld, full_tiles)
                and any(self.k.dim(d).logical == ld for d in lane_dims)]

    def masks(self, node: Node, full_tiles: AbstractSet[str] = frozenset()) -> bool:
        """Whether a partial vector of ``node`` masks an access: a load or store of the
        kernel's arrays along lanes that may overflow."""
        lane_dims = set(node.dims)
        return any(inst.op in ("load", "store") and self.lane_logicals(inst, lane_dims, full_tiles)
                   for inst in (self.k.inst(c.inst or "") for c in node.children))

    def masked_lanes_safe(self, node: Node,
                          full_tiles: AbstractSet[str] = frozenset()) -> bool:
        """Whether the lanes past the end may compute on zeros: not if an integer division
        would trap on them, nor where one instruction's lanes span two guarded dims."""
        for child in node.children:
            inst = self.k.inst(child.inst or "")
            if not self.iterates(inst.name, node):
                continue
            if inst.op == "div" and not inst.dtype.is_float:
                return False
            if len(self.lane_logicals(inst, set(node.dims), full_tiles)) > 1:
                return False
        return True
