"""Loads of a padded view (:attr:`partita.ir.operands.Access.fill`): where an index leaves the
array, the value is the fill and no memory is touched.

Each axis whose index may leave the array is tested. A vector whose lanes move only along axes
that stay inside (the channels of one pixel) is loaded whole where the test passes; otherwise
it is gathered lane by lane, each lane tested on its own (at the image's border some lanes are
inside and some are not), and on every axis that moves along the lanes, so that the lanes of a
partial vector past the end of their dimension read nothing either.

A loop whose padded loads test only indices fixed outside it (a convolution's loop over
channels, under the pixel and the filter tap) is printed twice under one test of them all:
without the tests where every index is inside (the image's interior), with them elsewhere.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from partita.codegen.expr import c_literal, fold_product, fold_sum
from partita.codegen.vector import broadcast
from partita.ir.forms import Form, add, size_form
from partita.ir.forms import least as least_value
from partita.ir.operands import Instruction

if TYPE_CHECKING:
    from partita.codegen.cfamily import CFamilyPrinter
    from partita.codegen.looptree import Node


@dataclass
class PaddingVersions:
    """Where the printer is with respect to the versions of loops over padded loads."""

    tests: list[str] | None = None
    """The tests the padded loads printed since the loop being versioned began (None: no
    loop is collecting them)."""
    inside: bool = False
    """Printing the version where every test is known to pass: the loads test nothing."""
    failed: frozenset[str] = field(default_factory=frozenset)
    """The tests of the version whose other branch (some test fails) is being printed: an
    inner loop with the same tests is not versioned again."""


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _fixed_outside(p: CFamilyPrinter, tests: list[str], env: dict[str, str]) -> bool:
    """Whether every name in ``tests`` is an index fixed outside the loop (in ``env``) or a
    size parameter: the tests then hold or fail for the whole loop."""
    known = {name for value in env.values() for name in _NAME.findall(value)}
    known |= {name for name, value in p.k.size_values.items() if value is None}
    return all(name in known for t in tests for name in _NAME.findall(t))


def print_versioned_padding(p: CFamilyPrinter, node: Node, env: dict[str, str], indent: int,
                            print_loop: Callable[[Node, dict[str, str], int], None]) -> None:
    """Loop ``node`` as ``print_loop`` prints it, or, where its padded loads test only
    indices fixed outside it, ``if (every test passes) { the loop without them } else
    { the loop }``. At the border of a 14x14 image, a 3x3 conv with its image read through
    a padded view ran 0.69 ms where the same conv of an image padded by hand ran 0.43 ms:
    a test and a branch for each of the micro-kernel's loads of the image."""
    state = p.padding
    if state.inside:
        print_loop(node, env, indent)
        return
    start, outer = len(p.lines), state.tests
    state.tests = []
    try:
        print_loop(node, env, indent)
        tests = list(dict.fromkeys(state.tests))
    finally:
        state.tests = outer
    if outer is not None:
        outer.extend(tests)
    if not tests or frozenset(tests) == state.failed or not _fixed_outside(p, tests, env):
        return
    del p.lines[start:]
    p.emit(indent, f"if ({' && '.join(tests)}) {{")
    state.inside = True
    try:
        print_loop(node, env, indent + 1)
    finally:
        state.inside = False
    p.emit(indent, "} else {")
    failed, state.failed = state.failed, frozenset(tests)
    try:
        print_loop(node, env, indent + 1)
    finally:
        state.failed = failed
    p.emit(indent, "}")


def _size_form(p: CFamilyPrinter, size: int | str) -> Form:
    """A size as a form: its value where it is static, else its name."""
    return size_form(size, p.k.size_values)


