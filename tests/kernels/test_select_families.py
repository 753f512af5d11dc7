"""The families built on the IR's newer instructions: softmax (exponentials), and conv2d and
depthwise_conv2d with zero padding (padded loads). Twenty random implementations of each, at
small and odd sizes, in float32 and float64, compile, run and match numpy; the references
agree with the kernels' meaning."""

from __future__ import annotations

import random
from collections.abc import Iterator

import numpy as np
import pytest
from tests.fuzzing import (
    assert_random_implementations_verify,
    assert_reference_is_the_sequential_meaning,
)

import partita
from partita.ir.interpret import sequential_reference
from partita.kernels import kernel
from partita.runtime import Evaluator, TimingOptions
from partita.runtime.data import reference_kind
from partita.search.sampling import sample_and_evaluate

CASES = [
    ("softmax", {"m": 5, "n": 13}),
    ("softmax", {"m": 7, "n": 37, "dtype": "float64"}),
    ("softmax", {"m": 1, "n": 50}),
    ("softmax", {"m": 17, "n": 3, "dtype": "float64"}),
    ("conv2d", {"n": 1, "h": 7, "w": 6, "c": 3, "k": 4, "r": 3, "s": 3, "pad": 1}),
    ("conv2d", {"n": 2, "h": 5, "w": 9, "c": 2, "k": 3, "r": 3, "s": 2, "stride": 2, "pad": 2,
                "dilation": 2, "dtype": "float64"}),
    ("conv2d", {"n": 1, "h": 3, "w": 3, "c": 5, "k": 2, "r": 5, "s": 5, "pad": 2}),
    ("depthwise_conv2d", {"n": 1, "h": 6, "w": 7, "c": 5, "r": 3, "s": 3, "pad": 1}),
    ("depthwise_conv2d", {"n": 2, "h": 5, "w": 4, "c": 3, "r": 2, "s": 3, "stride": 2, "pad": 1,
                          "dtype": "float64"}),
]
IDS = [f"{n}-{'-'.join(f'{k}{v}' for k, v in p.items())}" for n, p in CASES]
FUZZED = [pytest.param(n, p, id=i, marks=pytest.mark.slow
                       if any(m == n for m, _ in CASES[:j]) else ())
          for j, ((n, p), i) in enumerate(zip(CASES, IDS, strict=True))]
"""Each family's first case runs in the fast subset, the others are slow."""


@pytest.fixture(scope="module")
def evaluator() -> Iterator[Evaluator]:
    with Evaluator(seed=9, timeout_s=20.0, timing=TimingOptions(min_reps=1, max_reps=1)) as ev:
        yield ev


@pytest.mark.slow
@pytest.mark.parametrize("name,params", FUZZED)
def test_random_implementations_match_numpy(evaluator: Evaluator, name: str,
                                            params: dict) -> None:
    k = kernel(name, **params)
    assert reference_kind(k) == "numpy"
    assert_random_implementations_verify(evaluator, k, 20, params)


@pytest.mark.parametrize("name,params", CASES, ids=IDS)
def test_the_reference_is_the_sequential_meaning(name: str, params: dict) -> None:
    assert_reference_is_the_sequential_meaning(kernel(name, **{**params, "dtype": "float64"}))


def test_softmax_rows_sum_to_one_without_overflow() -> None:
    """Values far beyond exp's range (1000: exp overflows float64) still give a softmax:
    the max is subtracted first."""
    k = kernel("softmax", m=2, n=5)
    x = np.array([[1000.0, 999.0, 998.0, 0.0, -1000.0], [1.0, 1.0, 1.0, 1.0, 1.0]])
    y = sequential_reference(k)(x)["Y"]
    np.testing.assert_allclose(y.sum(axis=1), 1.0)
    np.testing.assert_allclose(y[1], 0.2)
    assert y[0, 0] > y[0, 1] > y[0, 2] > 0 and y[0, 4] == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_padded_convolutions_on_vectors_match_numpy(evaluator: Evaluator, dtype: str) -> None:
    """The image's channels along the lanes: at each pixel, one test for the whole vector."""
    k = kernel("conv2d", n=1, h=6, w=9, c=16, k=3, r=3, s=3, pad=1, dtype=dtype)
    cand = partita.space(k).root().restrict("dim_kind", ["c_I.1"], ["VECTOR"])
    assert cand, cand
    report = sample_and_evaluate(cand, 4, random.Random(3),
                                 lambda ps: evaluator.evaluate(ps, time_it=False))
    assert report.verified == 4, report.failed[:2]


def test_padded_views_read_their_fill_outside_the_image() -> None:
    """A 1x1 image, a 3x3 filter of ones, pad 1: every output is the one pixel."""
    k = kernel("conv2d", n=1, h=1, w=1, c=1, k=1, r=3, s=3, pad=1, dtype="float64")
    out = sequential_reference(k)(np.full((1, 1, 1, 1), 2.5), np.ones((1, 3, 3, 1)))["O"]
    np.testing.assert_array_equal(out, np.full((1, 1, 1, 1), 2.5))
