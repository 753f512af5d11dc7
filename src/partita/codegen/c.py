"""Print a fully decided CPU candidate as C99 (GNU dialect) with OpenMP.

The C printer is the C-family walk (:mod:`partita.codegen.cfamily`) of the candidate's
lowered plan (:mod:`partita.codegen.lower`), with what is C's own: the function and its
packed entry (:mod:`partita.codegen.program`), GCC vector types (:mod:`partita.codegen.vector`),
heap buffers, software prefetches, and OpenMP.

``PARALLEL`` loops form one ``omp for collapse(n) schedule(static)`` nest inside a single
parallel region around their top-level nest; the other top-level nests run before or after
it on one thread (a kernel that lets each of its nests be a region of its own, such as the
chunked prefix sum, has one such region per nest with parallel loops). Heap buffers the
plan puts per thread are allocated inside the region.

A parallel loop that splits a reduction (see :mod:`partita.targets.cpu.space`) gives each
thread a private copy of the accumulator, declared in the region under the accumulator's own
name (so the code inside prints as it would on one thread) and set to the identity of the
combine operation; after its share of the loop (``nowait``) each thread joins its copy into
the shared accumulator in a critical section, and the copies of the final values for the
accumulation's consumers in other nests are written after the region, from the accumulator.
OpenMP's ``reduction`` clause would do the same for scalars and plain arrays, but gcc 12
refuses it on its vector types (a register tile is an array of them: "user defined reduction
not found") and puts the private copies of an array section on each thread's stack (a
4 MiB ``sub rsp`` for a 1024x1024 float accumulator), where a large accumulator overflows the
threads' stacks; private copies printed by hand handle every storage alike, large ones on
the heap. A parallel loop over scatter updates (a histogram's) gives each thread a private
copy of the array they update, zeroed on the heap under the array's name, joined the same
way.
"""

from __future__ import annotations

import math

from partita.codegen.cfamily import CFamilyPrinter
from partita.codegen.expr import CodegenError, c_literal, c_name, fold_product, fold_sum
from partita.codegen.lanes import identity_literal
from partita.codegen.looptree import Node
from partita.codegen.lower import Prefetch, Slot, SplitReduction, Storage
from partita.codegen.program import Param, Program, packed_args, prototype, signature
from partita.codegen.vector import (
    STREAM_FENCE,
    broadcast,
    needs_intrinsics,
    needs_x86_intrinsics,
    vector_header,
)
from partita.ir.operands import Instruction
from partita.ir.types import DType
from partita.space.candidate import Candidate
from partita.space.nest import CommonKind
from partita.targets.cpu.space import MemSpace

__all__ = ["CPrinter", "CodegenError", "Slot", "Storage", "c_literal", "print_c"]


