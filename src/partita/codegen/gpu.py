"""Print a fully decided GPU candidate as CUDA C or OpenCL C.

Both printers are the C-family walk (:mod:`partita.codegen.cfamily`) of the candidate's GPU
plan (:mod:`partita.codegen.gpulower`: hardware dimensions, which threads run what, where
temporaries live, barriers), with what changes on a GPU: a ``BLOCK`` or ``THREAD`` loop is no
loop (its index is the block's or thread's index along its hardware dimension), ``SHARED``
temporaries are ``__shared__`` / ``__local`` arrays of the block, and ``GLOBAL`` temporaries
are workspace buffers the caller allocates (:attr:`GpuProgram.workspace`) and passes after
the kernel's own parameters.

Vectors and caches
    The loads and stores of a ``VECTOR`` dimension act on whole ``float2``/``float4`` values
    where their addresses are contiguous and provably aligned (an affine address whose terms
    are multiples of the lane count); in OpenCL, ``vloadn``/``vstoren`` cover the unaligned
    ones, in CUDA each lane is accessed alone. A vector dimension whose instructions cannot
    act on whole vectors (arithmetic, lanes overwriting one element, a vector type CUDA has no
    native access for) is unrolled. The ``cache`` decision of an array access maps to CUDA's
    load and store cache operators (``__ldg`` for ``READ_ONLY``, ``__ldca``, ``__ldcg``,
    ``__ldcv``, ``__stcg``, ``__stcs``); OpenCL has no such control beyond ``const __global``
    inputs.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from partita.codegen.cfamily import CFamilyPrinter
from partita.codegen.expr import CodegenError, fold_product, fold_sum, math_call
from partita.codegen.gpulower import (
    HW_NAMES,
    MAX_BLOCK,
    MAX_GRID,
    MEMORY_SPACES,
    GpuPlan,
    UnsoundCandidate,
)
from partita.codegen.gpuprogram import GpuProgram, GridSize, Workspace
from partita.codegen.looptree import Node
from partita.codegen.lower import Storage
from partita.codegen.program import Param, c_parameters, signature
from partita.ir.operands import Instruction, Value
from partita.ir.types import DType
from partita.space.candidate import Candidate
from partita.space.temporaries import CommonPlace
from partita.targets.gpu.space import Cache
from partita.targets.gpu.space import DimKind as GpuKind
from partita.targets.gpu.space import MemSpace as GpuPlace

__all__ = ["HW_NAMES", "MAX_BLOCK", "MAX_GRID", "MEMORY_SPACES", "CudaPrinter", "GpuPrinter",
           "GpuProgram", "GridSize", "OpenclPrinter", "UnsoundCandidate", "Workspace",
           "print_cuda", "print_opencl"]

CUDA_STATIC_SHARED_BYTES = 48 * 1024
"""CUDA's limit on statically declared shared memory; beyond it the printer declares one
dynamic buffer (``extern __shared__``) and the launch must pass its size."""


@dataclass
class _Vec:
    """A vector value: one expression of vector type (``expr``) or one per lane (``lanes``)."""

    expr: str | None = None
    lanes: list[str] = field(default_factory=list)

class GpuPrinter(CFamilyPrinter):
    """What CUDA and OpenCL share; subclasses give the syntax. Use :func:`print_cuda` or
    :func:`print_opencl`."""

    language = ""
    barrier_stmt = ""
    plan_class = GpuPlan
    versions_padding = False  # keeps a kernel's code and its build time as they were
    plan: GpuPlan

    def __init__(self, cand: Candidate, entry: str) -> None:
        self._tmp_ids = 0
        self._current: Instruction | None = None
        self.shared_bytes = 0
        super().__init__(cand, entry)
        self.hw_of = self.plan.hw_of
        self.thread_sizes = self.plan.thread_sizes
        self.block_nodes = self.plan.block_nodes
        self.thread_classes = self.plan.thread_classes
        self.idx_t = self._index_type()

    # -- hardware indices --------------------------------------------------------------------

    def _index_type(self) -> str:
        """32-bit indices when every size and buffer is known and small: GPUs do 64-bit
        integer arithmetic in several instructions."""
        limit = 2 ** 31 - 1
        if any(not isinstance(s, int) or s > limit for s in self.sizes.values()):
            return self.long_t
        values = {s.name: s.value for s in self.k.sizes if s.value is not None}
        for a in self.k.arrays:
            try:
                if a.footprint(values) > limit:
                    return self.long_t
            except Exception:
                return self.long_t
        return "int"

    # -- syntax (subclasses) -----------------------------------------------------------------

    long_t = "long"

    def ctype(self, dtype: DType) -> str:
        return dtype.c_type

    def hw_index(self, kind: str, h: int) -> str:
        raise NotImplementedError

    def vector_ok(self, dtype: DType, lanes: int) -> bool:
        raise NotImplementedError

    def vec_type(self, dtype: DType, lanes: int) -> str:
        return f"{self.ctype(dtype)}{lanes}"

    def vec_make(self, dtype: DType, parts: list[str]) -> str:
        raise NotImplementedError

    def lane(self, expr: str, i: int) -> str:
        return f"{expr}.s{i:x}"

    def array_load(self, inst: Instruction, arr: str, index: str) -> str:
        return f"{arr}[{index}]"

    def array_store(self, inst: Instruction, arr: str, index: str, value: str) -> str:
        return f"{arr}[{index}] = {value};"

    def vec_load(self, inst: Instruction | None, ptr: str, space: str, dtype: DType,
                 lanes: int, aligned: bool) -> str | None:
        """A vector load from ``ptr`` (an address expression), or None if not possible."""
        raise NotImplementedError

    def vec_store(self, inst: Instruction | None, ptr: str, space: str, dtype: DType,
                  lanes: int, aligned: bool, value: str) -> str | None:
        raise NotImplementedError

    def shared_decls(self, temps: list[Storage]) -> list[str]:
        raise NotImplementedError

    def private_array(self, st: Storage) -> str:
        raise NotImplementedError

    def kernel_head(self, params: list[str], block: tuple[int, int, int]) -> list[str]:
        raise NotImplementedError

    def c_params(self, params: tuple[Param, ...], workspace: list[Storage]) -> list[str]:
        raise NotImplementedError

    def preamble(self) -> list[str]:
        return []

    # -- printing ----------------------------------------------------------------------------

    def _hw_var(self, kind: str, h: int) -> str:
        return f"{'bid' if kind == GpuKind.BLOCK else 'tid'}_{HW_NAMES[h]}"

    def _grid(self) -> list[GridSize]:
        grid: list[GridSize] = [1, 1, 1]
        for b in self.block_nodes:
            grid[self.hw_of[id(b)]] = self.sizes[b.dims[0]]
        return grid

    def _bound(self, node: Node) -> str:
        """The index a BLOCK or THREAD node binds: its hardware index, or 0 when alone."""
        h = self.hw_of[id(node)]
        if node.kind == GpuKind.THREAD:
            return "0" if self.thread_sizes[h] == 1 else self._hw_var(GpuKind.THREAD, h)
        return "0" if self._grid()[h] == 1 else self._hw_var(GpuKind.BLOCK, h)

    def print(self) -> GpuProgram:
        k = self.k
        params = signature(k)
        storages = self.plan.all_storage()
        workspace = [st for st in storages
                     if st.temp is not None and st.space == CommonPlace.GLOBAL]
        shared = [st for st in storages if st.temp is not None and st.space == GpuPlace.SHARED]
        for st in shared:
            if not isinstance(st.elements, int):
                raise CodegenError(f"{st.name}: shared memory of dynamic size {st.elements}")
        self.shared_bytes = sum(_padded(int(st.elements) * st.dtype.itemsize)
                                for st in shared)
        private = sum(int(st.elements) * st.dtype.itemsize for st in storages
                      if st.temp is not None and st.space == CommonPlace.REGISTER
                      and isinstance(st.elements, int))
        block = tuple(self.thread_sizes + [1] * (3 - len(self.thread_sizes)))
        grid = self._grid()
        body: list[str] = []
        self.lines = body
        self.emit(0, "{")
        for line in self.shared_decls(shared):
            self.emit(1, line)
        for h, n in enumerate(self.thread_sizes):
            if n > 1:
                self.emit(1, f"const int {self._hw_var(GpuKind.THREAD, h)} = "
                             f"{self.hw_index(GpuKind.THREAD, h)};")
        for h, g in enumerate(grid):
            if g != 1:
                self.emit(1, f"const {self.idx_t} {self._hw_var(GpuKind.BLOCK, h)} = "
                             f"{self.hw_index(GpuKind.BLOCK, h)};")
        self.print_body(self.tree, {}, 1)
        self.emit(0, "}")
        hardware = self._hardware_names()
        head = self._comment(grid, block, workspace, hardware) + self.preamble()
        head += self.kernel_head(self.c_params(params, workspace),
                                 (block[0], block[1], block[2]))
        source = "\n".join(head + body) + "\n"
        ws = tuple(Workspace(st.name, st.dtype.value, st.elements) for st in workspace)
        return GpuProgram(
            k, self.entry, source, params, language=self.language,
            decisions=tuple(d.to_json() for d in self.cand.decisions),
            grid=(grid[0], grid[1], grid[2]), block=(block[0], block[1], block[2]),
            workspace=ws, shared_bytes=self.shared_bytes,
            dynamic_shared_bytes=self._dynamic_shared(), private_bytes=private,
            hardware=hardware)

    def _dynamic_shared(self) -> int:
        return 0

    def _hardware_names(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        out = []
        for b in self.block_nodes:
            out.append((f"block.{HW_NAMES[self.hw_of[id(b)]]}", tuple(b.dims)))
        for h, c in enumerate(self.thread_classes):
            out.append((f"thread.{HW_NAMES[h]}", tuple(d for n in c for d in n.dims)))
        return tuple(out)

    def _comment(self, grid: list[GridSize], block: tuple[int, ...], workspace: list[Storage],
                 hardware: tuple[tuple[str, tuple[str, ...]], ...]) -> list[str]:
        k = self.k
        out = [f"/* partita: kernel {k.name} ({k.structural_hash}), generated implementation.",
               f" * launch: grid ({', '.join(str(g) for g in grid)}), "
               f"block ({', '.join(str(b) for b in block)}); "
               f"shared memory {self.shared_bytes} bytes"]
        for name, dims in hardware:
            out.append(f" * {name}: {', '.join(dims)}")
        for st in workspace:
            out.append(f" * workspace {st.name}: {st.dtype.value}[{st.elements}] "
                       "(argument after the kernel's parameters)")
        out.append(" */")
        return out

    def print_body(self, node: Node, env: dict[str, str], indent: int) -> None:
        self.declare(node, indent)
        marks = self.plan.barriers.get(id(node), set())
        for i, child in enumerate(node.children):
            if i in marks:
                self.emit(indent, self.barrier_stmt)
            self.print_node(child, env, indent)
        if len(node.children) in marks:
            self.emit(indent, self.barrier_stmt)

    def declare(self, node: Node, indent: int, scalar: bool = False) -> None:
        for st in self.plan.all_storage():
            if (st.space not in ("VAR", CommonPlace.REGISTER)
                    or self.plan.lca(st.accessors) is not node):
                continue
            c = self.ctype(st.dtype)
            if st.temp is not None:
                self.emit(indent, self.private_array(st))
            elif st.vector_dim is not None and not scalar:
                self.emit(indent, f"{self.vec_type(st.dtype, int(self.sizes[st.vector_dim]))} "
                                  f"{st.name};")
            else:
                self.emit(indent, f"{c} {st.name};")

    def print_node(self, node: Node, env: dict[str, str], indent: int) -> None:
        """Block and thread dims bind hardware indices; the rest print as on the CPU."""
        if node.inst is None and node.kind in (GpuKind.BLOCK, GpuKind.THREAD):
            h = self.hw_of[id(node)]
            hw = f"{'blockIdx' if node.kind == GpuKind.BLOCK else 'threadIdx'}.{HW_NAMES[h]}"
            self.emit(indent, f"{{ /* {node.kind.lower()} {', '.join(node.dims)} = {hw} */")
            self.print_body(node, {**env, **dict.fromkeys(node.dims, self._bound(node))},
                             indent + 1)
            self.emit(indent, "}")
        else:
            super().print_node(node, env, indent)

    # -- vector dimensions -------------------------------------------------------------------

    def print_lanes(self, node: Node, env: dict[str, str], indent: int, lanes: int) -> None:
        """A vector dimension printed as unrolled scalar code (no loop index is needed)."""
        for i in range(lanes):
            self.emit(indent, f"{{ /* {node.dims[0]} = {i} */")
            self.declare(node, indent + 1, scalar=True)
            lenv = {**env, **dict.fromkeys(node.dims, str(i))}
            for child in node.children:
                self.print_inst(self.k.inst(child.inst or ""), lenv, indent + 1, None)
            self.emit(indent, "}")

    def vector_mode(self, node: Node, venv: dict[str, str], lanes: int) -> bool:
        """Whether every instruction iterating ``node`` can act on whole vectors: memory
        accesses only, each lane writing its own element."""
        lane_dims = set(node.dims)
        for child in node.children:
            if child.inst is None:
                return False
            inst = self.k.inst(child.inst)
            if not self.plan.iterates(inst.name, node):
                continue
            if inst.op not in ("load", "store") or not self.vector_ok(inst.dtype, lanes):
                return False
            if inst.access is not None and inst.access.fill is not None:
                return False  # a padded view tests each lane (codegen.padded)
            if inst.op == "store":
                if not all(isinstance(op, Value) for op in inst.operands):
                    return False
                if self.access_address(inst, venv, lane_dims)[1] == 0:
                    return False
                continue
            own = self.storage[inst.name]
            if own.temp is None and own.vector_dim not in node.dims:
                return False
            targets = [st for (p, _), st in self.temps.items() if p == inst.name]
            if own.temp is not None:
                targets.append(own)
            for st in targets:
                if self.temp_address(st, venv, "p", lane_dims)[1] == 0:
                    return False
        return True

    @staticmethod
    def _constants(env: dict[str, str]) -> dict[str, int]:
        """The tile dims bound to a constant where the printer is (the plan's
        :meth:`GpuPlan.aligned` reads them)."""
        return {d: int(v) for d, v in env.items() if v.isdigit()}

    def _fresh(self) -> str:
        self._tmp_ids += 1
        return f"vec_{self._tmp_ids}"

    def _as_lanes(self, val: _Vec, dtype: DType, lanes: int, indent: int) -> list[str]:
        if val.expr is None:
            return val.lanes
        name = val.expr
        if not re.fullmatch(r"[A-Za-z_][A-Za-z_0-9]*", name):
            name = self._fresh()
            self.emit(indent, f"const {self.vec_type(dtype, lanes)} {name} = {val.expr};")
        return [self.lane(name, i) for i in range(lanes)]

    def _as_vector(self, val: _Vec, dtype: DType) -> str:
        return val.expr if val.expr is not None else self.vec_make(dtype, val.lanes)

    def _vec_read(self, st: Storage, env: dict[str, str], side: str, lane_dims: set[str],
                  lanes: int) -> _Vec:
        if st.temp is None:
            return _Vec(st.name) if st.vector_dim is not None else _Vec(lanes=[st.name] * lanes)
        base, step = self.temp_address(st, env, side, lane_dims)
        if step == 0:
            return _Vec(lanes=[f"{st.name}[{base}]"] * lanes)
        if step == 1:
            aligned = self.plan.aligned(self.plan.temp_form(st, side), self._constants(env),
                                        lanes)
            expr = self.vec_load(None, _address(st.name, base), st.space, st.dtype, lanes,
                                 aligned)
            if expr is not None:
                return _Vec(expr)
        return _Vec(lanes=[f"{st.name}[{fold_sum([base, str(i * step)])}]"
                           for i in range(lanes)])

    def _vec_write(self, st: Storage, env: dict[str, str], side: str, lane_dims: set[str],
                   lanes: int, val: _Vec, indent: int) -> None:
        if st.temp is None:
            if st.vector_dim is None:
                raise CodegenError(f"{st.name}: a vector value kept in a scalar")
            self.emit(indent, f"{st.name} = {self._as_vector(val, st.dtype)};")
            return
        base, step = self.temp_address(st, env, side, lane_dims)
        if step == 1:
            aligned = self.plan.aligned(self.plan.temp_form(st, side), self._constants(env),
                                        lanes)
            stmt = self.vec_store(None, _address(st.name, base), st.space, st.dtype, lanes,
                                  aligned, self._as_vector(val, st.dtype))
            if stmt is not None:
                self.emit(indent, stmt)
                return
        parts = self._as_lanes(val, st.dtype, lanes, indent)
        for i in range(lanes):
            self.emit(indent, f"{st.name}[{fold_sum([base, str(i * step)])}] = {parts[i]};")

    def _print_vector_inst(self, inst: Instruction, env: dict[str, str], indent: int,
                           node: Node, lanes: int) -> None:
        lane_dims = set(node.dims)
        assert inst.access is not None
        arr = inst.access.array
        base, step = self.access_address(inst, env, lane_dims)
        aligned = step == 1 and self.plan.aligned(self.plan.access_form(inst),
                                                  self._constants(env), lanes)
        if inst.op == "load":
            val: _Vec
            if step == 0:
                name = self._fresh()
                self.emit(indent, f"const {self.ctype(inst.dtype)} {name} = "
                                  f"{self.array_load(inst, arr, base)};")
                val = _Vec(lanes=[name] * lanes)
            else:
                expr = (self.vec_load(inst, _address(arr, base), "ARRAY", inst.dtype, lanes,
                                      aligned) if step == 1 else None)
                val = _Vec(expr) if expr is not None else _Vec(lanes=[
                    self.array_load(inst, arr, _lane_index(base, step, i))
                    for i in range(lanes)])
            own = self.storage[inst.name]
            if own.temp is None:
                self._vec_write(own, env, "p", lane_dims, lanes, val, indent)
                if own.vector_dim is not None:
                    val = _Vec(own.name)
            targets = [st for (p, _), st in self.temps.items() if p == inst.name]
            if own.temp is not None:
                targets.insert(0, own)
            guard = self.copy_guard(inst.name)
            if guard:
                self.emit(indent, f"if ({guard}) {{")
            for st in targets:
                self._vec_write(st, env, "p", lane_dims, lanes, val, indent + bool(guard))
            if guard:
                self.emit(indent, "}")
            return
        op = inst.operands[0]
        assert isinstance(op, Value)
        src = self.temps.get((op.inst, inst.name)) or self.storage[op.inst]
        val = self._vec_read(src, env, "c", lane_dims, lanes)
        stmt = (self.vec_store(inst, _address(arr, base), "ARRAY", inst.dtype, lanes, aligned,
                               self._as_vector(val, inst.dtype)) if step == 1 else None)
        if stmt is not None:
            self.emit(indent, stmt)
            return
        parts = self._as_lanes(val, inst.dtype, lanes, indent)
        for i in range(lanes):
            self.emit(indent, self.array_store(inst, arr, _lane_index(base, step, i), parts[i]))

    # -- instructions ------------------------------------------------------------------------

    def copy_guard(self, inst: str) -> str:
        """Thread 0 alone writes the copies of a value every thread computes (the plan's
        ``write_guard_hw``)."""
        return " && ".join(f"{self._hw_var(GpuKind.THREAD, h)} == 0"
                           for h in sorted(self.plan.write_guard_hw.get(inst, set())))

    def print_inst(self, inst: Instruction, env: dict[str, str], indent: int,
                    lane: tuple[Node, int] | None) -> None:
        conds = [f"{self._hw_var(GpuKind.THREAD, h)} == 0"
                 for h in sorted(self.plan.guard_hw[inst.name])]
        if lane is not None:
            conds += [f"{self.logical_index(env, ld)} < {self.extent(ld)}"
                      for ld in inst.dims if self.needs_guard(ld)
                      and not any(self.k.dim(d).logical == ld for d in lane[0].dims)]
        if conds:
            self.emit(indent, f"if ({' && '.join(conds)}) {{")
            indent += 1
        self._current = inst
        if lane is None:
            super().print_inst(inst, env, indent, None)
        else:
            self._print_vector_inst(inst, env, indent, lane[0], lane[1])
        self._current = None
        if conds:
            self.emit(indent - 1, "}")

    def _is_array(self, name: str) -> bool:
        return any(a.name == name and not a.is_temporary for a in self.k.arrays)

    def load(self, arr: str, base: str, step: int | str, dtype: DType, lanes: int,
              count: str | None = None) -> str:
        if lanes != 1:
            raise CodegenError("vector values are printed by the vector path")
        if self._is_array(arr) and self._current is not None and self._current.op == "load":
            return self.array_load(self._current, arr, base)
        return f"{arr}[{base}]"

    def emit_store(self, indent: int, arr: str, base: str, step: int | str, value: str,
                    dtype: DType, lanes: int, count: str | None = None,
                    stream: bool = False) -> None:
        if lanes != 1:
            raise CodegenError("vector values are printed by the vector path")
        if self._is_array(arr) and self._current is not None and self._current.op == "store":
            self.emit(indent, self.array_store(self._current, arr, base, value))
        else:
            self.emit(indent, f"{arr}[{base}] = {value};")

    def _cache(self, inst: Instruction) -> str:
        return str(self.cand.domain("cache", inst.name)[0])


def _padded(nbytes: int) -> int:
    return -(-nbytes // 16) * 16


def _address(arr: str, base: str) -> str:
    return arr if base == "0" else f"{arr} + {base}" if "+" not in base \
        else f"{arr} + ({base})"


def _lane_index(base: str, step: int | str, i: int) -> str:
    return fold_sum([base, fold_product([i, step])]) if i else base


# --------------------------------------------------------------------------- CUDA


CUDA_LOADS: dict[str, str] = {Cache.READ_ONLY: "__ldg", Cache.L1: "__ldca", Cache.L2: "__ldcg",
                              Cache.NONE: "__ldcv"}
"""Cache operators of loads: read-only (non-coherent) path, cache at all levels, cache in L2
only, and do not cache (fetch again)."""

CUDA_STORES: dict[str, str] = {Cache.L2: "__stcg", Cache.NONE: "__stcs"}
"""Cache operators of stores: cache in L2 only, and streaming (evict first)."""


class CudaPrinter(GpuPrinter):
    """CUDA C++ (``extern "C"`` kernels, compiled with nvcc)."""

    language = "cuda"
    barrier_stmt = "__syncthreads();"
    long_t = "long long"
    # A LOOP dimension stays a loop: the space decides what is unrolled (UNROLL, within its
    # unroll counter), and nvcc's own unrolling of the loops around that code multiplied it
    # again. Measured on random matmul 1024^3 implementations: a 7,680-line kernel with 998
    # loops built in 45 s (cicc 27 s, ptxas 19 s), 11 s with its loops kept rolled.
    loop_pragma = "#pragma unroll 1"

    def hw_index(self, kind: str, h: int) -> str:
        return f"{'blockIdx' if kind == GpuKind.BLOCK else 'threadIdx'}.{HW_NAMES[h]}"

    def vector_ok(self, dtype: DType, lanes: int) -> bool:
        # float2, float4, double2 and int2/int4 are native 8 and 16-byte accesses.
        return lanes in (2, 4) and lanes * dtype.itemsize <= 16

    def vec_make(self, dtype: DType, parts: list[str]) -> str:
        return f"make_{self.vec_type(dtype, len(parts))}({', '.join(parts)})"

    def lane(self, expr: str, i: int) -> str:
        return f"{expr}.{'xyzw'[i]}"

    def array_load(self, inst: Instruction, arr: str, index: str) -> str:
        return f"{CUDA_LOADS[self._cache(inst)]}(&{arr}[{index}])"

    def array_store(self, inst: Instruction, arr: str, index: str, value: str) -> str:
        op = CUDA_STORES.get(self._cache(inst))
        return f"{op}(&{arr}[{index}], {value});" if op else f"{arr}[{index}] = {value};"

    def vec_load(self, inst: Instruction | None, ptr: str, space: str, dtype: DType,
                 lanes: int, aligned: bool) -> str | None:
        if not aligned or space not in ("ARRAY", *MEMORY_SPACES):
            return None
        vt = self.vec_type(dtype, lanes)
        if inst is not None:
            return f"{CUDA_LOADS[self._cache(inst)]}((const {vt} *)({ptr}))"
        return f"*(const {vt} *)({ptr})"

    def vec_store(self, inst: Instruction | None, ptr: str, space: str, dtype: DType,
                  lanes: int, aligned: bool, value: str) -> str | None:
        if not aligned or space not in ("ARRAY", *MEMORY_SPACES):
            return None
        vt = self.vec_type(dtype, lanes)
        op = CUDA_STORES.get(self._cache(inst)) if inst is not None else None
        if op:
            return f"{op}(({vt} *)({ptr}), {value});"
        return f"*({vt} *)({ptr}) = {value};"

    def _dynamic_shared(self) -> int:
        return self.shared_bytes if self.shared_bytes > CUDA_STATIC_SHARED_BYTES else 0

    def shared_decls(self, temps: list[Storage]) -> list[str]:
        if not self._dynamic_shared():
            return [f"__shared__ __align__(16) {self.ctype(st.dtype)} {st.name}[{st.elements}];"
                    for st in temps]
        out = ["extern __shared__ __align__(16) unsigned char partita_shared[];"]
        offset = 0
        for st in temps:
            c = self.ctype(st.dtype)
            out.append(f"{c} *const {st.name} = ({c} *)(partita_shared + {offset});")
            offset += _padded(int(st.elements) * st.dtype.itemsize)
        return out

    def private_array(self, st: Storage) -> str:
        if not isinstance(st.elements, int):
            raise CodegenError(f"{st.name}: a register temporary of {st.elements} elements")
        return f"__align__(16) {self.ctype(st.dtype)} {st.name}[{st.elements}];"

    def c_params(self, params: tuple[Param, ...], workspace: list[Storage]) -> list[str]:
        return c_parameters(params, "long long", "__restrict__") + [
            f"{self.ctype(st.dtype)} *__restrict__ {st.name}" for st in workspace]

    def kernel_head(self, params: list[str], block: tuple[int, int, int]) -> list[str]:
        return [f'extern "C" __global__ void __launch_bounds__({math.prod(block)})',
                f"{self.entry}({', '.join(params)})"]


# --------------------------------------------------------------------------- OpenCL


class OpenclPrinter(GpuPrinter):
    """OpenCL C 1.2 kernels."""

    language = "opencl"
    barrier_stmt = "barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);"
    long_t = "long"

    def hw_index(self, kind: str, h: int) -> str:
        fn = "get_group_id" if kind == GpuKind.BLOCK else "get_local_id"
        return f"({self.idx_t if kind == GpuKind.BLOCK else 'int'}){fn}({h})"

    def vector_ok(self, dtype: DType, lanes: int) -> bool:
        return lanes in (2, 4, 8, 16)

    def vec_make(self, dtype: DType, parts: list[str]) -> str:
        return f"({self.vec_type(dtype, len(parts))})({', '.join(parts)})"

    def lane(self, expr: str, i: int) -> str:
        return f"{expr}.s{i:x}"

    def _qualifier(self, space: str) -> str:
        return {"ARRAY": "__global", CommonPlace.GLOBAL: "__global",
                GpuPlace.SHARED: "__local"}.get(space, "__private")

    def vec_load(self, inst: Instruction | None, ptr: str, space: str, dtype: DType,
                 lanes: int, aligned: bool) -> str | None:
        if aligned:
            return f"*({self._qualifier(space)} const {self.vec_type(dtype, lanes)} *)({ptr})"
        return f"vload{lanes}(0, {ptr})"

    def vec_store(self, inst: Instruction | None, ptr: str, space: str, dtype: DType,
                  lanes: int, aligned: bool, value: str) -> str | None:
        if aligned:
            return f"*({self._qualifier(space)} {self.vec_type(dtype, lanes)} *)({ptr}) = {value};"
        return f"vstore{lanes}({value}, 0, {ptr});"

    def arith(self, inst: Instruction, ops: list[str], vt: str | None) -> str:
        # OpenCL's fmax and fmin are overloaded for float and double (no fmaxf).
        if inst.op in ("max", "min") and inst.dtype.is_float and vt is None:
            return f"{'fmax' if inst.op == 'max' else 'fmin'}({ops[0]}, {ops[1]})"
        return super().arith(inst, ops, vt)

    def math(self, op: str, dtype: DType, x: str) -> str:
        return math_call(op, dtype, x, overloaded=True)

    def shared_decls(self, temps: list[Storage]) -> list[str]:
        return [f"__local {self.ctype(st.dtype)} {st.name}[{st.elements}] "
                "__attribute__((aligned(16)));" for st in temps]

    def private_array(self, st: Storage) -> str:
        if not isinstance(st.elements, int):
            raise CodegenError(f"{st.name}: a register temporary of {st.elements} elements")
        return f"{self.ctype(st.dtype)} {st.name}[{st.elements}] __attribute__((aligned(16)));"

    def c_params(self, params: tuple[Param, ...], workspace: list[Storage]) -> list[str]:
        return c_parameters(params, "long", "restrict", "__global") + [
            f"__global {self.ctype(st.dtype)} *restrict {st.name}" for st in workspace]

    def preamble(self) -> list[str]:
        k = self.k
        dtypes = {a.dtype for a in k.arrays} | {s.dtype for s in k.scalars} \
            | {i.dtype for i in k.instructions}
        if DType.FP64 in dtypes:
            return ["#pragma OPENCL EXTENSION cl_khr_fp64 : enable"]
        return []

    def kernel_head(self, params: list[str], block: tuple[int, int, int]) -> list[str]:
        return [f"__kernel __attribute__((reqd_work_group_size({block[0]}, {block[1]}, "
                f"{block[2]})))",
                f"void {self.entry}({', '.join(params) or 'void'})"]


def _check(cand: Candidate) -> None:
    if not cand.is_implementation:
        raise CodegenError("only fully decided candidates can be printed")


def print_cuda(cand: Candidate, entry: str | None = None) -> GpuProgram:
    """The CUDA kernel of a fully decided GPU candidate."""
    _check(cand)
    return CudaPrinter(cand, entry or f"partita_{cand.kernel.name}").print()


def print_opencl(cand: Candidate, entry: str | None = None) -> GpuProgram:
    """The OpenCL kernel of a fully decided GPU candidate."""
    _check(cand)
    return OpenclPrinter(cand, entry or f"partita_{cand.kernel.name}").print()
