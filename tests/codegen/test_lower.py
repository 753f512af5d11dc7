"""The lowered plan: computed once, frozen, and the one description of storage that the
printers print and the lower bound prices."""

from __future__ import annotations

import random

import pytest

import partita
from partita.codegen.c import CPrinter
from partita.codegen.lower import LoweredPlan, accumulator_temporary, keeps_pair
from partita.search.sampling import sample_implementations
from partita.space.candidate import Candidate
from partita.targets import AVX512_REFERENCE


def _implementations(count: int, seed: int) -> list[Candidate]:
    root = partita.space(partita.kernel("matmul", m=24, n=32, k=24), "cpu",
                         cpu=AVX512_REFERENCE).root()
    assert isinstance(root, Candidate)
    return list(sample_implementations(root, count, random.Random(seed)))


def test_a_plan_is_frozen() -> None:
    (cand,) = _implementations(1, 0)
    plan = LoweredPlan(cand)
    with pytest.raises(AttributeError, match="frozen"):
        plan.sizes = {}


def test_the_printer_prints_its_plan() -> None:
    """The printer's storage, temporaries and prefetches are the plan's own objects."""
    for cand in _implementations(4, 1):
        printer = CPrinter(cand, "planned")
        assert printer.storage is printer.plan.storage
        assert printer.temps is printer.plan.temps
        assert printer.prefetches is printer.plan.prefetches


def test_storage_follows_the_rules_the_bound_reads() -> None:
    """Each temporary keeps exactly the pairs :func:`keeps_pair` keeps (the bound's
    contiguity and page counts read that rule), and each accumulation updates the temporary
    :func:`accumulator_temporary` names (the bound prices its accumulators there)."""
    for cand in _implementations(12, 2):
        plan = LoweredPlan(cand)
        k = cand.kernel
        for (producer, consumer), st in plan.temps.items():
            assert st.temp is not None
            pairs = {(s.producer_dim, s.consumer_dim) for s in st.slots}
            expected = {(a, b) for src, dst in next(
                op.mapping for op in k.inst(consumer).values()
                if getattr(op, "inst", None) == producer or getattr(op, "init", None) == producer)
                for a, b in zip(k.dims_of(src), k.dims_of(dst), strict=True)
                if keeps_pair(st.space if st.space != "HEAP" else "LOCAL",
                              plan.merged(a, b))}
            assert pairs == expected, (st.name, st.space)
        for inst in k.reducing_insts:
            held = accumulator_temporary(k, inst)
            st = plan.storage[inst]
            assert (st.temp.name if st.temp is not None else None) == held
