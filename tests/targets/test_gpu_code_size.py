"""The GPU space bounds the for loops a kernel prints (what nvcc's build time grows with).

``loop_copies(x)`` multiplies the sizes of the UNROLL dims around dimension ``x``: a LOOP
prints one ``for`` per copy of the unrolled code around it. Checked on the printed CUDA, not
against the space: the counter equals the loops printed for each dim where no loop body is
versioned for a partial tile (a versioned body prints its loops once per version), and the cap
removes exactly the implementations that print a loop more often than the device allows.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import replace

import pytest

import partita
from partita.codegen.expr import c_name
from partita.codegen.gpu import UnsoundCandidate, print_cuda
from partita.space.candidate import Candidate, DeadEnd, Space
from partita.space.estimate import random_descent
from partita.targets.gpu.device import H100
from partita.targets.gpu.space import gpu_space

FOR = re.compile(r"for \(int (\w+) = 0;")
LAST_TILE = re.compile(r"for \(int \w+ = (?!0;)")
"""The loop over the last, partial tile of a loop split in two (it starts at the number of
full tiles)."""


def printed_loops(cand: Candidate) -> tuple[Counter[str], bool] | None:
    """The ``for`` loops of the CUDA of ``cand`` per index variable, and whether a loop body
    is versioned for a partial tile (an ``else``, or a loop split into its full tiles and
    its last one: its loops are then printed once per version); None where the printer
    refuses the implementation."""
    try:
        source = print_cuda(cand).source
    except UnsoundCandidate:
        return None
    return (Counter(FOR.findall(source)),
            "} else {" in source or LAST_TILE.search(source) is not None)


@pytest.mark.parametrize("kernel,params,descents", [
    ("matmul", {"m": 64, "n": 64, "k": 16}, 9),
    ("gemv", {"m": 16, "n": 8}, 20),
], ids=["matmul", "gemv"])
def test_loop_copies_count_the_printed_loops(kernel: str, params: dict,
                                             descents: int) -> None:
    root = partita.space(partita.kernel(kernel, **params), "gpu").root()
    assert isinstance(root, Candidate)
    rng = random.Random(1)
    exact = 0
    for _ in range(descents):
        leaf, _, _ = random_descent(root, rng)
        seen = printed_loops(leaf) if isinstance(leaf, Candidate) else None
        if seen is None:
            continue
        assert isinstance(leaf, Candidate)
        loops, versioned = seen
        # A partial tile's version keeps its guards inside rather than versioning again:
        # g versioned logical dims print a loop body at most g + 1 times.
        versions = len(leaf.kernel.logical_dims) + 1 if versioned else 1
        for d in leaf.kernel.dims:
            if c_name(d.name) in loops:
                lo, hi = leaf.counter("loop_copies", d.name)
                assert lo == hi <= H100.max_loop_copies
                printed = loops[c_name(d.name)]
                assert printed <= lo * versions, (d.name, leaf.decisions_json())
                assert versioned or printed == lo, (d.name, leaf.decisions_json())
        exact += not versioned
    assert exact >= descents // 3


@pytest.mark.slow
def test_loop_copies_cap_removes_exactly_the_kernels_over_it() -> None:
    """Random implementations of the space without the cap replay in the space with a cap of
    2 exactly when no loop of their CUDA is printed more than twice."""
    capped = replace(H100, name="capped", max_loop_copies=2)
    sdef = gpu_space(capped)
    free = Space(replace(sdef, constraints=[c for c in sdef.constraints
                                            if c.name != "loop copies"]),
                 partita.kernel("gemv", m=16, n=8)).root()
    limited = Space(sdef, partita.kernel("gemv", m=16, n=8))
    assert isinstance(free, Candidate)
    rng = random.Random(4)
    outcomes = Counter[bool]()
    for _ in range(30):
        leaf, _, _ = random_descent(free, rng)
        seen = printed_loops(leaf) if isinstance(leaf, Candidate) else None
        if seen is None or seen[1]:
            continue
        over = max(seen[0].values(), default=0) > capped.max_loop_copies
        replayed = limited.replay(list(leaf.decisions))
        assert isinstance(replayed, DeadEnd) == over, leaf.decisions_json()
        outcomes[over] += 1
    assert outcomes[True] >= 2 and outcomes[False] >= 2, outcomes
