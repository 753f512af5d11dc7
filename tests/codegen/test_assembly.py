"""What gcc makes of a register-blocked matmul micro-kernel: the inner loop must be full-width
FMAs on accumulators that stay in registers, each reading its broadcast operand straight from
memory. This is the shape of the fastest matmuls the search finds; a printer or flag change
that spills the accumulators or splits the vectors shows here before it shows in a benchmark.
"""

from __future__ import annotations

import itertools
import random
import re
import subprocess

import pytest

import partita
from partita.codegen.c import print_c
from partita.runtime.compile import DEFAULT_CC, DEFAULT_FLAGS
from partita.search.sampling import random_implementation
from partita.space.candidate import Candidate
from partita.targets.cpu.machine import host

REGISTER = {512: "zmm", 256: "ymm", 128: "xmm"}
VECTORS = 2
"""The micro-kernel's accumulator tile is rows() x VECTORS full vector registers."""


def rows() -> int:
    """Rows of the accumulator tile: 8 with 32 vector registers (AVX-512), 6 with 16 (AVX2:
    12 accumulators, the 2 vectors of B and a broadcast of A fill 15 of them)."""
    return min(8, (host().vector_registers - VECTORS - 1) // VECTORS)


def micro_kernel() -> Candidate:
    """A matmul whose accumulator tile (rows() rows by 2 vectors) lives in registers while
    the reduction runs, fed by vector loads of B and broadcasts of A."""
    cpu = host()
    lanes = cpu.lanes(4)
    if not cpu.has_fma or lanes < 4 or cpu.vector_bits not in REGISTER or rows() < 2:
        pytest.skip(f"the host has no FMA on vectors ({cpu.vector_bits}-bit registers)")
    cand = partita.space(partita.kernel("matmul", m=8 * rows(), n=VECTORS * lanes * 2,
                                        k=64)).root()
    decisions = [
        ("size", "i.2", rows()), ("size", "j.2", lanes), ("size", "j.1", VECTORS),
        ("size", "r.1", 64),
        ("dim_kind", "i.2", "UNROLL"), ("dim_kind", "j.1", "UNROLL"),
        ("dim_kind", "j.2", "VECTOR"),
    ]
    for choice, dim, value in decisions:
        cand = cand.restrict(choice, (dim,), [value])
        assert isinstance(cand, Candidate), cand
    nest = ["j.0", "i.0", "i.1", "r.0", "r.1", "i.2", "j.1", "j.2"]
    for outer, inner in itertools.pairwise(nest):
        cand = cand.restrict("order", (outer, inner), ["OUT"])
        assert isinstance(cand, Candidate), cand
    for level in range(3):
        for load, dim in (("i_a", "i"), ("j_b", "j")):
            cand = cand.restrict("order", (f"{load}.{level}", f"{dim}.{level}"), ["MERGED"])
            assert isinstance(cand, Candidate), cand
    for level in range(2):
        for load in ("r_a", "r_b"):
            cand = cand.restrict("order", (f"{load}.{level}", f"r.{level}"), ["MERGED"])
            assert isinstance(cand, Candidate), cand
    for temp in ("tmp_init_acc", "tmp_acc_st_c"):
        cand = cand.restrict("mem_space", (temp,), ["REGISTER"])
        assert isinstance(cand, Candidate), cand
    return random_implementation(cand, random.Random(0))


def loops(asm: str) -> list[list[str]]:
    """The bodies of the backward-jumping loops of an assembly listing."""
    lines = asm.splitlines()
    labels = {line[:-1]: i for i, line in enumerate(lines) if re.fullmatch(r"\.L\d+:", line)}
    out = []
    for i, line in enumerate(lines):
        m = re.match(r"\s+j\w+\s+(\.L\d+)$", line)
        if m and labels.get(m.group(1), i) < i:
            out.append(lines[labels[m.group(1)] + 1:i])
    return out


def test_the_micro_kernel_is_full_width_fmas_on_registers(tmp_path) -> None:
    prog = print_c(micro_kernel(), "micro_kernel")
    src = tmp_path / "micro_kernel.c"
    src.write_text(prog.source)
    flags = [f for f in DEFAULT_FLAGS if f not in ("-shared",)]
    asm = subprocess.run([DEFAULT_CC, *flags, "-S", "-o", "-", str(src)], check=True,
                         capture_output=True, text=True).stdout
    with_fma = [body for body in loops(asm) if any("vfmadd" in ins for ins in body)]
    assert with_fma, "no loop with FMAs"
    inner = min(with_fma, key=len)
    fmas = [ins for ins in inner if "vfmadd" in ins]
    reg = REGISTER[host().vector_bits]
    assert len(fmas) == rows() * VECTORS, inner
    assert all(f"%{reg}" in ins and not re.search(r"%[xyz]mm", ins.replace(f"%{reg}", ""))
               for ins in fmas), fmas
    # Accumulators stay in registers: nothing in the loop touches the stack.
    assert not any("(%rsp)" in ins for ins in inner), inner
    # A's elements are broadcast from memory inside the FMAs (or by a broadcast load).
    assert all("{1to" in ins for ins in fmas) or any("vbroadcastss" in ins for ins in inner)


def _no_parallel(cand: Candidate) -> Candidate:
    for d in cand.kernel.dims:
        kinds = [v for v in cand.domain("dim_kind", d.name) if v != "PARALLEL"]
        nxt = cand.restrict("dim_kind", (d.name,), kinds)
        assert isinstance(nxt, Candidate), nxt
        cand = nxt
    return cand


@pytest.mark.parametrize("seed", range(4))
def test_every_loop_of_two_iterations_or_more_stays_a_loop(tmp_path, seed: int) -> None:
    """The lower bound prices the innermost loop's body as printed (``rolled_loops``): gcc
    must not unroll, peel or thread away a LOOP, however short (the assembly has at least a
    backward jump per printed loop of two iterations or more). Without the flags that stop
    it, it unrolls the loops of this small matmul whole."""
    root = partita.space(partita.kernel("matmul", m=6, n=16, k=4)).root()
    assert isinstance(root, Candidate)
    cand = random_implementation(_no_parallel(root), random.Random(seed))
    src = tmp_path / "small.c"
    src.write_text(print_c(cand, "small").source)

    def backward_jumps(flags: list[str]) -> int:
        return len(loops(subprocess.run([DEFAULT_CC, *flags, "-S", "-o", "-", str(src)],
                                        check=True, capture_output=True, text=True).stdout))

    flags = [f for f in DEFAULT_FLAGS if f != "-shared"]
    printed = sum(1 for line in src.read_text().splitlines()
                  if re.match(r"\s*for \(int64_t \w+ = 0; \w+ < \d+;", line)
                  and not re.search(r"< 1;", line))
    assert backward_jumps(flags) >= printed
    unrolling = [f for f in flags if f not in (
        "--param=max-completely-peel-times=0", "-fno-peel-loops", "-fno-thread-jumps")]
    if printed:
        assert backward_jumps(unrolling) < printed
