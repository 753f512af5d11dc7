"""Legality from dependences through memory: every implementation the space holds computes
the kernel's sequential meaning; the same space without the rules holds illegal ones."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

import partita
from partita import KernelBuilder
from partita.ir.operands import Affine
from partita.kernels import kernel
from partita.runtime import Evaluator, TimingOptions
from partita.search.sampling import sample_and_evaluate
from partita.space.candidate import Space
from partita.targets import kernel_itemsize
from partita.targets.cpu.machine import AVX512_REFERENCE
from partita.targets.cpu.space import cpu_space

KERNELS = [("prefix_sum", {"n": 37}), ("seidel_2d", {"n": 9, "steps": 2}),
           ("jacobi_2d", {"n": 11, "steps": 2})]


@pytest.fixture(scope="module")
def evaluator() -> Iterator[Evaluator]:
    with Evaluator(seed=3, timeout_s=20.0, timing=TimingOptions(min_reps=1, max_reps=1)) as ev:
        yield ev


def _space(k, memory_dependences: bool = True) -> Space:
    return Space(cpu_space(AVX512_REFERENCE, kernel_itemsize(k),
                           memory_dependences=memory_dependences), k)


def _sample(evaluator: Evaluator, space: Space, count: int, seed: int = 11):
    return sample_and_evaluate(space.root(), count, random.Random(seed),
                               lambda ps: evaluator.evaluate(ps, time_it=False))


@pytest.mark.parametrize("name,params", KERNELS, ids=[n for n, _ in KERNELS])
def test_random_implementations_are_legal(evaluator: Evaluator, name: str,
                                          params: dict) -> None:
    report = _sample(evaluator, _space(kernel(name, **params)), 25)
    assert report.verified == report.sampled == 25, report.failed[:2]


@pytest.mark.slow
@pytest.mark.parametrize("name,params", KERNELS, ids=[n for n, _ in KERNELS])
def test_two_hundred_random_implementations_are_legal(evaluator: Evaluator, name: str,
                                                      params: dict) -> None:
    report = _sample(evaluator, _space(kernel(name, **params)), 200, seed=5)
    assert report.verified == report.sampled == 200, report.failed[:2]


@pytest.mark.parametrize("name,params", KERNELS[:2], ids=[n for n, _ in KERNELS[:2]])
def test_without_the_rules_illegal_implementations_exist_and_are_caught(
        evaluator: Evaluator, name: str, params: dict) -> None:
    report = _sample(evaluator, _space(kernel(name, **params), memory_dependences=False), 40)
    wrong = [f for f in report.failed if f["reason"].startswith("wrong")]
    assert wrong and len(wrong) == len(report.failed)


def test_a_builder_kernel_is_verified_against_its_own_meaning(evaluator: Evaluator) -> None:
    """``x[i + 1] += x[i]`` written by a user, with no reference: its parallel or distributed
    implementations used to pass unchecked."""
    b = KernelBuilder("my_scan")
    x = b.array("x", "float32", [65], role="inout")
    i = b.dim("i", 64, tiles=[[1, 2, 4, 8], [1, 4, 8]])
    total = b.add(b.load(x, [i]), b.load(x, [Affine.of(i) + 1]), dims=[i])
    b.store(x, [Affine.of(i) + 1], total)
    k = b.build()
    assert _sample(evaluator, _space(k), 30).verified == 30
    unconstrained = _sample(evaluator, _space(k, memory_dependences=False), 30)
    assert any("wrong" in f["reason"] for f in unconstrained.failed)


@pytest.mark.parametrize("name,params", [("matmul", {"m": 64, "n": 64, "k": 32}),
                                         ("dot", {"n": 4096, "partials": 16}),
                                         ("axpy", {"n": 1024})])
def test_kernels_without_dependences_keep_their_space(name: str, params: dict) -> None:
    k = partita.kernel(name, **params)
    assert _space(k).root().domains() == _space(k, memory_dependences=False).root().domains()
