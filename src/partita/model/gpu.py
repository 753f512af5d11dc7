"""The GPU's lower-bound model: the shared model with a GPU's rates, and the terms of the
levels of its hierarchy (Beaugnon's thesis, ch. 5: thread, block, SM, device).

The shared model sees a GPU as ``sms`` cores with very wide vectors: one "vector" operation is
an SM's worth of lanes (128 FP32 lanes on an H100, four warps), loads go through the SM's L1 at
its bytes per cycle, and only BLOCK dimensions spread work over SMs (threads of a block share
one SM). An instruction fills those lanes only as far as its THREAD and VECTOR dimensions
spread it: one warp issue covers at most 32 of its iterations.

:class:`GpuModel` adds what that view misses (each term a lower bound, with every open
decision at the value most favourable to it; docs/targets.md says why each holds):

``thread``
    A warp issues one instruction per cycle: the first thread of the first block runs every
    instruction, its share of each spread over at most the threads and blocks its dims can
    still be.
``hiding``
    An accumulator's chain of dependent updates runs in one thread, in order: the runs of
    the accumulators a thread interleaves each take the chain's latencies.
``warps``
    An SM issues at most one warp instruction per scheduler and cycle, and one per resident
    warp: a block of few threads, in a grid of few blocks, leaves schedulers idle. Every
    instruction (arithmetic, loads and stores together) counts its warp issues.
``sectors``
    Global memory moves whole 32-byte sectors through the SM's L1: where the thread dim on
    ``threadIdx.x`` gives consecutive threads a stride of more than one element, a warp access
    touches more sectors than its elements fill.
``shared``
    Shared memory serves at most 32 banks of 4 bytes per cycle and SM: the accesses to
    temporaries certainly in shared memory, loads and stores together.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from partita.ir.kernel import Kernel
from partita.model.bound import Bound, Model, Rates
from partita.model.terms import Parallel
from partita.space.candidate import Candidate
from partita.space.nest import CommonKind, Order
from partita.space.temporaries import CommonPlace
from partita.targets.gpu.device import GpuCapabilities
from partita.targets.gpu.space import DimKind as GpuKind
from partita.targets.gpu.space import MemSpace, ThreadMapping


def gpu_rates(gpu: GpuCapabilities, dtype: str = "float32") -> Rates:
    lanes = gpu.fp64_lanes_per_sm if dtype == "float64" else gpu.fp32_lanes_per_sm
    itemsize = 8 if dtype == "float64" else 4
    vector_bytes = lanes * itemsize
    return Rates(
        cores=gpu.sms, ghz=gpu.boost_ghz, vector_bytes=vector_bytes, arith_per_cycle=1.0,
        loads_per_cycle=gpu.l1_bytes_per_cycle_per_sm / vector_bytes,
        stores_per_cycle=gpu.l1_bytes_per_cycle_per_sm / vector_bytes,
        fma_latency_cycles=gpu.fma_latency_cycles,
        bandwidth_gbs=((gpu.l2_bytes, gpu.l2_gbs), (1 << 62, gpu.dram_gbs)),
        parallel_kind=GpuKind.BLOCK, register_space=CommonPlace.REGISTER,
        lane_kinds=(GpuKind.THREAD, CommonKind.VECTOR), lane_group=gpu.warp_size,
        # The CUDA printer keeps every LOOP rolled (``#pragma unroll 1``): nvcc unrolls only
        # the UNROLL dimensions, so no LOOP is peeled and hoisted from.
        rolled_loops=True,
        # A grid's blocks go to SMs whole: the busiest SM's share is weighed for each grid
        # the open kinds still allow.
        exact_shares=True,
    )


class GpuModel(Model):
    """The lower-bound model of one kernel on a GPU: the shared terms with ``gpu``'s rates,
    and the ``thread``, ``hiding``, ``warps``, ``sectors`` and ``shared`` terms of the
    hierarchy (see the module)."""

    def __init__(self, gpu: GpuCapabilities, dtype: str = "float32",
                 sizes: dict[str, int] | None = None) -> None:
        super().__init__(gpu_rates(gpu, dtype), sizes)
        self.gpu = gpu
        self._strides: dict[tuple[str, str, str], int | None] = {}

    def bound(self, cand: Candidate) -> Bound:
        shared = super().bound(cand)
        parallel = self.parallel_dims(cand)
        cycles = 1 / (self.rates.ghz * 1e9)
        terms = dict(shared.terms)
        # Each access's executions on the busiest SM, computed once for the three terms.
        runs = {inst: self._runs(cand, inst, parallel)
                for _, inst, _ in self.terms(cand.kernel).issued}
        temps = list(self.temporary_accesses(cand, parallel))
        terms["thread"] = self.thread_issues(cand) * cycles
        terms["hiding"] = self.hiding_cycles(cand) * cycles
        terms["warps"] = self.warp_issues(cand, runs, temps) / self.issue_rate(cand) * cycles
        terms["sectors"] = (self.global_bytes(cand, runs, temps)
                            / self.gpu.l1_bytes_per_cycle_per_sm * cycles)
        terms["shared"] = (sum(nbytes for space, _, nbytes in temps if space == MemSpace.SHARED)
                           / self.gpu.shared_bytes_per_cycle_per_sm * cycles)
        return Bound(max(terms.values()), terms)

    def max_blocks(self, cand: Candidate) -> int:
        """The most blocks the grid can still have: the product of the largest sizes of the
        dims that may be BLOCK, a dim certainly fused with one counted counting once."""
        counted: list[str] = []
        blocks = 1
        for dim in cand.kernel.dims:
            d = dim.name
            if not cand.allows("dim_kind", (d,), GpuKind.BLOCK):
                continue
            if any(cand.is_only("order", (d, c), Order.MERGED) for c in counted):
                continue
            counted.append(d)
            blocks *= self.dim_size_range(cand, d)[1]
        return blocks

    def resident_warps(self, cand: Candidate) -> int:
        """The most warps an SM can hold at once: the warps of a block (its threads, at most
        the largest the ``threads`` counter allows, rounded up to warps) times the blocks it
        can hold (at most its resident block limit, what its shared memory holds of the
        block's least use, and the busiest SM's share of the largest grid), at most its
        resident warp limit."""
        g = self.gpu
        threads = min(cand.counter("threads")[1], g.max_threads_per_block)
        warps = -(-threads // g.warp_size)
        blocks = min(g.max_blocks_per_sm, -(-self.max_blocks(cand) // g.sms))
        least_shared = cand.counter("shared_bytes")[0]
        if least_shared > 0:
            blocks = min(blocks, g.shared_bytes_per_sm // least_shared)
        return max(1, min(g.max_warps_per_sm, g.max_threads_per_sm // g.warp_size,
                          warps * blocks))

    def issue_rate(self, cand: Candidate) -> int:
        """Warp instructions an SM issues per cycle at most: one per scheduler, and one per
        warp it holds."""
        return min(self.gpu.schedulers_per_sm, self.resident_warps(cand))

    def _threads_of(self, cand: Candidate, dims: tuple[str, ...]) -> int:
        """The most threads of a warp that can spread iterations of ``dims``."""
        spread = 1
        for d in dims:
            if cand.allows("dim_kind", (d,), GpuKind.THREAD):
                spread *= self.dim_size_range(cand, d)[1]
        return min(spread, self.gpu.warp_size)

    def _per_thread(self, cand: Candidate, k: Kernel, inst: str) -> int:
        """The most elements one thread's access of memory instruction ``inst`` can move in
        one instruction: a VECTOR dim's lanes, or the copies of an unrolled dim of unit
        stride that the compiler may fuse into one wide access, at most the widest vector."""
        widest = max(self.gpu.vector_sizes)
        n = 1
        for d in k.iteration_dims(inst):
            kinds = (GpuKind.VECTOR, GpuKind.UNROLL)
            if not any(cand.allows("dim_kind", (d,), kd) for kd in kinds):
                continue
            stride = self.stride(k, inst, k.dim(d).logical)
            if cand.allows("dim_kind", (d,), GpuKind.VECTOR) or stride in (None, 1, -1):
                n *= self.dim_size_range(cand, d)[1]
        return min(n, widest)

    def block_copies(self, cand: Candidate, inst: str) -> tuple[int, tuple[str, ...]]:
        """(the blocks that certainly each run all of ``inst``, the BLOCK dims counted).

        Every block runs the whole kernel body: a logical dimension foreign to ``inst``
        whose BLOCK tiles fuse with none of its dims (nor with those of a logical dimension
        already counted) multiplies its executions by its blocks in range, at least its size
        over the largest points of it the other tiles can hold in one block."""
        k = cand.kernel
        own = k.iteration_dims(inst)
        counted: list[str] = []
        copies = 1
        for name in dict.fromkeys(d.logical for d in k.dims):
            if name in k.inst(inst).dims:
                continue
            tiles = k.dims_of(name)
            blocks = [d for d in tiles if cand.is_only("dim_kind", (d,), GpuKind.BLOCK)]
            if not blocks or any(
                    k.mergeable(d, e) and cand.allows("order", (d, e), Order.MERGED)
                    for d in tiles for e in (*own, *counted)):
                continue
            held = math.prod(self.dim_size_range(cand, d)[1] for d in tiles if d not in blocks)
            copies *= -(-self.logical_size(k, name) // held)
            counted.extend(blocks)
        return copies, tuple(counted)

    def _runs(self, cand: Candidate, inst: str, parallel: Parallel) -> float:
        """The executions of ``inst`` on the busiest SM: once per point, times the loops
        proven to repeat it and the blocks that each run it (:meth:`block_copies`), times
        the SM's share."""
        t = self.terms(cand.kernel)
        k = cand.kernel
        copies, blocks = self.block_copies(cand, inst)
        logicals = {k.dim(d).logical for d in blocks}
        # A repeating dim of a logical dimension counted in blocks, or that may be fused with
        # a block counted, is that block: counted once.
        over = tuple(d for d in self._repeated(cand, t.own[inst], t.foreign[inst])
                     if k.dim(d).logical not in logicals and not any(
                         k.mergeable(d, b) and cand.allows("order", (d, b), Order.MERGED)
                         for b in blocks))
        parallel_names = {d.name for d, _ in parallel}
        # The blocks counted are ``copies`` parallel iterations (fewer than their sizes'
        # product where the other tiles' sizes are open), each running the work whole.
        share = self.work_share(cand, inst, parallel,
                                tuple(d for d in over if d in parallel_names), copies)
        return t.volumes[inst] * self._size_product(cand, over) * copies * share

    def thread_issues(self, cand: Candidate) -> float:
        """Instructions one thread issues in sequence at least, one per cycle at most (a
        warp issues one instruction per cycle): the first thread of the first block runs
        every instruction (the printers guard an instruction with ``tid == 0`` only, and
        index 0 is in range along every dim), each its :meth:`thread_runs`."""
        t = self.terms(cand.kernel)
        return sum(self.thread_runs(cand, inst, kind != "arith") for kind, inst, _ in t.issued)

    def thread_runs(self, cand: Candidate, inst: str, memory: bool) -> float:
        """The executions of ``inst`` by the first thread at least: its iterations over the
        most threads and blocks its dims can spread them on (times a thread's widest
        access, for a ``memory`` access), times the loops proven to repeat it."""
        k = cand.kernel
        t = self.terms(k)
        spread = (GpuKind.THREAD, GpuKind.BLOCK)
        # Its iterations spread over at most the blocks of its dims that may be BLOCK times
        # the threads of a block of those that may be THREAD.
        both = blocks = threads = 1
        for d in t.own[inst]:
            size = self.dim_size_range(cand, d)[1]
            block = cand.allows("dim_kind", (d,), GpuKind.BLOCK)
            thread = cand.allows("dim_kind", (d,), GpuKind.THREAD)
            both *= size if block or thread else 1
            blocks *= size if block else 1
            threads *= size if thread else 1
        par = min(both, blocks * min(threads, self.gpu.max_threads_per_block))
        if memory:
            par *= self._per_thread(cand, k, inst)
        # Loops that repeat it each thread runs; a repeating thread or block dim gives every
        # thread or block its own copy, no more work per thread.
        looped = tuple(d for d in self._repeated(cand, t.own[inst], t.foreign[inst])
                       if not any(cand.allows("dim_kind", (d,), kd) for kd in spread))
        return t.volumes[inst] * self._size_product(cand, looped) / par

    def hiding_cycles(self, cand: Candidate) -> float:
        """The cycles the first thread's chains of dependent updates take at least.

        A reduction dim is never a thread or block dim, so every accumulator's chain (the
        reduction's length ``R``) runs in one thread, and a warp issues in order. A dim the
        thread iterates that certainly encloses every reduction dim runs whole chains in each
        of its iterations, one iteration after the other where they are apart: a LOOP's, or
        an unrolled dim's copies each holding a loop over a reduction dim (nvcc schedules
        the copies of straight code together, never across a rolled loop). Each iteration
        then runs the chains of at most ``P`` accumulators (the sizes of the thread's other
        dims) in ``R - 1`` latencies at least, and the thread's ``C`` accumulators take at
        least ``C / P`` such runs, however many warps the SM holds."""
        k = cand.kernel
        t = self.terms(k)
        loops = (GpuKind.LOOP, GpuKind.UNROLL)
        longest = 0.0
        for inst in k.reducing_insts:
            red, other = t.chain_dims[inst]
            length = self.reduction_length(k, inst)
            op = k.inst(inst)
            # Without fast-math nvcc keeps the order of floating-point sums and products; it
            # may reassociate integer operations and min or max (exact), breaking the chain.
            if not red or length <= 1 or not op.dtype.is_float or op.op in ("max", "min"):
                continue
            rolled = any(cand.is_only("dim_kind", (e,), GpuKind.LOOP)
                         and self.dim_size_range(cand, e)[0] > 1 for e in red)
            interleaved = 1
            for d in other:
                if not any(cand.allows("dim_kind", (d,), kd) for kd in loops):
                    continue  # a thread or block dim: not iterated by the thread
                apart = all(cand.is_only("order", (d, e), Order.OUT) for e in red) and (
                    rolled or cand.is_only("dim_kind", (d,), GpuKind.LOOP))
                if not apart:
                    interleaved *= self.dim_size_range(cand, d)[1]
            chains = self.thread_runs(cand, inst, False) / length
            runs = max(1.0, chains / interleaved)
            longest = max(longest, runs * (length - 1) * self.rates.fma_latency_cycles)
        return longest

    def warp_issues(self, cand: Candidate, runs: dict[str, float],
                    temps: list[tuple[str, float, float]]) -> float:
        """Warp instructions the busiest SM issues at least: each instruction's executions
        (``runs``) over the most a warp covers in one (its threads, times a thread's vector
        for memory accesses), and the accesses to temporaries in memory (``temps``)."""
        k = cand.kernel
        t = self.terms(k)
        total = 0.0
        for kind, inst, _ in t.issued:
            per_issue = self._threads_of(cand, t.own[inst])
            if kind != "arith":
                per_issue *= self._per_thread(cand, k, inst)
            total += runs[inst] / per_issue
        return total + sum(issues for _, issues, _ in temps)

    def stride(self, k: Kernel, inst: str, logical: str) -> int | None:
        key = (k.structural_hash, inst, logical)
        if key not in self._strides:
            self._strides[key] = k.element_stride(inst, logical)
        return self._strides[key]

    def on_x(self, cand: Candidate, d: str) -> bool:
        """Whether ``d`` is certainly a THREAD dim on ``threadIdx.x``: the printers put there
        the class that is ``OUT`` of no other (:mod:`partita.codegen.gpulower`)."""
        if not cand.is_only("dim_kind", (d,), GpuKind.THREAD):
            return False
        for other in cand.kernel.dims:
            e = other.name
            if e == d or not other.is_static or not cand.allows("dim_kind", (e,), GpuKind.THREAD):
                continue
            if cand.allows("thread_mapping", (d, e), ThreadMapping.OUT):
                return False
        return True

    def bytes_per_element(self, cand: Candidate, inst: str) -> float:
        """The L1 bytes one element of global access ``inst`` costs at least: its size, or,
        where the dim on ``threadIdx.x`` is decided and gives consecutive threads a stride
        ``s`` of more than one element, the sectors the ``n`` distinct threads of a warp
        along x touch (``n`` where ``s`` spans a sector, else the sectors their span
        covers) over the most elements one warp access moves."""
        k = cand.kernel
        g = self.gpu
        item = k.array(k.inst(inst).access.array).dtype.itemsize  # type: ignore[union-attr]
        best = float(item)
        for d in k.iteration_dims(inst):
            if not self.on_x(cand, d):
                continue
            logical = k.dim(d).logical
            stride = self.stride(k, inst, logical)
            if stride is None or stride == 0:
                continue
            tiles = k.dims_of(logical)
            inner = self._size_product(cand, tiles[tiles.index(d) + 1:])
            step = abs(stride) * inner * item
            n = min(self.dim_size_range(cand, d)[0], g.warp_size)
            if step <= item or n < 2:
                continue
            if step >= g.sector_bytes:
                sectors = n
            else:
                sectors = max(1, ((n - 1) * step + item) // g.sector_bytes)
            moved = g.warp_size * self._per_thread(cand, k, inst)
            best = max(best, sectors * g.sector_bytes / moved)
        return best

    def global_bytes(self, cand: Candidate, runs: dict[str, float],
                     temps: list[tuple[str, float, float]]) -> float:
        """Bytes the busiest SM's L1 moves for the kernel's loads and stores of its arrays
        (``runs`` of each, :meth:`bytes_per_element` each) and of temporaries certainly in
        global memory (``temps``, from :meth:`temporary_accesses`)."""
        t = self.terms(cand.kernel)
        arrays = sum(runs[inst] * self.bytes_per_element(cand, inst)
                     for kind, inst, _ in t.issued if kind != "arith")
        return arrays + sum(nbytes for space, _, nbytes in temps if space == MemSpace.GLOBAL)

    def temporary_accesses(self, cand: Candidate, parallel: Parallel
                           ) -> Iterator[tuple[str, float, float]]:
        """(memory space, warp instructions, bytes) of the stores and loads of each
        temporary certainly in shared or global memory, on the busiest SM: every element
        stored and loaded once, times the loops proven to repeat the access (for the bytes,
        only those that cannot be threads: threads of a warp reading one word share one
        access), one warp instruction covering at most a warp of threads, each with the
        widest vector."""
        k = cand.kernel
        t = self.terms(k)
        parallel_names = {d.name for d, _ in parallel}
        widest = max(self.gpu.vector_sizes)
        for arr in k.arrays:
            if arr.carries is None:
                continue
            spaces = cand.domain("mem_space", arr.name)
            if len(spaces) != 1 or spaces[0] == MemSpace.REGISTER:
                continue
            for side, inst in enumerate(arr.carries):
                indexing, others = t.temp_sides[arr.name][side]
                repeated = self._repeated(cand, indexing, others + t.foreign[inst])
                share = self.work_share(cand, inst, parallel,
                                        tuple(d for d in repeated if d in parallel_names))
                looped = tuple(d for d in repeated
                               if not cand.allows("dim_kind", (d,), GpuKind.THREAD))
                runs = t.temp_elements[arr.name] * share
                threads = self._threads_of(cand, (*t.own[inst], *repeated))
                yield (str(spaces[0]),
                       runs * self._size_product(cand, repeated) / (threads * widest),
                       runs * self._size_product(cand, looped) * arr.dtype.itemsize)
