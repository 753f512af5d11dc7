"""The loop tree of an implementation: the structure every printer walks.

For a fully decided candidate, ``order`` is a total description of the control flow: each
class of fused dimensions is one loop, a statement's parent is the innermost loop it is IN,
and siblings follow the BEFORE relation. :func:`loop_tree` recovers that tree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cmp_to_key

from partita.space.candidate import Candidate
from partita.space.nest import Order


@dataclass
class Node:
    """A loop (``dims`` fused, ``kind``, ``size``) or an instruction (``inst``)."""

    dims: tuple[str, ...] = ()
    kind: str = ""
    size: int | None = None
    inst: str | None = None
    children: list[Node] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.inst if self.inst is not None else self.dims[0]


def _order(cand: Candidate, x: str, y: str) -> str:
    dom = cand.domain("order", x, y)
    if len(dom) != 1:
        raise ValueError(f"order({x}, {y}) is not decided: {dom}")
    return dom[0]


def dim_size(cand: Candidate, d: str) -> int | None:
    """A tile size, an untiled static size, or None for a derived outer size."""
    dim = cand.kernel.dim(d)
    if dim.sizes is not None:
        return cand.domain("size", d)[0]
    if dim.static_size is not None:
        return dim.static_size
    k = cand.kernel
    n = k.static_size(k.logical(dim.logical).size)
    if n is None:
        return None
    factor = 1
    for other in k.dims_of(dim.logical)[1:]:
        factor *= cand.domain("size", other)[0]
    return -(-n // factor)


def loop_tree(cand: Candidate) -> Node:
    """The root node (no dims) of an implementation's loop nest."""
    if not cand.is_implementation:
        raise ValueError("the loop tree needs every decision fixed")
    k = cand.kernel
    reps: list[str] = []
    members: dict[str, list[str]] = {}
    for d in (d.name for d in k.dims):
        rep = next((r for r in reps if _order(cand, d, r) == Order.MERGED), None)
        if rep is None:
            reps.append(d)
            members[d] = [d]
        else:
            members[rep].append(d)
    statements = [i.name for i in k.instructions] + reps
    nodes = {r: Node(tuple(members[r]), cand.domain("dim_kind", r)[0], dim_size(cand, r))
             for r in reps}
    nodes |= {i.name: Node(inst=i.name) for i in k.instructions}
    root = Node()
    for s in statements:
        outer = [r for r in reps if r != s and _order(cand, s, r) == Order.IN]
        # The innermost enclosing loop is the one inside all the others.
        parent = next((r for r in outer
                       if all(o == r or _order(cand, r, o) == Order.IN for o in outer)), None)
        (nodes[parent] if parent else root).children.append(nodes[s])

    def before(a: Node, b: Node) -> int:
        return -1 if _order(cand, a.name, b.name) == Order.BEFORE else 1

    def sort(node: Node) -> None:
        node.children.sort(key=cmp_to_key(before))
        for child in node.children:
            sort(child)

    sort(root)
    return root


def render(node: Node, indent: str = "") -> list[str]:
    """Pseudo-code lines for a loop tree."""
    lines = []
    for child in node.children:
        if child.inst is not None:
            lines.append(f"{indent}{child.inst}")
            continue
        fused = f" (fused: {', '.join(child.dims)})" if len(child.dims) > 1 else ""
        size = "n/…" if child.size is None else str(child.size)
        lines.append(f"{indent}{child.kind.lower()} {child.dims[0]} in 0..{size}{fused}:")
        lines.extend(render(child, indent + "  "))
    return lines
