"""Dependences through memory (isl), their summaries and the sequential loop tree."""

from __future__ import annotations

import pytest

from partita import KernelBuilder
from partita.ir.dependences import dependences
from partita.ir.operands import Affine
from partita.ir.semantics import schedule, sequential_tree
from partita.ir.types import KernelError
from partita.kernels import kernel


def _signs(dep, dim: str) -> str:
    (d,) = [d for d in dep.distances if d.sink_dim == dim and d.source_dim == dim]
    return "".join(s for s, on in (("-", d.negative), ("0", d.zero), ("+", d.positive)) if on)


def test_a_recurrence_carries_its_flow_dependence() -> None:
    deps = dependences(kernel("prefix_sum", n=16))
    found = {(d.kind, d.source, d.sink): d for d in deps.all}
    flow = found["flow", "st_x", "ld_prev"]
    assert _signs(flow, "i") == "+" and not flow.independent
    anti = found["anti", "ld_here", "st_x"]
    assert _signs(anti, "i") == "0" and anti.independent
    assert deps.carried_logical == {"i"}
    assert deps.after("st_x", "ld_here") and not deps.after("ld_prev", "st_x")


def test_gauss_seidel_keeps_its_rows_outside_its_columns() -> None:
    deps = dependences(kernel("seidel_2d", n=6, steps=2))
    assert deps.carried_logical == {"t", "i", "j"}
    # The upper-right neighbour, read before it is updated: distance (+1, -1) on (i, j).
    assert any(_signs(d, "i") == "+" and _signs(d, "j") == "-" for d in deps.all)
    assert deps.must_enclose("i.0", "j.1") and deps.must_enclose("t.0", "i.1")
    assert not deps.must_enclose("j.0", "i.0")


def test_jacobi_carries_only_its_time_loop() -> None:
    deps = dependences(kernel("jacobi_2d", n=6, steps=2))
    assert deps.carried_logical == {"t"}
    assert not deps.carried("i_b.2") and deps.carried("t.0")


def test_kernels_without_updates_in_place_have_no_dependences() -> None:
    for name, params in (("matmul", {"m": 4, "n": 4, "k": 4}), ("dot", {"n": 16}),
                         ("gemv", {"m": 4, "n": 4}), ("matmul_chain", {"m": 2, "n": 2,
                                                                       "k": 2, "l": 2})):
        assert not dependences(kernel(name, **params)), name


def _shifted_copy(shift: int) -> KernelBuilder:
    """``x[i + 2] = x[i + 2 - shift]`` over ``i < 8``."""
    b = KernelBuilder(f"shift{shift}")
    x = b.array("x", "float32", [10], role="inout")
    i = b.dim("i", 8)
    v = b.load(x, [Affine.of(i) + (2 - shift)], name="ld")
    b.store(x, [Affine.of(i) + 2], v, name="st")
    return b


def test_distances_say_which_loop_carries_what() -> None:
    (dep,) = [d for d in dependences(_shifted_copy(1).build()).all if d.kind == "flow"]
    assert _signs(dep, "i") == "+"
    # A copy in place with no shift only has the loop-independent anti dependence.
    same = dependences(_shifted_copy(0).build())
    assert [(d.kind, _signs(d, "i")) for d in same.all] == [("anti", "0")]


def test_dynamic_sizes_are_parameters() -> None:
    """A transpose in place, ``x[j][i] = x[i][j]`` with n known only at call time: its
    elements above the diagonal are read before they are overwritten, those below after."""
    b = KernelBuilder("transpose_in_place")
    n = b.size("n")
    x = b.array("x", "float32", [n, n], role="inout")
    i, j = b.dim("i", n), b.dim("j", n)
    v = b.load(x, [i, j], dims=[i, j])
    b.store(x, [j, i], v, dims=[i, j])
    deps = dependences(b.build())
    found = {d.kind: (_signs(d, "i"), _signs(d, "j")) for d in deps.all}
    assert found == {"anti": ("0+", "-0"), "flow": ("+", "-")}
    assert deps.must_enclose("i.0", "j.0")


def test_the_sequential_tree_shares_loops_and_orders_by_declaration() -> None:
    k = kernel("jacobi_2d", n=4, steps=1)
    (t,) = sequential_tree(k).children
    assert [c.dim for c in t.children] == ["i_b", "i_a"]
    sched = schedule(k)
    assert sched["st_b"][0][:2] == (0, "t") and sched["st_a"][0][2] == 1


def test_instructions_follow_the_first_nesting_and_writes_stay_in_their_loops() -> None:
    b = KernelBuilder("bad")
    n = b.size("n", 4)
    x = b.array("x", "float32", [n, n], role="inout")
    y = b.array("y", "float32", [n], role="inout")
    i, j = b.dim("i", n), b.dim("j", n)
    v = b.load(x, [i, j], dims=[i, j])
    b.store(x, [i, j], v, dims=[j, i])  # follows the nesting of the load: i outside j
    assert [c.dim for c in sequential_tree(b.build()).children] == ["i"]
    w = b.load(y, [j], dims=[j])  # the loop of j sits inside that of i
    b.store(y, [j], b.add(w, 1.0, dims=[j]), dims=[j])
    with pytest.raises(KernelError, match="does not iterate"):
        dependences(b.build())
