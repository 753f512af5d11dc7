"""Loads of a padded view (:attr:`partita.ir.operands.Access.fill`): where an index leaves the
array, the value is the fill and no memory is touched.

Each axis whose index may leave the array is tested. A vector whose lanes move only along axes
that stay inside (the channels of one pixel) is loaded whole where the test passes; otherwise
it is gathered lane by lane, each lane tested on its own (at the image's border some lanes are
inside and some are not), and on every axis that moves along the lanes, so that the lanes of a
partial vector past the end of their dimension read nothing either.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from partita.codegen.expr import c_literal, fold_product, fold_sum
from partita.codegen.vector import broadcast
from partita.ir.operands import Instruction

if TYPE_CHECKING:
    from partita.codegen.cfamily import CFamilyPrinter


Form = dict[str | None, int]
"""A linear form over the kernel's dynamic sizes: coefficient by size name, the constant
under None."""


def _size_form(p: CFamilyPrinter, size: int | str) -> Form:
    """A size as a form: its value where it is static, else its name."""
    value = p.k.static_size(size)
    return {None: value} if value is not None else {str(size): 1}


def _add(a: Form, b: Form, scale: int = 1) -> Form:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + scale * v
    return out


def _least(form: Form, running: set[str]) -> float:
    """The least value of ``form`` where the sizes in ``running`` are at least 1 (a load runs
    only where each size of its iteration space is) and the others at least 0: minus
    infinity where a size has a negative coefficient."""
    if any(v < 0 for k, v in form.items() if k is not None):
        return float("-inf")
    return sum(v for k, v in form.items() if k is None or k in running)


def _may_leave(p: CFamilyPrinter, inst: Instruction, axis: int) -> bool:
    """Whether the index of ``axis`` may leave ``[0, extent)`` over the iteration space.

    The index ``const + sum(c * d)`` has each dimension ``d`` in ``[0, size(d))``; its least
    and greatest values are forms over the sizes, and the test is dropped only where the
    least is at least 0 and the extent exceeds the greatest for every size of at least 1: a
    dynamic size proves as much as a static one where the index is the dimension that
    spans the array (a channel index under a loop over all channels), and nothing where it
    is not (a padded image's row ``p + r - 1`` against its height)."""
    assert inst.access is not None
    ix = inst.access.index[axis]
    lo: Form = {None: ix.const}
    hi: Form = {None: ix.const}
    running = {str(p.k.logical(d).size) for d, _ in ix.terms}
    for d, c in ix.terms:
        last = _add(_size_form(p, p.k.logical(d).size), {None: -1})  # size(d) - 1
        if c > 0:
            hi = _add(hi, last, c)
        else:
            lo = _add(lo, last, c)
    extent = _size_form(p, p.k.array(inst.access.array).shape[axis])
    return _least(lo, running) < 0 or _least(_add(extent, hi, -1), running) < 1


def padded_load(p: CFamilyPrinter, inst: Instruction, env: dict[str, str],
                lane_dims: set[str], lanes: int, clamped: frozenset[str]) -> str:
    """The C expression of a padded load of ``lanes`` elements."""
    assert inst.access is not None
    arr = p.k.array(inst.access.array)
    fill = c_literal(inst.access.fill or 0.0, inst.dtype)
    axes = p.axis_indices(inst, env, lane_dims, clamped)
    # A static size is a number in the printed code; a dynamic one, the parameter of its name.
    extents = [p.k.static_size(x) or x for x in arr.shape]
    base, step = p.access_address(inst, env, lane_dims, clamped)
    tested = [axis for axis, (_, lane) in enumerate(axes)
              if _may_leave(p, inst, axis) or (lanes > 1 and lane)]
    if not tested:
        return p.load(arr.name, base, step, inst.dtype, lanes)
    leaving = [axis for axis in tested if _may_leave(p, inst, axis)]
    moving = {d for ix in inst.access.index for d, _ in ix.terms
              if p.lane_coeff(d, lane_dims)}
    if lanes > 1 and all(axes[a][1] == 0 for a in leaving) and not any(
            p.needs_guard(d) for d in moving):
        # Every lane is inside or every lane is outside (a convolution's channels along
        # the lanes, at one pixel): one test, and the vector load where it is inside.
        test = " && ".join(f"({axes[a][0]}) >= 0 && ({axes[a][0]}) < {extents[a]}"
                            for a in leaving)
        vt = p.vtype(inst.dtype, lanes)
        return (f"({test} ? {p.load(arr.name, base, step, inst.dtype, lanes)} "
                f": {broadcast(vt, fill)})")
    values = []
    for n in range(lanes if lane_dims else 1):
        conds = []
        for axis in tested:
            expr, lane = axes[axis]
            at = fold_sum([expr, str(n * lane)]) if n * lane >= 0 else f"{expr} - {-n * lane}"
            conds.append(f"({at}) >= 0 && ({at}) < {extents[axis]}")
        address = fold_sum([base, fold_product([n, step])]) if n else base
        values.append(f"({' && '.join(conds)} ? {p.load(arr.name, address, 0, inst.dtype, 1)} "
                      f": {fill})")
    if len(values) == 1:
        return values[0]
    return f"(({p.vtype(inst.dtype, lanes)}){{{', '.join(values)}}})"
