"""Implementations no printing can make correct, which the GPU space must exclude.

A ``REGISTER`` temporary is private to a thread: a consumer can only read the elements its own
thread wrote. For every pair (a, b) of producer and consumer dimensions a register temporary
``t`` carries (not fused), the GPU space requires (``register temporaries stay in their
thread``):

R1. when ``a`` is a THREAD dim of more than one thread, ``b`` is a THREAD dim and
    ``thread_mapping(a, b) = MAPPED`` (otherwise the consumer's thread reads iterations of
    ``a`` other threads computed);
R2. when ``b`` is a THREAD dim of more than one thread and ``a`` is not, the producer runs in
    every thread along ``b``'s hardware dimension, which fails when it also writes a SHARED or
    GLOBAL temporary (an accumulator there): then only one thread may update it. The simpler
    rule "``a`` is THREAD if ``b`` is" also excludes these, and a few sound implementations
    with a producer replicated in every thread.

Before these constraints, R1 explained 47 of 176 random implementations the printer refused
and R2 another 8. The space states R2 in its simpler form.

R3. R2 sees the pairs a temporary carries, not a consumer placed inside a THREAD dim of another
    nest (softmax's ``inv`` inside the threads of ``scale``): every thread there runs it, and
    a reduction accumulated in SHARED or GLOBAL memory is run by thread 0 alone along a
    hardware dimension it has no thread dim on, so the others never get its value in their
    registers. The space states R3 in a simpler form too: a reduction accumulated in memory
    passes its value on in memory (``a reduction accumulated in memory passes its value on in
    memory``). Before it, 13 of 500 random implementations of five kernels were refused (up
    to 5 of a kernel's 100, which the 8 per kernel of ``make test`` did not meet).

The printer still refuses such implementations with :class:`UnsoundCandidate` should a space
allow them.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from partita.api import kernel, space
from partita.codegen.gpu import UnsoundCandidate, print_cuda, print_opencl
from partita.search.sampling import random_implementation

R1 = [
    ["size", ["j.2"], [4]],
    ["dim_kind", ["j.2"], ["THREAD"]],
    ["dim_kind", ["j_st.2"], ["LOOP"]],
    ["mem_space", ["tmp_acc_st_c"], ["REGISTER"]],
]
"""acc runs one column j.2 per thread and keeps C in registers for st_c, which loops over
the columns j_st.2 in every thread: each thread would store columns it never computed."""

R2 = [
    ["size", ["i.1"], [4]],
    ["dim_kind", ["i.1"], ["LOOP"]],
    ["dim_kind", ["i_st.1"], ["THREAD"]],
    ["dim_kind", ["i_init.1"], ["UNROLL"]],
    ["mem_space", ["tmp_init_acc"], ["SHARED"]],
    ["mem_space", ["tmp_acc_st_c"], ["REGISTER"]],
]
"""acc accumulates in shared memory, so one thread along i_st.1's hardware dimension updates
it, and hands C to st_c in registers, which the other threads along it never get."""


R3 = [
    ["dim_kind", ["i_e.1"], ["UNROLL"]],
    ["dim_kind", ["i_sum_init.1"], ["THREAD"]],
    ["dim_kind", ["i_r.1"], ["LOOP"]],
    ["thread_mapping", ["i.1", "j_y.1"], ["IN"]],
    ["mem_space", ["tmp_sum_inv"], ["REGISTER"]],
]
"""softmax's sum is accumulated by one thread along i_sum_init.1's hardware dimension (so in
memory: its initial values are spread over threads) and hands its value to inv in registers;
of 30 random completions in a space without R3, 8 were refused by the printer."""

SOFTMAX = ("softmax", {"m": 3, "n": 16})


def _partial(decisions: list[Any], case: tuple[str, dict[str, int]] = (
        "matmul", {"m": 16, "n": 16, "k": 8})) -> Any:
    cand = space(kernel(case[0], **case[1]), "gpu").root()
    for choice, args, values in decisions:
        cand = cand.restrict(choice, tuple(args), values)
        if not cand:
            return cand
    return cand


@pytest.mark.parametrize("decisions", [R1, R2], ids=["R1", "R2"])
def test_space_rejects_register_temporaries_across_threads(decisions: list[Any]) -> None:
    assert not _partial(decisions)


def test_space_rejects_a_memory_accumulator_handing_its_value_on_in_registers() -> None:
    assert _partial(R3[:-1], SOFTMAX)
    assert not _partial(R3, SOFTMAX)


def test_printer_refuses_register_temporaries_across_threads() -> None:
    cand = _partial(R1)
    if not cand:
        pytest.skip("the space now rejects these decisions")
    impl = random_implementation(cand, random.Random(1))
    for printer in (print_cuda, print_opencl):
        with pytest.raises(UnsoundCandidate, match="registers cannot carry a value between"):
            printer(impl)
