"""The lowered plan: computed once, frozen, and the one description of storage that the
printers print and the lower bound prices."""

from __future__ import annotations

import math
import random

import pytest

import partita
from partita.codegen import cfamily
from partita.codegen.c import CPrinter
from partita.codegen.expr import c_name
from partita.codegen.gpulower import GpuPlan
from partita.codegen.looptree import Node
from partita.codegen.lower import LoweredPlan, accumulator_temporary, keeps_pair
from partita.codegen.promotion import Element
from partita.ir.lmad import LMAD
from partita.ir.operands import Instruction
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


@pytest.mark.slow
def test_loops_stop_where_the_plan_clamps_them() -> None:
    """A ``for`` loop stops at its logical dims' size exactly where the plan's
    :attr:`LoweredPlan.loop_clamps` says, and each such loop is the innermost tile of dims
    that overflow, with every instruction inside it iterating it; a loop over a middle tile
    of such a dim stops after its last iteration in range where :attr:`loop_trims` says."""
    root = partita.space(partita.kernel("matmul", m=10, n=37, k=19), "cpu",
                         cpu=AVX512_REFERENCE).root()
    assert isinstance(root, Candidate)
    seen = trimmed = 0
    for cand in sample_implementations(root, 12, random.Random(3)):
        printer = CPrinter(cand, "clamped")
        plan, k = printer.plan, cand.kernel
        code = printer.print().source
        for node in plan.subtree(plan.tree):
            logicals = plan.loop_clamps.get(id(node))
            if node.inst is not None or not node.dims or plan.sizes[node.dims[0]] == 1 \
                    or node.kind not in ("LOOP", "PARALLEL"):
                continue
            var = c_name(node.dims[0])
            clamp = f"{var} < ({plan.sizes[node.dims[0]]} < "
            trim = plan.loop_trims.get(id(node))
            if logicals:
                seen += 1
                assert {k.dim(d).logical for d in node.dims} == logicals
                assert all(k.dims_of(ld)[-1] in node.dims and plan.needs_guard(ld)
                           for ld in logicals)
                assert all(plan.iterates(i, node) for i in plan.insts_under(node))
                assert clamp in code, (var, code)
            elif trim is not None:  # a middle tile: it stops after its last iteration in range
                trimmed += 1
                logical, per, level = trim
                tiles = k.dims_of(logical)
                assert 0 < level < len(tiles) - 1 and tiles[level] in node.dims
                assert plan.needs_guard(logical) and not plan.loop_clamps.get(id(node))
                assert per == math.prod(int(plan.sizes[t]) for t in tiles[level + 1:])
                assert all(plan.iterates(i, node) for i in plan.insts_under(node))
                assert clamp in code and f"+ {per - 1}) / {per}" in code, (var, code)
            else:
                assert clamp not in code, (var, code)
    assert seen and trimmed


def _element_offset(plan: GpuPlan, inst: Instruction, view: LMAD, at: dict[str, int]) -> int:
    """The element ``inst`` accesses at tile indices ``at`` (0 where absent), by the array's
    layout, also past its end (tiles with a remainder run there, guarded)."""
    k = plan.k
    assert inst.access is not None
    logical = {}
    for ld in inst.access.logical_dims():
        tiles = k.dims_of(ld)
        logical[ld] = sum(at.get(d, 0) * math.prod(int(plan.sizes[m]) for m in tiles[i + 1:])
                          for i, d in enumerate(tiles))
    return view.offset + sum((ix.const + sum(c * logical[ld] for ld, c in ix.terms)) * stride
                             for ix, (_, stride) in zip(inst.access.index, view.dims,
                                                        strict=True))


