"""Constants in printed code, and names that could clash with it."""

from __future__ import annotations

import math
import random

import pytest

from partita import KernelBuilder
from partita.api import space
from partita.codegen.c import c_literal
from partita.ir.types import DType, KernelError
from partita.runtime import Evaluator, TimingOptions
from partita.search.sampling import sample_and_evaluate


def test_non_finite_constants_print_as_c_knows_them() -> None:
    assert c_literal(-math.inf, DType.FP32) == "-INFINITY"
    assert c_literal(math.inf, DType.FP64) == "INFINITY"
    assert c_literal(math.nan, DType.FP32) == "NAN"
    assert c_literal(0.5, DType.FP32) == "0.5f" and c_literal(3, DType.INT32) == "3"


def test_a_row_maximum_starting_at_minus_infinity_compiles_and_is_right() -> None:
    b = KernelBuilder("row_max")
    A = b.array("A", "float32", [12, 40])
    y = b.array("y", "float32", [12], role="out")
    i = b.dim("i", 12, tiles=[[1, 2, 4]])
    j = b.dim("j", 40, tiles=[[1, 4, 8]])
    ii, iy = b.mapped_dim(i, "i_init"), b.mapped_dim(i, "i_y")
    init = b.mov(-math.inf, dims=[ii])
    best = b.op("max", b.load(A, [i, j]), b.reduce(init, [j], {ii: i}), dims=[i, j])
    b.store(y, [iy], b.value(best, {i: iy}))
    with Evaluator(seed=1, timeout_s=20.0, timing=TimingOptions(min_reps=1, max_reps=1)) as ev:
        report = sample_and_evaluate(space(b.build()).root(), 8, random.Random(0),
                                     lambda ps: ev.evaluate(ps, time_it=False))
    assert report.verified == 8, report.failed[:2]


@pytest.mark.parametrize("what,name,match", [
    ("scalar", "i_0", "printed name of level 0 of dimension 'i'"),
    ("scalar", "int", "reserved"), ("array", "restrict", "reserved"),
    ("array", "tmp_x", "starts with 'tmp_'"), ("size", "_n", "starts with '_'"),
    ("scalar", "v8f32", "vector type"), ("array", "local", "reserved"),
])
def test_names_that_clash_with_printed_code_are_refused(what: str, name: str,
                                                        match: str) -> None:
    b = KernelBuilder("clash")
    n = b.size(name if what == "size" else "n", 8)
    x = b.array(name if what == "array" else "x", "float32", [n], role="inout")
    i = b.dim("i", n)
    a = b.scalar(name) if what == "scalar" else 2.0
    b.store(x, [i], b.mul(b.load(x, [i]), a, dims=[i]))
    with pytest.raises(KernelError, match=match):
        b.build()
