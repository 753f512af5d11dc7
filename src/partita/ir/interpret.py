"""The kernel's own meaning, executed: an interpreter over numpy, the default reference.

:func:`sequential_reference` returns a reference (the calling convention of
:mod:`partita.runtime.data`: scalars and ``in``/``inout`` arrays in signature order, a dict of
outputs back) that runs the kernel's sequential loop tree (:mod:`partita.ir.semantics`) in
float64 (int64 for integers). It shares nothing with the printers, so it can judge them.

A loop runs as one numpy operation per instruction over all its iterations (loop distribution
and vectorisation) unless a dependence through memory among the instructions inside it has a
non-zero distance along it (:mod:`partita.ir.dependences`): then it runs iteration by
iteration in Python, which is exact and slow (a recurrence of a million elements takes
seconds). An accumulation (a :class:`Reduce` operand) always walks its reduction dimensions in
order, one numpy operation over the other dimensions per step.

Every instruction's value is kept over its whole iteration space, except along the reduction
dimensions of an accumulation that no consumer iterates (only the running value is kept).
Outputs start as NaN: an element the kernel never writes stays NaN, and fails every check.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from partita.ir.dependences import dependences
from partita.ir.kernel import Kernel, resolve_size
from partita.ir.operands import Const, Index, Instruction, Reduce, Scalar, Value
from partita.ir.semantics import Loop, sequential_tree
from partita.ir.types import DType, KernelError

Env = dict[str, Any]
"""Logical dimension -> its index (an int) or ``None`` (every index, one array axis)."""

_UNARY: dict[str, Callable[[Any], Any]] = {
    "neg": np.negative, "mov": lambda a: a, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
    "abs": np.abs,
}
_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum,
    "min": np.minimum, "lt": np.less, "le": np.less_equal, "gt": np.greater,
    "ge": np.greater_equal, "eq": np.equal, "ne": np.not_equal,
}


def _wide(dtype: DType) -> np.dtype:
    return np.dtype(np.float64 if dtype.is_float else np.int64)


class Interpreter:
    """One run of a kernel on given arguments (see the module docstring)."""

    def __init__(self, k: Kernel, sizes: Mapping[str, int], scalars: Mapping[str, Any],
                 arrays: Mapping[str, np.ndarray]) -> None:
        self.k = k
        self.sizes = dict(sizes)
        self.scalars = dict(scalars)
        self.arrays = dict(arrays)
        self.extent = {ld.name: resolve_size(ld.size, self.sizes) for ld in k.logical_dims}
        self.deps = dependences(k)
        self.running = self._running_dims()
        self.values: dict[str, np.ndarray] = {}
        self.done: set[str] = set()
        for inst in k.instructions:
            shape = [1 if d in self.running[inst.name] else self.extent[d] for d in inst.dims]
            self.values[inst.name] = np.zeros(shape, dtype=_wide(inst.dtype))

    def _running_dims(self) -> dict[str, set[str]]:
        """Reduction dims of each accumulation whose intermediate values nobody reads."""
        read: dict[str, set[str]] = {i.name: set() for i in self.k.instructions}
        for inst in self.k.instructions:
            for op in inst.values():
                producer = op.inst if isinstance(op, Value) else op.init
                src_of = {s for s, _ in op.mapping} | (set(inst.dims) & set(
                    self.k.inst(producer).dims))
                read[producer] |= src_of
        out: dict[str, set[str]] = {}
        for inst in self.k.instructions:
            over = {d for op in inst.operands if isinstance(op, Reduce) for d in op.dims}
            out[inst.name] = over - read[inst.name]
        return out

    # -- the tree ---------------------------------------------------------------------------

    def run(self) -> None:
        self._run_children(sequential_tree(self.k), {})

    def _run_children(self, node: Loop, env: Env) -> None:
        for child in node.children:
            if isinstance(child, Loop):
                self._run_loop(child, env)
            else:
                self._eval(self.k.inst(child), env)
                self.done.add(child)

    def _sequential(self, loop: Loop) -> bool:
        inside = set(loop.instructions())
        return any(dep.source in inside and dep.sink in inside
                   and any(d.nonzero and d.sink_dim == loop.dim for d in dep.shared())
                   for dep in self.deps.all)

    def _run_loop(self, loop: Loop, env: Env) -> None:
        assert loop.dim is not None
        if self._sequential(loop):
            for idx in range(self.extent[loop.dim]):
                self._run_children(loop, {**env, loop.dim: idx})
        else:
            self._run_children(loop, {**env, loop.dim: None})

    # -- one instruction ------------------------------------------------------------------

    def _ranged(self, inst: Instruction, env: Env) -> list[str]:
        return [d for d in inst.dims if env.get(d) is None]

    def _index(self, d: str, inst: Instruction, env: Env) -> Any:
        """Index of logical dim ``d`` of ``inst``, shaped to broadcast over its ranged dims."""
        ranged = self._ranged(inst, env)
        if d not in ranged:
            return env[d]
        shape = [1] * len(ranged)
        shape[ranged.index(d)] = self.extent[d]
        return np.arange(self.extent[d]).reshape(shape)

    def _eval(self, inst: Instruction, env: Env) -> None:
        reduce = next((op for op in inst.operands if isinstance(op, Reduce)), None)
        ranged_reduce = [d for d in inst.dims if reduce is not None and d in reduce.dims
                         and env.get(d) is None]
        if ranged_reduce:
            # An accumulation walks its reduction dims in order.
            for point in itertools.product(*(range(self.extent[d]) for d in ranged_reduce)):
                self._eval(inst, {**env, **dict(zip(ranged_reduce, point, strict=True))})
            return
        ranged = self._ranged(inst, env)
        shape = tuple(self.extent[d] for d in ranged)
        if inst.op == "load":
            result = self._gather(inst, env)
        else:
            args = [self._operand(inst, op, env) for op in inst.operands]
            result = self._compute(inst, args)
        result = np.broadcast_to(np.asarray(result, dtype=_wide(inst.dtype)), shape)
        if inst.op == "store":
            self._scatter(inst, env, result)
        self.values[inst.name][self._slot(inst, inst.dims, env, inst)] = result

    def _slot(self, owner: Instruction, dims: tuple[str, ...], env: Env,
              reader: Instruction, mapping: Mapping[str, str] | None = None) -> tuple:
        """Where ``reader`` finds the value of ``owner`` in its stored array."""
        mapping = mapping or {}
        out: list[Any] = []
        for d in dims:
            if d in self.running[owner.name]:
                out.append(0)
            elif d in mapping:
                out.append(self._index(mapping[d], reader, env))
            elif d in reader.dims:
                out.append(self._index(d, reader, env))
            else:
                out.append(self.extent[d] - 1)
        return tuple(out)

    def _operand(self, inst: Instruction, op: Any, env: Env) -> Any:
        if isinstance(op, Const):
            return op.value
        if isinstance(op, Scalar):
            return self.scalars[op.name]
        if isinstance(op, Index):
            return self._index(op.dim, inst, env)
        if isinstance(op, Value):
            return self._read(op.inst, dict(op.mapping), inst, env)
        assert isinstance(op, Reduce)
        first = all(env[d] == 0 for d in op.dims)
        if first:
            return self._read(op.init, dict(op.mapping), inst, env)
        if op.dims[0] in self.running[inst.name]:
            return self.values[inst.name][self._slot(inst, inst.dims, env, inst)]
        prev = self._previous(inst, op, env)
        return self.values[inst.name][self._slot(inst, inst.dims, prev, inst)]

    def _previous(self, inst: Instruction, op: Reduce, env: Env) -> Env:
        """The iteration before ``env`` along the reduction dims (last one moves first)."""
        order = [d for d in inst.dims if d in op.dims]
        prev = dict(env)
        for d in reversed(order):
            if prev[d] > 0:
                prev[d] -= 1
                return prev
            prev[d] = self.extent[d] - 1
        raise AssertionError("the first iteration has no previous one")

    def _read(self, producer: str, mapping: dict[str, str], reader: Instruction,
              env: Env) -> Any:
        if producer not in self.done and producer != reader.name:
            raise KernelError(f"instruction {reader.name!r} reads the value of {producer!r} "
                              "before the sequential order computes it")
        owner = self.k.inst(producer)
        return self.values[producer][self._slot(owner, owner.dims, env, reader, mapping)]

    def _compute(self, inst: Instruction, args: list[Any]) -> Any:
        op = inst.op
        if op in _UNARY:
            with np.errstate(divide="ignore", invalid="ignore"):  # log(0), sqrt(-1): as C
                return _UNARY[op](args[0])
        if op == "cast":
            value = np.asarray(args[0])
            return np.trunc(value) if not inst.dtype.is_float else value
        if op == "store":
            return args[0]
        if op == "select":
            return np.where(np.asarray(args[0]) != 0, args[1], args[2])
        if op == "fma":
            return np.add(np.multiply(args[0], args[1]), args[2])
        if op == "div":
            if inst.dtype.is_float:
                return np.divide(args[0], args[1])
            a, b = np.asarray(args[0]), np.asarray(args[1])
            return np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))  # C truncates
        if op in _BINARY:
            return _BINARY[op](args[0], args[1])
        raise KernelError(f"instruction {inst.name!r}: the interpreter has no op {op!r}")

    def _element(self, inst: Instruction, env: Env) -> tuple:
        assert inst.access is not None
        out = [ix.const + sum(c * self._index(d, inst, env) for d, c in ix.terms)
               for ix in inst.access.index]
        axis = inst.access.indirect
        if axis is not None:  # data as an index, clamped to the axis
            extent = self.arrays[inst.access.array].shape[axis]
            value = np.asarray(self._operand(inst, inst.index_operand(), env)).astype(np.int64)
            out[axis] = np.clip(value, 0, extent - 1)
        return tuple(out)

    def _gather(self, inst: Instruction, env: Env) -> Any:
        assert inst.access is not None
        array = self.arrays[inst.access.array]
        element = self._element(inst, env)
        if inst.access.fill is None:
            return array[element]
        inside: Any = True
        for e, n in zip(element, array.shape, strict=True):
            inside = inside & (np.asarray(e) >= 0) & (np.asarray(e) < n)
        clipped = tuple(np.clip(e, 0, n - 1) for e, n in zip(element, array.shape, strict=True))
        return np.where(inside, array[clipped], inst.access.fill)

    def _scatter(self, inst: Instruction, env: Env, value: np.ndarray) -> None:
        assert inst.access is not None
        # A loop that runs vectorised writes distinct elements at distinct iterations (two
        # writes of one element would be a dependence carried by it, which runs in order).
        self.arrays[inst.access.array][self._element(inst, env)] = value


def sequential_reference(k: Kernel, sizes: Mapping[str, int] | None = None
                         ) -> Callable[..., dict[str, np.ndarray]]:
    """A reference running ``k``'s sequential meaning (see the module docstring).

    It takes the dynamic sizes' values in ``sizes`` (static sizes come from the kernel), then,
    when called, the scalars and ``in``/``inout`` arrays in signature order, and returns the
    ``out``/``inout`` arrays in float64 (int64 for integer arrays)."""
    values = {s.name: s.value for s in k.sizes if s.value is not None} | dict(sizes or {})
    scalars = [s.name for s in k.scalars]
    inputs = [a for a in k.arrays if not a.is_temporary and a.role in ("in", "inout")]
    outputs = [a for a in k.arrays if a.role in ("out", "inout")]

    def reference(*args: Any) -> dict[str, np.ndarray]:
        if len(args) != len(scalars) + len(inputs):
            raise TypeError(f"kernel {k.name!r}: the reference takes {len(scalars)} scalars "
                            f"and {len(inputs)} arrays, got {len(args)} arguments")
        scalar_values = dict(zip(scalars, args[:len(scalars)], strict=True))
        arrays = {a.name: np.array(v, dtype=_wide(a.dtype), copy=True)
                  for a, v in zip(inputs, args[len(scalars):], strict=True)}
        for a in k.arrays:
            if a.role == "out":
                shape = tuple(resolve_size(s, values) for s in a.shape)
                fill = np.nan if a.dtype.is_float else 0
                arrays[a.name] = np.full(shape, fill, dtype=_wide(a.dtype))
        Interpreter(k, values, scalar_values, arrays).run()
        return {a.name: arrays[a.name] for a in outputs}

    return reference
