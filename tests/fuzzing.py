"""Checks the kernel-family tests share: random implementations of a kernel compiled, run and
compared with its reference, and a library reference compared with the kernel's sequential
meaning (the IR interpreted loop by loop)."""

from __future__ import annotations

import random
import zlib
from typing import Any

import numpy as np

import partita
from partita.codegen.program import signature
from partita.ir.interpret import sequential_reference
from partita.ir.kernel import Kernel
from partita.runtime import Evaluator
from partita.runtime.data import find_reference, generate_inputs, run_reference
from partita.search.sampling import sample_and_evaluate


def assert_random_implementations_verify(evaluator: Evaluator, k: Kernel, count: int,
                                         params: dict[str, Any]) -> None:
    """``count`` random implementations of ``k`` (drawn from a seed of ``params``) all
    compile, run and match the reference."""
    root = partita.space(k).root()
    report = sample_and_evaluate(root, count, random.Random(zlib.crc32(str(params).encode())),
                                 lambda ps: evaluator.evaluate(ps, time_it=False))
    assert report.sampled == count
    assert report.verified == count, report.failed[:3]


def assert_reference_is_the_sequential_meaning(k: Kernel) -> None:
    """The library's reference of ``k`` computes what its instructions mean, run in order."""
    args = signature(k)
    values = generate_inputs(args, 0)
    expected = run_reference(find_reference(k), args, values)
    meaning = run_reference(sequential_reference(k), args, values)
    assert set(expected) == set(meaning)
    for out in expected:
        np.testing.assert_allclose(meaning[out], expected[out], rtol=1e-12, atol=1e-12)
