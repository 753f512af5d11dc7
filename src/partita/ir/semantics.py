"""The sequential meaning of a kernel: the loop tree that every implementation must agree with.

A kernel fixes no schedule, yet where instructions read and write the same array (an in-place
update, a recurrence ``x[i+1] += x[i]``) the values depend on the order of the accesses. The
kernel's own order is the *sequential loop tree*:

- every logical dimension is one loop, and an instruction sits inside exactly the loops of its
  own dimensions, nested in the order its ``dims`` lists them (instructions that share a
  logical dimension share its loop, as in every implementation of the space);
- the first instruction that names a dimension fixes where its loop sits: inside the
  innermost loop of the dimensions it names that already have one, then the new ones in the
  order it lists them. An instruction may so run inside a loop it does not iterate (its value
  is the same at every repetition); one that accesses an array some instruction writes may
  not (:mod:`partita.ir.dependences` refuses it);
- loops and instructions at one level run in the order their first instruction was declared,
  moved later only where one of them reads a value computed in a later one.

Instructions communicate through values as :mod:`partita.ir.kernel` says; only array accesses
depend on this order. :func:`sequential_tree` builds the tree; :func:`schedule` gives each
instruction its position in it, as the ``2d + 1`` vector (a textual position between every
pair of loop indices) that :mod:`partita.ir.dependences` compares lexicographically.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from partita.ir.operands import Reduce, Value
from partita.ir.types import KernelError

if TYPE_CHECKING:
    from partita.ir.kernel import Kernel


@dataclass
class Loop:
    """A loop over logical dimension ``dim`` (None for the root of the tree)."""

    dim: str | None
    children: list[Loop | str] = field(default_factory=list)
    """Inner loops and instruction names, in execution order."""

    def instructions(self) -> list[str]:
        """Every instruction inside this loop, in execution order."""
        out: list[str] = []
        for child in self.children:
            out.extend(child.instructions() if isinstance(child, Loop) else [child])
        return out

    def loops(self) -> list[Loop]:
        """This loop and every loop inside it, outermost first."""
        out: list[Loop] = [self]
        for child in self.children:
            if isinstance(child, Loop):
                out.extend(child.loops())
        return out


def _producers(k: Kernel, inst: str) -> list[str]:
    return [op.inst if isinstance(op, Value) else op.init for op in k.inst(inst).values()
            if isinstance(op, Value | Reduce)]


def _nest(k: Kernel) -> Loop:
    """Loops placed by the first instruction naming each dimension (unordered yet)."""
    root = Loop(None)
    loops: dict[str, Loop] = {}
    outer: dict[str | None, list[str]] = {None: []}
    """The dimensions of the loops around each loop, outermost first."""
    for inst in k.instructions:
        chain = sorted((d for d in inst.dims if d in loops), key=lambda d: len(outer[d]))
        for a, b in itertools.pairwise(chain):
            if a not in outer[b]:
                raise KernelError(
                    f"instruction {inst.name!r} iterates {a!r} and {b!r}, whose loops other "
                    "instructions placed side by side: name the dimensions they share in "
                    "one order")
        here: str | None = chain[-1] if chain else None
        for d in inst.dims:
            if d not in loops:
                loops[d] = Loop(d)
                (root if here is None else loops[here]).children.append(loops[d])
                outer[d] = [*outer[here], here] if here is not None else []
                here = d
        (root if here is None else loops[here]).children.append(inst.name)
    return root


def _order_children(k: Kernel, node: Loop, first: dict[str, int]) -> None:
    """Sort a level by first declaration, then move a child after the children it reads
    values from (a stable topological sort)."""
    for child in node.children:
        if isinstance(child, Loop):
            _order_children(k, child, first)

    def members(child: Loop | str) -> list[str]:
        return child.instructions() if isinstance(child, Loop) else [child]

    keyed = sorted(node.children, key=lambda c: min(first[i] for i in members(c)))
    owner = {i: n for n, c in enumerate(keyed) for i in members(c)}
    needs = {n: {owner[p] for i in members(c) for p in _producers(k, i)
                 if p in owner and owner[p] != n} for n, c in enumerate(keyed)}
    placed: list[int] = []
    pending = list(range(len(keyed)))
    while pending:
        ready = next((n for n in pending if needs[n] <= set(placed)), None)
        if ready is None:
            names = ", ".join(repr(members(keyed[n])[0]) for n in pending)
            raise KernelError(f"instructions {names} read each other's values across loops: "
                              "no sequential order computes them")
        placed.append(ready)
        pending.remove(ready)
    node.children = [keyed[n] for n in placed]


_TREES: dict[str, Loop] = {}


def sequential_tree(k: Kernel) -> Loop:
    """The kernel's sequential loop tree (see the module docstring)."""
    cached = _TREES.get(k.structural_hash)
    if cached is not None:
        return cached
    root = _nest(k)
    first = {inst.name: n for n, inst in enumerate(k.instructions)}
    _order_children(k, root, first)
    _TREES[k.structural_hash] = root
    return root


def schedule(k: Kernel) -> dict[str, tuple[tuple[int | str, ...], int]]:
    """For each instruction, its ``2d + 1`` schedule vector (positions as ints, loop indices
    as logical dimension names) and the depth of the deepest instruction.

    Instruction ``s`` runs before ``t`` exactly when the vector of ``s`` at its iteration
    precedes that of ``t`` lexicographically, shorter vectors padded with zeros."""
    out: dict[str, tuple[int | str, ...]] = {}

    def walk(node: Loop, prefix: tuple[int | str, ...]) -> None:
        for pos, child in enumerate(node.children):
            if isinstance(child, Loop):
                assert child.dim is not None
                walk(child, (*prefix, pos, child.dim))
            else:
                out[child] = (*prefix, pos)

    walk(sequential_tree(k), ())
    depth = max((len(v) for v in out.values()), default=1)
    return {name: (vec, depth) for name, vec in out.items()}