def _logical_range(p: CFamilyPrinter, ld: str, env: dict[str, str], lane_dims: set[str],
                   clamped: frozenset[str]) -> tuple[int, list[Form]]:
    """(least index, forms of the greatest) of logical dim ``ld`` where the printer is.

    Its index sums its tile dims' indices times their strides: an unrolled copy's is a
    constant, a loop's or a vector's runs over its tile. Where no index of ``ld`` passes its
    end here (a full tile, or a size the tiles divide), every copy of the unrolled tile dims
    is in range, so a copy ``v`` of a tile dim of size ``t`` stays ``(t - 1 - v) * stride``
    below the size (the first and last columns of a row of copies differ); a guarded or
    clamped index stays below the size; the tiles' own extents bound it too where they are
    static. A clamped index (speculated past the end: :meth:`LoweredPlan.speculated`) is
    the last one there, whatever its copy: its least is 0."""
    last = add(_size_form(p, p.k.logical(ld).size), {None: -1})
    if ld in clamped:
        return 0, [last]
    least, slack, spread = 0, 0, 0
    stride = 1
    static = True
    for d in reversed(p.k.dims_of(ld)):
        size = p.sizes[d]
        value = env.get(d, "")
        if d not in lane_dims and value.lstrip("-").isdigit():
            least += int(value) * stride
            if isinstance(size, int):
                slack += (size - 1 - int(value)) * stride
        elif isinstance(size, int):
            spread += (size - 1) * stride
        else:
            static = False
        stride = stride * size if isinstance(size, int) else stride
    greatest: list[Form] = [{None: least + spread}] if static else []
    if not p.needs_guard(ld):
        greatest.append(add(last, {None: -slack}))
    elif not any(d in lane_dims for d in p.k.dims_of(ld)):  # the instruction's guard tests it
        greatest.append(last)
    return least, greatest


def _may_leave(p: CFamilyPrinter, inst: Instruction, axis: int, env: dict[str, str],
               lane_dims: set[str], clamped: frozenset[str]) -> bool:
    """Whether the index of ``axis`` may leave ``[0, extent)`` where the printer is.

    The index ``const + sum(c * d)`` has each logical dimension ``d`` in the range
    :func:`_logical_range` gives; its least and greatest values are forms over the sizes,
    and the test is dropped only where the least is at least 0 and the extent exceeds the
    greatest for every size of at least 1 that the kernel's size relations allow. So a
    dynamic size proves as much as a static one where the index is the dimension that spans
    the array (a channel index under a loop over all channels), and a padded image's column
    ``q + s - 1`` is proven inside for the unrolled copies of ``q`` away from the ends of
    their tile, through the relation of the output's width to the image's."""
    assert inst.access is not None
    ix = inst.access.index[axis]
    running = {str(p.k.logical(d).size) for d, _ in ix.terms}
    lo: Form = {None: ix.const}
    his: list[Form] = [{None: ix.const}]
    for d, c in ix.terms:
        least, greatest = _logical_range(p, d, env, lane_dims, clamped)
        if c > 0:
            lo = add(lo, {None: least}, c)
            his = [add(h, g, c) for h in his for g in greatest]
        else:
            his = [add(h, {None: least}, c) for h in his]
            if len(greatest) == 0:
                return True
            lo = max((add(lo, g, c) for g in greatest),
                     key=lambda f: least_value(f, running, p.k.size_relations))
    extent = _size_form(p, p.k.array(inst.access.array).shape[axis])
    relations = p.k.size_relations
    inside_above = any(least_value(add(extent, h, -1), running, relations) >= 1
                       for h in his)
    return least_value(lo, running, relations) < 0 or not inside_above


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
    if p.padding.inside:  # the version where every test this load would print passes
        return p.load(arr.name, base, step, inst.dtype, lanes)
    leaving = [axis for axis in range(len(axes))
               if _may_leave(p, inst, axis, env, lane_dims, clamped)]
    tested = [axis for axis, (_, lane) in enumerate(axes)
              if axis in leaving or (lanes > 1 and lane)]
    if not tested:
        return p.load(arr.name, base, step, inst.dtype, lanes)
    moving = {d for ix in inst.access.index for d, _ in ix.terms
              if p.lane_coeff(d, lane_dims)}
    if lanes > 1 and all(axes[a][1] == 0 for a in leaving) and not any(
            p.needs_guard(d) for d in moving):
        # Every lane is inside or every lane is outside (a convolution's channels along
        # the lanes, at one pixel): one test, and the vector load where it is inside; none
        # where no axis may leave the image (the lanes were the only reason to look).
        if not leaving:
            return p.load(arr.name, base, step, inst.dtype, lanes)
        tests = [f"({axes[a][0]}) >= 0 && ({axes[a][0]}) < {extents[a]}" for a in leaving]
        test = " && ".join(tests)
        if p.padding.tests is not None:
            p.padding.tests.extend(tests)
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
        if p.padding.tests is not None:
            p.padding.tests.extend(conds)
        address = fold_sum([base, fold_product([n, step])]) if n else base
        values.append(f"({' && '.join(conds)} ? {p.load(arr.name, address, 0, inst.dtype, 1)} "
                      f": {fill})")
    if len(values) == 1:
        return values[0]
    return f"(({p.vtype(inst.dtype, lanes)}){{{', '.join(values)}}})"
