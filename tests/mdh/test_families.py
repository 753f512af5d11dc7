"""The kernel families written through partita.mdh: random implementations at small and odd
sizes compile, run and match their numpy references; the references agree with the kernels'
sequential meaning; bad parameters are refused by name."""

from __future__ import annotations

import random
from collections.abc import Iterator

import numpy as np
import pytest

import partita
from partita.codegen.program import signature
from partita.ir.interpret import sequential_reference
from partita.ir.types import KernelError
from partita.kernels import kernel
from partita.runtime import Evaluator, TimingOptions
from partita.runtime.data import find_reference, generate_inputs, reference_kind, run_reference
from partita.search.sampling import sample_and_evaluate
from tests.fuzzing import (
    assert_random_implementations_verify,
    assert_reference_is_the_sequential_meaning,
)

CASES = [
    ("transpose", {"m": 7, "n": 12}),
    ("transpose", {"m": 16, "n": 32, "dtype": "float64"}),
    ("jacobi1d", {"n": 101}),
    ("jacobi2d", {"n": 11}),
    ("jacobi2d", {"n": 34, "dtype": "float64"}),
    ("jacobi3d", {"n": 6}),
    ("conv2d", {"n": 1, "h": 7, "w": 8, "c": 3, "k": 4, "r": 3, "s": 2}),
    ("conv2d", {"n": 2, "h": 9, "w": 9, "c": 2, "k": 3, "r": 3, "s": 3, "stride": 2,
                "dilation": 2}),
    ("depthwise_conv2d", {"n": 1, "h": 8, "w": 7, "c": 5, "r": 3, "s": 3}),
    ("depthwise_conv2d", {"n": 1, "h": 9, "w": 9, "c": 4, "r": 3, "s": 2, "stride": 2,
                          "dtype": "float64"}),
]
IDS = [f"{n}-{'-'.join(f'{k}{v}' for k, v in p.items())}" for n, p in CASES]
FUZZED = [pytest.param(n, p, id=i, marks=pytest.mark.slow
                       if any(m == n for m, _ in CASES[:j]) else ())
          for j, ((n, p), i) in enumerate(zip(CASES, IDS, strict=True))]
"""The cases, each family's second one slow (the fast subset draws from the first)."""


@pytest.fixture(scope="module")
def evaluator() -> Iterator[Evaluator]:
    with Evaluator(seed=5, timeout_s=20.0, timing=TimingOptions(min_reps=1, max_reps=1)) as ev:
        yield ev


@pytest.mark.slow
@pytest.mark.parametrize("name,params", FUZZED)
def test_random_implementations_match_numpy(evaluator: Evaluator, fuzz_count: int,
                                            name: str, params: dict) -> None:
    k = kernel(name, **params)
    assert_random_implementations_verify(evaluator, k, fuzz_count, params)
    assert reference_kind(k) == "numpy"


@pytest.mark.parametrize("name,params", CASES, ids=IDS)
def test_the_reference_is_the_sequential_meaning(name: str, params: dict) -> None:
    assert_reference_is_the_sequential_meaning(kernel(name, **{**params, "dtype": "float64"}))


def test_a_stencil_keeps_the_border_it_is_given() -> None:
    k = kernel("jacobi2d", n=5)
    assert {a.name: (a.shape, a.role) for a in k.arrays} == {"x": ((5, 5), "in"),
                                                             "y": ((5, 5), "inout")}
    assert {s.name: s.value for s in k.sizes} == {"interior": 3}


def test_shapes_follow_the_convolution_parameters() -> None:
    k = kernel("conv2d", n=2, h=9, w=10, c=3, k=4, r=3, s=2, stride=2, dilation=2)
    # p = (9 - 2 * 2 - 1) // 2 + 1 = 3, q = (10 - 2 * 1 - 1) // 2 + 1 = 4
    assert {a.name: a.shape for a in k.arrays} == {"I": (2, 9, 10, 3), "F": (4, 3, 2, 3),
                                                  "O": (2, 3, 4, 4)}


@pytest.mark.parametrize("name,params,message", [
    ("conv2d", {"h": 2, "r": 5, "pad": 1}, r"an image of 2 \(padded to 4\) is smaller"),
    ("conv2d", {"pad": -1}, r"pad must be >= 0"),
    ("conv2d", {"h": 2, "r": 3}, r"an image of 2 is smaller than the filter's reach 3"),
    ("conv2d", {"h": 5, "r": 3, "dilation": 3}, r"smaller than the filter's reach 7"),
    ("depthwise_conv2d", {"w": 2, "s": 5}, r"an image of 2 is smaller"),
    ("jacobi3d", {"n": 2}, r"n must be at least 3"),
])
def test_bad_parameters_are_refused_by_name(name: str, params: dict, message: str) -> None:
    with pytest.raises(KernelError, match=message):
        kernel(name, **params)


