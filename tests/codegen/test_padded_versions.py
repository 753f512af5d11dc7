"""Loops over padded loads printed in two versions: where every index the loads test is
fixed outside the loop, the loop runs without the tests when they all pass (the image's
interior), with them elsewhere; both compute the convolution."""

from __future__ import annotations

import random
import re
from collections.abc import Iterator

import pytest

import partita
from partita.codegen.c import print_c
from partita.kernels import kernel
from partita.runtime import Evaluator, TimingOptions
from partita.search.sampling import random_implementation
from partita.search.sketch import sketch_candidates
from partita.targets import AVX2_REFERENCE, AVX512_REFERENCE, CpuCapabilities


@pytest.fixture(scope="module")
def evaluator() -> Iterator[Evaluator]:
    with Evaluator(seed=2, timeout_s=20.0, timing=TimingOptions(min_reps=1, max_reps=1)) as ev:
        yield ev


def _versions(source: str) -> list[tuple[str, list[str], list[str]]]:
    """The test and the two branches (lines) of each ``if (...) { ... } else { ... }``
    whose test is made of the padded loads' range tests."""
    lines = source.splitlines()
    out = []
    for i, line in enumerate(lines):
        text = line.strip()
        if not (text.startswith("if ((") and ") >= 0 && (" in text and text.endswith("{")):
            continue
        indent = line[:len(line) - len(line.lstrip())]
        end_if = lines.index(f"{indent}}} else {{", i)
        end_else = lines.index(f"{indent}}}", end_if)
        out.append((text, lines[i + 1:end_if], lines[end_if + 1:end_else]))
    return out


@pytest.mark.parametrize("cpu", [AVX2_REFERENCE, AVX512_REFERENCE], ids=["avx2", "avx512"])
def test_the_interior_of_a_padded_image_is_read_without_tests(cpu: CpuCapabilities,
                                                             evaluator: Evaluator) -> None:
    k = kernel("conv2d", n=1, h=10, w=12, c=16, k=16, r=3, s=3, pad=1)
    space = partita.space(k, "cpu", cpu=cpu)
    sketch = dict(sketch_candidates(space, cpu.lanes(4)))["packed"]
    rng = random.Random(0)
    programs = []
    for n in range(3):
        impl = random_implementation(sketch, rng)
        assert impl is not None
        program = print_c(impl, f"padded_versions_{n}")
        versions = _versions(program.source)
        assert versions, "no loop over the image's loads was versioned"
        for _, inside, elsewhere in versions:
            assert not any(" ? " in line for line in inside)
            assert any(" ? " in line for line in elsewhere)
        programs.append(program)
    for m in evaluator.evaluate(programs, time_it=False):
        assert m.ok, (m.status, m.reason)


def test_a_version_tests_only_indices_fixed_outside_its_loop(evaluator: Evaluator) -> None:
    """Over random implementations (any loop order), a version's test names no index of a
    loop inside it, and the versioned implementations compute the convolution."""
    k = kernel("conv2d", n=1, h=6, w=7, c=3, k=4, r=3, s=3, pad=1)
    space = partita.space(k, "cpu", cpu=AVX2_REFERENCE)
    rng = random.Random(1)
    versioned = []
    for n in range(30):
        impl = random_implementation(space.root(), rng)
        assert impl is not None
        program = print_c(impl, f"any_order_{n}")
        versions = _versions(program.source)
        for test, inside, _ in versions:
            inner = {m.group(1) for line in inside
                     for m in re.finditer(r"for \(int64_t (\w+) =", line)}
            assert inner and not inner & set(re.findall(r"[A-Za-z_]\w*", test))
        if versions:
            versioned.append(program)
    assert len(versioned) >= 3
    for m in evaluator.evaluate(versioned[:6], time_it=False):
        assert m.ok, (m.status, m.reason)