@pytest.mark.slow
def test_gpu_alignment_is_decided_from_the_affine_offsets() -> None:
    """The GPU plan's affine form of an access is the element offset the array's layout
    gives at every tile index, and :meth:`GpuPlan.aligned` holds exactly where that offset
    is a multiple of the lanes at every index (checked at 0 and at each index alone, which
    decide an affine form, and at random points)."""
    rng = random.Random(5)
    root = partita.space(partita.kernel("matmul", m=12, n=20, k=6, stride_a=10), "gpu").root()
    assert isinstance(root, Candidate)
    verdicts = set()
    for cand in sample_implementations(root, 8, random.Random(4)):
        plan, k = GpuPlan(cand), cand.kernel
        for inst in (i for i in k.instructions if i.access is not None):
            assert inst.access is not None
            view = k.array(inst.access.array).lmad(dict(k.size_values))
            form = plan.access_form(inst)
            dims = [d for ld in inst.access.logical_dims() for d in k.dims_of(ld)]

            def offset(at: dict[str, int], inst: Instruction = inst, view: LMAD = view,
                       plan: GpuPlan = plan) -> int:
                return _element_offset(plan, inst, view, at)

            assert form.const == offset({})
            # Dims bound to one index (fused, or threads of one hardware dim) move together.
            groups = [[d for d in dims if plan.index_of[d] == i]
                      for i in dict.fromkeys(plan.index_of[d] for d in dims)]
            units = [dict.fromkeys(g, 1) for g in groups]
            points = [*units, *({d: v for g in groups for d, v in dict.fromkeys(
                g, rng.randrange(4)).items()} for _ in range(8))]
            for at in points:
                assert offset(at) == form.const + sum(
                    (form.coeffs[d] or 0) * v for d, v in at.items()), (inst.name, at)
            for lanes in (2, 4):
                verdict = plan.aligned(form, {}, lanes)
                verdicts.add(verdict)
                assert verdict == all(offset(at) % lanes == 0 for at in [{}, *units])
                for fixed in units:  # indices bound to a constant (an unrolled copy)
                    assert plan.aligned(form, fixed, lanes) == all(
                        offset({**at, **fixed}) % lanes == 0 for at in [{}, *units])
    assert verdicts == {True, False}


@pytest.mark.slow
def test_loops_keep_the_elements_the_plan_keeps(monkeypatch: pytest.MonkeyPatch) -> None:
    """A loop printed with temporaries kept in variables has one variable per element the
    plan's :func:`promotion` lists, loaded before the loop and stored after it, and no
    access to those temporaries' memory inside it."""
    root = partita.space(partita.kernel("matmul", m=64, n=48, k=32), "cpu",
                         cpu=AVX512_REFERENCE).root()
    assert isinstance(root, Candidate)
    kept_loops: list[tuple[dict[str, list[Element]], list[str]]] = []
    original = cfamily.print_promoted

    def recording(p: CPrinter, node: Node, env: dict[str, str], indent: int,
                  kept: dict[str, list[Element]]) -> None:
        start = len(p.lines)
        original(p, node, env, indent, kept)
        kept_loops.append((kept, p.lines[start:]))

    monkeypatch.setattr(cfamily, "print_promoted", recording)
    seen = 0
    for cand in sample_implementations(root, 40, random.Random(6)):
        kept_loops.clear()
        CPrinter(cand, "kept").print()
        for kept, lines in kept_loops:
            seen += 1
            assert "kept in variables across" in lines[0]
            first = next(i for i, line in enumerate(lines) if line.lstrip().startswith("for ("))
            depth = len(lines[first]) - len(lines[first].lstrip())
            last = next(i for i in range(first + 1, len(lines))
                        if lines[i] == " " * depth + "}")
            for name, elements in kept.items():
                assert elements and len(set(elements)) == len(elements)
                loads = [line for line in lines[1:first] if f"reg_{name}_" in line]
                stores = [line for line in lines[last + 1:] if f"reg_{name}_" in line]
                assert len(loads) == len(stores) == len(elements), (name, lines[:first])
                assert not any(f"{name}[" in line for line in lines[first:last + 1])
    assert seen