CONTRACTIONS = [
    ("ik,kj->ij", {"i": 5, "j": 7, "k": 3}),
    ("gdab,efgc->abcdef", dict(zip("abcdefg", (2, 3, 2, 3, 2, 2, 3), strict=True))),
    ("abc->cb", {"a": 4, "b": 3, "c": 5}),
    ("i,i->", {"i": 37}),
    ("ij,jk,kl->il", {"i": 3, "j": 4, "k": 2, "l": 5}),
]


@pytest.mark.slow
@pytest.mark.parametrize("spec,sizes", CONTRACTIONS, ids=[c[0] for c in CONTRACTIONS])
def test_contractions_match_einsum(evaluator: Evaluator, spec: str, sizes: dict) -> None:
    k = kernel("contraction", spec=spec, **sizes)
    args = signature(k)
    values = generate_inputs(args, 0)
    meaning = run_reference(sequential_reference(k), args, values)
    expected = run_reference(find_reference(k), args, values)
    np.testing.assert_allclose(meaning["out"], expected["out"], rtol=1e-12, atol=1e-12)
    report = sample_and_evaluate(partita.space(k).root(), 6, random.Random(len(spec)),
                                 lambda ps: evaluator.evaluate(ps, time_it=False))
    assert report.verified == 6, report.failed[:3]


def test_a_contraction_takes_one_size_per_index() -> None:
    k = kernel("contraction", spec="ab,bc->ac", a=3, b=4, c=5)
    assert {a.name: a.shape for a in k.arrays} == {"A": (3, 4), "B": (4, 5), "out": (3, 5)}
    assert dict(dict(k.meta)["params"]) == {"spec": "ab,bc->ac", "dtype": "float32",
                                            "a": 3, "b": 4, "c": 5}
    with pytest.raises(KernelError, match="has no parameter 'd'"):
        kernel("contraction", spec="ab,bc->ac", d=3)


@pytest.mark.parametrize("spec,message", [
    ("ab,bc", r"is not of the form"),
    ("ab,bc->aa", r"an output index repeats"),
    ("ab,bc->ad", r"output index d is read by no input"),
    ("a1,bc->ac", r"is not of the form"),
])
def test_bad_contractions_are_refused(spec: str, message: str) -> None:
    with pytest.raises(KernelError, match=message):
        kernel("contraction", spec=spec)


def test_a_vector_of_channels_that_no_axis_lets_leave_the_image_loads_without_a_test(
        evaluator: Evaluator) -> None:
    """A padded conv whose image loads run along the channels in vectors, at pixels the
    printer proves inside the image: no axis is left to test, and the load is a plain vector
    load (it once printed an empty condition, ``( ? load : 0)``, and failed to compile)."""
    from partita.codegen.c import print_c
    from partita.space.candidate import Candidate, Decision
    from partita.tuning.generic import first_completion

    k = kernel("conv2d", n=2, h=8, w=8, c=4, k=6, r=3, s=3, pad=1)
    sizes = {"n.2": 1, "p.2": 4, "q.2": 8, "k.2": 1, "r.1": 3, "s.1": 3, "c.1": 4, "n.1": 1,
             "p.1": 2, "k.1": 1}
    kinds = {"n_I.2": "UNROLL", "p_I.2": "UNROLL", "r_I.1": "LOOP", "s_I.1": "UNROLL",
             "c_I.1": "VECTOR", "n_I.1": "UNROLL"}
    decisions = [Decision("size", (d,), (v,)) for d, v in sizes.items()]
    decisions += [Decision("dim_kind", (d,), (v,)) for d, v in kinds.items()]
    cand = partita.space(k).replay(decisions)
    assert isinstance(cand, Candidate)
    impl = first_completion(cand)
    assert impl is not None
    program = print_c(impl, "channels_inside")
    assert "( ?" not in program.source
    (m,) = evaluator.evaluate([program], time_it=False)
    assert m.ok, (m.status, m.reason)


def test_a_register_tile_of_seven_pixels_is_offered_where_seven_divides_the_row(
        evaluator: Evaluator) -> None:
    """A 14-pixel output row is offered a register tile of 7 pixels (3 and 5 do not divide
    it, a 12-pixel row gets 3 and 6), and implementations with that tile unrolled compute
    the convolution."""
    k = kernel("conv2d", n=1, h=9, w=16, c=4, k=8, r=3, s=3)
    root = partita.space(k).root()
    assert set(root.domain("size", "q.2")) == {1, 7, 14}
    wide = partita.space(kernel("conv2d", n=1, h=9, w=14, c=4, k=8, r=3, s=3)).root()
    assert {3, 6} <= set(wide.domain("size", "q.2"))
    cand = root.restrict("size", ("q.2",), [7]).restrict("dim_kind", ("q.2",), ["UNROLL"])
    report = sample_and_evaluate(cand, 3, random.Random(3),
                                 lambda ps: evaluator.evaluate(ps, time_it=False))
    assert report.verified == 3, report.failed[:2]