class CPrinter(CFamilyPrinter):
    """Prints one implementation. Use :func:`print_c`."""

    def print(self) -> Program:
        body: list[str] = []
        self.lines = body
        k = self.k
        params = signature(k)
        self._print_function(params)
        head = self._header(params)
        source = "\n".join(head + body) + "\n"
        return Program(k, self.entry, source, params,
                       decisions=tuple(d.to_json() for d in self.cand.decisions))

    def _header(self, params: tuple[Param, ...]) -> list[str]:
        k = self.k
        out = [f"/* partita: kernel {k.name} ({k.structural_hash}), generated implementation. */",
               "#include <stdint.h>", "#include <stdlib.h>", "#include <string.h>",
               "#include <math.h>", ""]
        if needs_intrinsics(self.helpers):
            out[5:5] = ["#if defined(__AVX512F__) || defined(__AVX2__)", "#include <immintrin.h>",
                        "#endif"]
        if needs_x86_intrinsics(self.helpers) or self.plan.streamed:
            out[5:5] = ["#if defined(__SSE2__)", "#include <immintrin.h>", "#endif"]
        out += vector_header(self.vector_types, self.helpers)
        if self.plan.streamed:
            out += STREAM_FENCE
        if self.vector_types:
            out.append("")
        return out

    def _print_function(self, params: tuple[Param, ...]) -> None:
        self.emit(0, prototype(self.entry, params))
        self.emit(0, "{")
        nests = self.plan.parallel_nests
        shared = self.plan.shared_heap
        for st in shared:
            self._emit_heap(1, st)
        self.declare(self.tree, 1)
        for child in self.tree.children:
            if any(child is nest for nest in nests):
                self._print_parallel(child, [
                    st for st in self.plan.per_thread_heap
                    if self.plan.within(self.plan.lca(st.accessors), child)])
            else:
                self.print_node(child, {}, 1)
        for st in shared:
            self.emit(1, f"free({st.name});")
        if self.plan.streamed:
            self.emit(1, "stream_fence();")
        self.emit(0, "}")
        self.emit(0, "")
        self._print_packed(params)

    def _print_parallel(self, top: Node, per_thread: list[Storage]) -> None:
        """The nest of the parallel loops: one OpenMP parallel region (threads start once
        per call), the parallel loops collapsed into one work-shared loop."""
        parallel = self.plan.parallel_chain(top)
        env: dict[str, str] = {}
        for p in parallel:
            env |= dict.fromkeys(p.dims, c_name(p.dims[0]) if self.sizes[p.dims[0]] != 1
                                 else "0")
        loops = self.plan.parallel_loops(top)
        depth = 1
        if loops:
            self.emit(1, "#pragma omp parallel")
            self.emit(1, "{")
            depth = 2
        for st in per_thread:
            self._emit_heap(depth, st)
        split = self.plan.split_in(top)
        private = self.plan.private_arrays_of(loops)
        for red in split:
            self._open_private(red, depth)
        for array in private:
            self._open_private_array(array, depth)
        if loops:
            collapse = f" collapse({len(loops)})" if len(loops) > 1 else ""
            nowait = " nowait" if split or private else ""
            self.emit(depth, f"#pragma omp for{collapse} schedule(static){nowait}")
            for p in loops:
                var = c_name(p.dims[0])
                size = self.sizes[p.dims[0]]
                self.emit(depth, f"for ({self.idx_t} {var} = 0; {var} < {size}; ++{var})")
        self.emit(depth, "{")
        # The partial values of a split accumulation are not its values: its copies for
        # other nests are written after the region (_print_split_copies).
        self.sunk |= {red.inst for red in split}
        try:
            self._print_versioned(loops, env, depth + 1,
                                  lambda at: self.print_body(parallel[-1], env, at))
        finally:
            self.sunk -= {red.inst for red in split}
        self.emit(depth, "}")
        if split:
            self._print_combine(split, depth)
        if private:
            self._join_private_arrays(depth, private)
        for st in per_thread:
            self.emit(depth, f"free({st.name});")
        if loops and self.plan.streamed:
            # Each thread's streaming stores reach memory before the region's closing
            # barrier, after which other threads and the caller read what they wrote.
            self.emit(depth, "stream_fence();")
        if loops:
            self.emit(1, "}")
        for red in split:
            if self.plan.copies_of(red.inst):
                self._print_split_copies(red.inst, 1)

    def emit_store(self, indent: int, arr: str, base: str, step: int | str, value: str,
                   dtype: DType, lanes: int, count: str | None = None,
                   stream: bool = False) -> None:
        """A store; with ``stream``, a whole contiguous vector goes past the caches
        (``stream_vt``, a plain store where the address is not aligned)."""
        if stream and lanes > 1 and step == 1 and count is None:
            vt = self.vtype(dtype, lanes)
            self.helpers.add(("stream", vt))
            self.emit(indent, f"stream_{vt}(&{arr}[{base}], {value});")
            return
        super().emit_store(indent, arr, base, step, value, dtype, lanes, count)

    def _open_private(self, red: SplitReduction, indent: int) -> None:
        """A thread's private copy of a split accumulation's accumulator, under its name,
        set to the identity of the combine operation; ``shared_NAME`` points to the
        accumulator itself."""
        st = red.storage
        c = st.dtype.c_type
        identity = identity_literal(red.op, st.dtype)
        if st.temp is None:
            self.emit(indent, f"{c} *const shared_{st.name} = &{st.name};")
            self.emit(indent, f"{c} {st.name} = {identity};")
            return
        count: int | str = st.elements
        if st.lanes > 1:
            vt = self.vtype(st.dtype, st.lanes)
            count = int(count) // st.lanes
            self.emit(indent, f"{vt} *const shared_{st.name} = {st.name};")
            self.emit(indent, f"{vt} {st.name}[{count}];")
            identity = broadcast(vt, identity)
        else:
            self.emit(indent, f"{c} *const shared_{st.name} = {st.name};")
            if st.space in (MemSpace.REGISTER, MemSpace.LOCAL):
                self.emit(indent, f"{c} {st.name}[{count}] __attribute__((aligned(64)));")
            else:  # on the heap: as large as the accumulator, too large for a stack
                self._emit_heap(indent, st)
        self.emit(indent, f"for ({self.idx_t} e_ = 0; e_ < {count}; ++e_) "
                          f"{st.name}[e_] = {identity};")

    def _array_elements(self, array: str) -> int:
        return self.k.array(array).footprint({s.name: int(s.value) for s in self.k.sizes
                                              if s.value is not None})

    def _open_private_array(self, array: str, indent: int) -> None:
        """A thread's private copy of an array its scatter updates add into, under the
        array's name and on the heap (bins may be many), starting at 0; ``shared_NAME``
        points to the array itself."""
        c = self.k.array(array).dtype.c_type
        count = self._array_elements(array)
        self.emit(indent, f"{c} *const shared_{array} = {array};")
        self.emit(indent, f"{c} *const {array} = calloc({count}, sizeof({c}));")

    def _join_private_arrays(self, indent: int, arrays: list[str]) -> None:
        """Each thread adds its private copies into the arrays, one thread at a time."""
        self.emit(indent, "#pragma omp critical")
        self.emit(indent, "{")
        for array in arrays:
            count = self._array_elements(array)
            self.emit(indent + 1, f"for ({self.idx_t} e_ = 0; e_ < {count}; ++e_) "
                                  f"shared_{array}[e_] += {array}[e_];")
        self.emit(indent, "}")
        for array in arrays:
            self.emit(indent, f"free({array});")

    def _print_combine(self, split: list[SplitReduction], indent: int) -> None:
        """Each thread joins its private accumulators into the shared ones, one thread at a
        time (the threads that finish first join while the others still run)."""
        self.emit(indent, "#pragma omp critical")
        self.emit(indent, "{")
        for red in split:
            st = red.storage
            combine = Instruction("combine", red.op, (), (), st.dtype)
            if st.temp is None:
                value = self.arith(combine, [f"*shared_{st.name}", st.name], None)
                self.emit(indent + 1, f"*shared_{st.name} = {value};")
                continue
            count: int | str = st.elements
            vt = None
            if st.lanes > 1:
                count = int(count) // st.lanes
                vt = self.vtype(st.dtype, st.lanes)
            value = self.arith(combine, [f"shared_{st.name}[e_]", f"{st.name}[e_]"], vt)
            self.emit(indent + 1, f"for ({self.idx_t} e_ = 0; e_ < {count}; ++e_) "
                                  f"shared_{st.name}[e_] = {value};")
        self.emit(indent, "}")
        for red in split:
            if red.storage.temp is not None and red.storage.space not in (MemSpace.REGISTER,
                                                                          MemSpace.LOCAL):
                self.emit(indent, f"free({red.storage.name});")

    def _print_split_copies(self, inst: str, indent: int) -> None:
        """After the parallel region, the copies of a split accumulation's final values for
        its consumers in other nests, read from the accumulator: a loop per tile of its
        other dims (the init and the consumers run outside the parallel nest, so the
        accumulator and its copies are indexed by all of them)."""
        k = self.k
        reduction = k.reduction_dims_of(inst)
        names = ", ".join(t.name for t in self.plan.copies_of(inst))
        self.emit(indent, f"{{ /* {names} written after the parallel reduction */")
        env = dict.fromkeys(reduction, "0")
        depth = indent + 1
        # Its vector dim (innermost) copies whole vectors, as the accumulation computes them
        # (unless the vector runs along the reduction: its lanes are joined by then).
        lane = next(((n, int(self.sizes[n.dims[0]])) for n in self.plan.loops_to(
            inst, self.tree)[:-1] if n.kind == CommonKind.VECTOR and self.plan.iterates(inst, n)
            and not set(n.dims) & reduction), None)
        for d in k.iteration_dims(inst):
            if d in reduction:
                continue
            size = self.sizes[d]
            if size == 1 or (lane is not None and d in lane[0].dims):
                env[d] = "0"
                continue
            var = env[d] = c_name(d)
            self.emit(depth, f"for ({self.idx_t} {var} = 0; {var} < {size}; ++{var}) {{")
            depth += 1
        self._write_copies(inst, env, depth, lane)
        while depth > indent + 1:
            depth -= 1
            self.emit(depth, "}")
        self.emit(indent, "}")

    def _print_packed(self, params: tuple[Param, ...]) -> None:
        args = packed_args(params)
        self.emit(0, f"void {self.entry}_packed(void **args)")
        self.emit(0, "{")
        self.emit(1, f"{self.entry}({', '.join(args)});")
        self.emit(0, "}")

    def _emit_heap(self, indent: int, st: Storage) -> None:
        """A temporary on the heap. Where a dim has a partial tile, its lanes past the end
        compute on whole vectors of temporaries whose slots there nothing writes: the buffer
        starts zeroed, as the masked loads of the kernel's arrays fill those lanes, since
        what a fresh buffer holds can be denormal, and one such operand per FMA ran a conv
        50 times slower."""
        c = st.dtype.c_type
        n = st.elements
        size = f"((size_t)({n}) * sizeof({c}) + 63) / 64 * 64"
        self.emit(indent, f"{c} *restrict {st.name} = ({c} *)aligned_alloc(64, {size});")
        if any(self.plan.needs_guard(ld.name) for ld in self.k.logical_dims):
            self.emit(indent, f"if ({st.name}) memset({st.name}, 0, {size});")

    def emit_prefetch(self, pf: Prefetch, env: dict[str, str], indent: int) -> None:
        """The prefetches of one reader iteration: with ``n`` lines to fetch over ``m``
        reader iterations, one every ``m // n`` iterations, or ``ceil(n / m)`` in each."""
        lines = pf.lines
        radices = [int(self.sizes[n.dims[0]]) for n in lines]
        if radices:
            radices[-1] = -(-radices[-1] // pf.step)
        count = math.prod(radices)
        sizes = [int(self.sizes[n.dims[0]]) for n in pf.reader]
        trips = math.prod(sizes)
        q_terms = []
        stride = 1
        for node, size in zip(reversed(pf.reader), reversed(sizes), strict=True):
            if env[node.dims[0]] != "0":
                q_terms.append(fold_product([env[node.dims[0]], stride]))
            stride *= size
        penv = dict(env)
        n_terms = []
        points = 1
        for node in pf.outer:
            size = int(self.sizes[node.dims[0]])
            if env[node.dims[0]] != "0":
                n_terms.append(fold_product([env[node.dims[0]], points]))
            ix = "pf_n" if points == 1 else f"pf_n / {points}"
            penv |= dict.fromkeys(node.dims, f"(({ix}) % {size})" if node is not pf.outer[-1]
                                  else f"({ix})")
            points *= size
        penv |= {d: "0" for n in pf.copy if n.kind == CommonKind.VECTOR for d in n.dims}
        weight = count
        for i, (node, radix) in enumerate(zip(lines, radices, strict=True)):
            weight //= radix
            ix = "pf_e" if weight == 1 else f"pf_e / {weight}"
            if i > 0 and radix > 1:
                ix = f"({ix}) % {radix}"
            if i == len(lines) - 1 and pf.step > 1:
                ix = f"({ix}) * {pf.step}"
            penv |= dict.fromkeys(node.dims, f"({ix})" if radix > 1 else "0")
        base, _ = self.access_address(pf.load, penv, set())
        arr = pf.load.access.array if pf.load.access else ""
        # Integer arithmetic: the address of a row past a partial tile is never dereferenced
        # (a prefetch does not fault) but would be out of bounds as a pointer.
        fetch = (f"__builtin_prefetch((const void *)((uintptr_t){arr} + (uintptr_t)({base}) "
                 f"* {pf.load.dtype.itemsize}u), 0, 3);")
        self.emit(indent, f"{{ /* prefetch {pf.temp} for the next {pf.outer[0].dims[0]} */")
        self.emit(indent + 1, f"const {self.idx_t} pf_n = {fold_sum([*n_terms, '1'])};")
        self.emit(indent + 1, f"const {self.idx_t} pf_q = {fold_sum(q_terms)};")
        if count <= trips:
            every = trips // count
            self.emit(indent + 1, f"if (pf_n < {points}"
                                  + (f" && pf_q % {every} == 0" if every > 1 else "")
                                  + f" && pf_q < {count * every}) {{")
            self.emit(indent + 2, f"const {self.idx_t} pf_e = pf_q" +
                      (f" / {every};" if every > 1 else ";"))
            self.emit(indent + 2, fetch)
            self.emit(indent + 1, "}")
        else:
            each = -(-count // trips)
            self.emit(indent + 1, f"if (pf_n < {points}) {{")
            self.emit(indent + 2, f"for ({self.idx_t} pf_u = 0; pf_u < {each}; ++pf_u) {{")
            self.emit(indent + 3, f"const {self.idx_t} pf_e = pf_q * {each} + pf_u;")
            self.emit(indent + 3, f"if (pf_e < {count}) {fetch}")
            self.emit(indent + 2, "}")
            self.emit(indent + 1, "}")
        self.emit(indent, "}")


def print_c(cand: Candidate, entry: str | None = None) -> Program:
    """The C program of a fully decided CPU candidate."""
    if not cand.is_implementation:
        raise CodegenError("only fully decided candidates can be printed")
    name = entry or f"partita_{cand.kernel.name}"
    return CPrinter(cand, name).print()
