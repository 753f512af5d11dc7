"""Invariants of a kernel definition, checked when a kernel is built.

Each check raises :class:`KernelError` with a message that names the offending object and the
values involved, so that a user who mistyped a dimension or a shape sees what to fix.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from partita.ir.forms import Form, add, least, size_form
from partita.ir.operands import Access, Affine, Const, Index, Instruction, Reduce, Scalar, Value
from partita.ir.types import DType, KernelError

if TYPE_CHECKING:
    from partita.ir.kernel import Kernel, SizeLike

ROLES = ("in", "out", "inout", "temp")
ARITY = {
    "add": 2, "sub": 2, "mul": 2, "div": 2, "max": 2, "min": 2, "fma": 3, "neg": 1,
    "mov": 1, "cast": 1, "load": 0, "store": 1,
    "lt": 2, "le": 2, "gt": 2, "ge": 2, "eq": 2, "ne": 2, "select": 3,
    "exp": 1, "log": 1, "sqrt": 1, "abs": 1,
}
COMPARISONS = ("lt", "le", "gt", "ge", "eq", "ne")
FLOAT_ONLY = ("exp", "log", "sqrt")
"""Operations defined on floating-point values only (C has no integer exp, log or sqrt)."""


C_RESERVED = frozenset({
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else",
    "enum", "extern", "float", "for", "goto", "if", "inline", "int", "long", "register",
    "restrict", "return", "short", "signed", "sizeof", "static", "struct", "switch", "typedef",
    "union", "unsigned", "void", "volatile", "while", "bool", "true", "false", "NULL",
    "INFINITY", "NAN", "main", "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t",
    "uint32_t", "uint64_t", "intptr_t", "uintptr_t", "size_t", "ptrdiff_t", "memcpy", "memset",
    "malloc", "free", "aligned_alloc", "posix_memalign", "abs", "fabs", "fabsf", "fma", "fmaf",
    "fmax", "fmaxf", "fmin", "fminf", "sqrt", "sqrtf", "exp", "expf", "log", "logf", "kernel",
    "global", "local", "constant", "private", "half", "float2", "float4", "double2",
    "get_global_id", "get_local_id", "get_group_id", "get_local_size", "barrier", "threadIdx",
    "blockIdx", "blockDim", "gridDim", "warpSize", "args", "s_",
})
"""Names a kernel may not give a size, scalar, array or dimension: C keywords, the types,
macros and functions the printed C, OpenCL and CUDA use, and the printers' own fixed names."""

PRINTED_PREFIXES = ("tmp_", "v_", "reg_", "pf_", "load_", "loadn_", "store_", "storen_",
                    "partita_", "omp_", "sm_", "make_", "vec_", "bid_", "tid_", "_")
"""Prefixes of the names the printers make (temporaries ``tmp_``, values ``v_``, promoted
registers ``reg_``, vector helpers ``load_``...) and of names C reserves (``_``)."""


INDEX_LIMIT = 2**62
"""Bytes an array may span: every offset the printed code computes (in int64, as products of
indices and strides) then stays far from overflow."""


def check_kernel(k: Kernel) -> None:
    check_names(k)
    check_sizes(k)
    check_arrays(k)
    check_logical_dims(k)
    for inst in k.instructions:
        check_instruction(k, inst)
    check_acyclic(k)
    check_fusable(k)
    check_size_relations(k)


def check_names(k: Kernel) -> None:
    seen: dict[str, str] = {}
    temporaries = {a.name for a in k.arrays if a.is_temporary}  # named by the space
    groups = [
        ("size", [s.name for s in k.sizes]),
        ("scalar", [s.name for s in k.scalars]),
        ("array", [a.name for a in k.arrays]),
        ("logical dimension", [d.name for d in k.logical_dims]),
        ("instruction", [i.name for i in k.instructions]),
    ]
    for what, names in groups:
        for name in names:
            if not isinstance(name, str) or not name or not name.replace("_", "a").isalnum():
                raise KernelError(f"{what} name {name!r} must be a non-empty identifier")
            if name in seen:
                raise KernelError(f"name {name!r} is used by a {seen[name]} and a {what}")
            seen[name] = what
            if what != "instruction" and name not in temporaries:
                check_printable(k, what, name)


def check_printable(k: Kernel, what: str, name: str) -> None:
    """A name the printed code uses as it is must not clash with C or with the printers'
    names: a scalar ``i_0`` would be shadowed by the loop of tile dimension ``i.0``."""
    if name in C_RESERVED:
        raise KernelError(f"{what} name {name!r} is reserved in the printed C, OpenCL or CUDA: "
                          "choose another")
    prefix = next((p for p in PRINTED_PREFIXES if name.startswith(p)), None)
    if prefix is not None:
        raise KernelError(f"{what} name {name!r} starts with {prefix!r}, which the printed "
                          "code keeps for its own names: choose another")
    base, _, level = name.rpartition("_")
    if level.isdigit() and base in {d.name for d in k.logical_dims}:
        raise KernelError(f"{what} name {name!r} is the printed name of level {level} of "
                          f"dimension {base!r}: choose another")
    if what != "logical dimension" and re.fullmatch(r"v\d+[fi]\d+", name):
        raise KernelError(f"{what} name {name!r} is the name of a printed vector type: "
                          "choose another")


def check_sizes(k: Kernel) -> None:
    for s in k.sizes:
        if s.value is not None and (isinstance(s.value, bool) or not isinstance(s.value, int)
                                    or s.value <= 0):
            raise KernelError(f"size {s.name!r} must be a positive integer, got {s.value!r}")


def _check_size_ref(k: Kernel, size: object, owner: str) -> None:
    if isinstance(size, bool) or not isinstance(size, int | str):
        raise KernelError(f"{owner}: size {size!r} must be an integer or a size name")
    if isinstance(size, int) and size <= 0:
        raise KernelError(f"{owner}: size must be positive, got {size}")
    if isinstance(size, str) and size not in k.size_values:
        known = ", ".join(sorted(k.size_values)) or "none"
        raise KernelError(f"{owner}: unknown size {size!r} (known sizes: {known})")


def check_arrays(k: Kernel) -> None:
    for a in k.arrays:
        owner = f"array {a.name!r}"
        if not isinstance(a.dtype, DType):
            raise KernelError(f"{owner}: dtype must be a DType, got {a.dtype!r}")
        if a.role not in ROLES:
            raise KernelError(f"{owner}: role {a.role!r} is not one of {', '.join(ROLES)}")
        for s in a.shape:
            _check_size_ref(k, s, owner)
        if sorted(a.order) != list(range(len(a.shape))):
            raise KernelError(
                f"{owner}: layout order {a.order} is not a permutation of its "
                f"{len(a.shape)} axes"
            )
        if not isinstance(a.elem_stride, int) or a.elem_stride < 1:
            raise KernelError(f"{owner}: element stride must be >= 1, got {a.elem_stride!r}")
        static = {s.name: s.value for s in k.sizes if s.value is not None}
        if all(isinstance(x, int) or x in static for x in a.shape):
            span = a.footprint(static) * a.dtype.itemsize
            if span >= INDEX_LIMIT:
                raise KernelError(f"{owner}: {span:.3g} bytes cannot be indexed with 64-bit "
                                  f"offsets (at most {INDEX_LIMIT:.3g})")


def check_logical_dims(k: Kernel) -> None:
    for ld in k.logical_dims:
        owner = f"dimension {ld.name!r}"
        _check_size_ref(k, ld.size, owner)
        for level, sizes in enumerate(ld.tile_sizes, start=1):
            if not sizes or any(not isinstance(s, int) or s <= 0 for s in sizes):
                raise KernelError(
                    f"{owner}: tile level {level} needs positive integer sizes, got {sizes!r}"
                )
        if not k.strip_factors(ld.name):
            raise KernelError(
                f"{owner}: no allowed strip-mining factor for size {ld.size} "
                f"(tiles {[list(t) for t in ld.tile_sizes]}, cap {ld.max_factor})"
            )


def check_instruction(k: Kernel, inst: Instruction) -> None:
    owner = f"instruction {inst.name!r}"
    if inst.op not in ARITY:
        raise KernelError(f"{owner}: unknown operation {inst.op!r}")
    arity = ARITY[inst.op] + (1 if inst.is_indirect else 0)  # the index of an indirect access
    if len(inst.operands) != arity:
        raise KernelError(
            f"{owner}: {inst.op} takes {arity} operands, got {len(inst.operands)}"
        )
    if len(set(inst.dims)) != len(inst.dims):
        raise KernelError(f"{owner}: repeated dimension in {inst.dims}")
    for d in inst.dims:
        if d not in k._logical:
            known = ", ".join(sorted(k._logical)) or "none"
            raise KernelError(f"{owner}: unknown dimension {d!r} (known: {known})")
    if inst.op in FLOAT_ONLY and not inst.dtype.is_float:
        raise KernelError(f"{owner}: {inst.op} of {inst.dtype.value} is not defined: "
                          "cast the operand to float32 or float64 first")
    for position, op in enumerate(inst.operands):
        check_operand(k, inst, op)
        if inst.op == "select" and position == 0:
            continue  # the condition may have any dtype: select tests it against 0
        if inst.is_indirect and position == len(inst.operands) - 1:
            continue  # an index: checked with the access
        check_operand_dtype(k, inst, op)
    if inst.is_memory:
        if inst.access is None:
            raise KernelError(f"{owner}: a {inst.op} needs an array access")
        check_access(k, inst, inst.access)
    elif inst.access is not None:
        raise KernelError(f"{owner}: only load and store access arrays")


def check_operand(k: Kernel, inst: Instruction, op: object) -> None:
    owner = f"instruction {inst.name!r}"
    if isinstance(op, Value | Reduce):
        producer = op.inst if isinstance(op, Value) else op.init
        if producer not in k._insts:
            raise KernelError(f"{owner}: operand refers to unknown instruction {producer!r}")
        if producer == inst.name:
            raise KernelError(f"{owner}: reads its own value; use a Reduce operand")
        source = k.inst(producer)
        for src, dst in op.mapping:
            check_mapping(k, owner, source, inst, src, dst)
        if isinstance(op, Reduce):
            for d in op.dims:
                if d not in inst.dims:
                    raise KernelError(
                        f"{owner}: reduction dimension {d!r} is not in its iteration space "
                        f"{inst.dims}"
                    )
    elif isinstance(op, Index):
        if op.dim not in inst.dims:
            raise KernelError(f"{owner}: index of {op.dim!r}, which it does not iterate")
    elif isinstance(op, Scalar):
        if op.name not in {s.name for s in k.scalars}:
            raise KernelError(f"{owner}: unknown scalar parameter {op.name!r}")
    elif not isinstance(op, Const):
        raise KernelError(f"{owner}: invalid operand {op!r}")


def check_mapping(
    k: Kernel, owner: str, source: Instruction, inst: Instruction, src: str, dst: str
) -> None:
    if src not in source.dims:
        raise KernelError(
            f"{owner}: maps dimension {src!r}, which producer {source.name!r} does not iterate"
        )
    if dst not in inst.dims:
        raise KernelError(f"{owner}: maps onto dimension {dst!r}, which it does not iterate")
    a, b = k.logical(src), k.logical(dst)
    if (a.size != b.size or a.tile_sizes != b.tile_sizes or a.max_factor != b.max_factor
            or a.divisible != b.divisible):
        raise KernelError(
            f"{owner}: mapped dimensions {src!r} (size {a.size}, tiles "
            f"{[list(t) for t in a.tile_sizes]}) and {dst!r} (size {b.size}, tiles "
            f"{[list(t) for t in b.tile_sizes]}) must have the same size and tiling"
        )


def operand_dtype(k: Kernel, op: object) -> DType:
    if isinstance(op, Value):
        return k.inst(op.inst).dtype
    if isinstance(op, Reduce):
        return k.inst(op.init).dtype
    if isinstance(op, Const):
        return op.dtype
    if isinstance(op, Scalar):
        return next(s.dtype for s in k.scalars if s.name == op.name)
    return DType.INT32  # Index


def check_operand_dtype(k: Kernel, inst: Instruction, op: object) -> None:
    if inst.op == "cast":
        return
    got = operand_dtype(k, op)
    if got != inst.dtype and inst.op == "select":
        raise KernelError(
            f"instruction {inst.name!r}: select's branches must share its dtype "
            f"{inst.dtype.value}, operand {op!r} has dtype {got.value} (insert a cast)")
    if got != inst.dtype and inst.op in COMPARISONS:
        raise KernelError(
            f"instruction {inst.name!r}: {inst.op} compares two values of its dtype "
            f"{inst.dtype.value}, operand {op!r} has dtype {got.value} (insert a cast, or "
            "give the comparison the operands' dtype)")
    if got != inst.dtype:
        raise KernelError(
            f"instruction {inst.name!r}: operand {op!r} has dtype {got.value}, the "
            f"instruction computes {inst.dtype.value} (insert a cast)"
        )


def check_access(k: Kernel, inst: Instruction, access: Access) -> None:
    owner = f"instruction {inst.name!r}"
    array = k.array(access.array)
    if array.dtype != inst.dtype:
        raise KernelError(
            f"{owner}: array {array.name!r} holds {array.dtype.value}, the {inst.op} is "
            f"{inst.dtype.value}"
        )
    if inst.op == "store" and array.role == "in":
        raise KernelError(f"{owner}: stores into input array {array.name!r}")
    if access.fill is not None and (inst.op != "load" or array.role != "in"):
        raise KernelError(f"{owner}: only loads from input arrays may read a padded view "
                          f"(fill {access.fill}); {array.name!r} is {array.role!r}")
    if len(access.index) != len(array.shape):
        raise KernelError(
            f"{owner}: array {array.name!r} has {len(array.shape)} axes, the access gives "
            f"{len(access.index)} indices"
        )
    if access.indirect is not None:
        check_indirect(k, inst, access)
    for axis, (ix, extent) in enumerate(zip(access.index, array.shape, strict=True)):
        for d, _ in ix.terms:
            if d not in inst.dims:
                raise KernelError(
                    f"{owner}: index {ix} of {array.name!r} uses dimension {d!r}, which the "
                    f"instruction does not iterate ({', '.join(inst.dims)})"
                )
        if access.fill is None:
            check_in_bounds(k, owner, array.name, axis, ix, extent)


def check_indirect(k: Kernel, inst: Instruction, access: Access) -> None:
    """An indirect access: an axis of the array, its affine index 0, an int32 index operand
    (see :class:`~partita.ir.operands.Access`)."""
    owner = f"instruction {inst.name!r}"
    axis = access.indirect
    assert axis is not None
    if not 0 <= axis < len(access.index):
        raise KernelError(f"{owner}: indirect axis {axis} of {access.array!r} is not one of its "
                          f"{len(access.index)} axes")
    if access.index[axis] != Affine():
        raise KernelError(f"{owner}: the affine index of indirect axis {axis} of "
                          f"{access.array!r} must be 0, got {access.index[axis]}")
    if access.fill is not None:
        raise KernelError(f"{owner}: an indirect access reads no padded view")
    index = inst.operands[-1]
    if not isinstance(index, Value) or operand_dtype(k, index) is not DType.INT32:
        raise KernelError(f"{owner}: the index of an indirect access into {access.array!r} "
                          f"must be the value of an int32 instruction, got {index!r}")


def check_in_bounds(k: Kernel, owner: str, array: str, axis: int, ix: Affine,
                    extent: SizeLike) -> None:
    """The index must stay in [0, extent) for every point of the iteration space."""
    maybe_sizes = [k.static_size(k.logical(d).size) for d, _ in ix.terms]
    limit = k.static_size(extent)
    sizes = [s for s in maybe_sizes if s is not None]
    if len(sizes) == len(maybe_sizes) and limit is not None:
        lo = ix.const + sum(min(0, c * (s - 1)) for (_, c), s in zip(ix.terms, sizes, strict=True))
        hi = ix.const + sum(max(0, c * (s - 1)) for (_, c), s in zip(ix.terms, sizes, strict=True))
        if lo < 0 or hi >= limit:
            raise KernelError(
                f"{owner}: index {ix} of array {array!r} axis {axis} ranges over [{lo}, {hi}], "
                f"outside [0, {limit - 1}]"
            )
        return
    # With a dynamic size: the least and greatest index are linear forms over the sizes,
    # compared where every size the index runs over is at least 1 and the kernel's size
    # relations hold (the identity access of a dimension of that very size, a conv's rows
    # ``stride * p + r`` against its image's through the relation of their extents).
    low: Form = {None: ix.const}
    high: Form = {None: ix.const}
    for d, c in ix.terms:
        last = add(size_form(k.logical(d).size, k.size_values), {None: -1})
        low, high = (add(low, last, c), high) if c < 0 else (low, add(high, last, c))
    running = {str(k.logical(d).size) for d, _ in ix.terms}
    room = add(size_form(extent, k.size_values), high, -1)
    if least(low, running, k.size_relations) < 0 or \
            least(room, running, k.size_relations) < 1:
        raise KernelError(
            f"{owner}: cannot prove index {ix} of array {array!r} axis {axis} stays within "
            f"dynamic extent {extent!r}"
        )


def check_acyclic(k: Kernel) -> None:
    """Values must flow from producers to consumers without a cycle."""
    graph = {
        i.name: [o.inst if isinstance(o, Value) else o.init for o in i.values()]
        for i in k.instructions
    }
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        if state.get(node) == 2:
            return
        if state.get(node) == 1:
            cycle = " -> ".join([*path[path.index(node):], node])
            raise KernelError(f"dependency cycle between instructions: {cycle}")
        state[node] = 1
        for nxt in graph.get(node, []):
            visit(nxt, [*path, node])
        state[node] = 2

    for name in graph:
        visit(name, [])


def check_size_relations(k: Kernel) -> None:
    """Each size relation names dynamic sizes of the kernel with nonzero integer
    coefficients, each once."""
    dynamic = {s.name for s in k.sizes if not s.is_static}
    for rel in k.size_relations:
        owner = f"size relation {rel}"
        names = [name for name, _ in rel.terms]
        if not names or len(set(names)) != len(names):
            raise KernelError(f"{owner}: names each size once, at least one")
        for name, coeff in rel.terms:
            if name not in dynamic:
                known = ", ".join(sorted(dynamic)) or "none"
                raise KernelError(f"{owner}: {name!r} is not a dynamic size (dynamic: {known})")
            if not isinstance(coeff, int) or isinstance(coeff, bool) or coeff == 0:
                raise KernelError(f"{owner}: the coefficient of {name} must be a nonzero "
                                  "integer")
        if not isinstance(rel.constant, int) or isinstance(rel.constant, bool):
            raise KernelError(f"{owner}: the constant must be an integer")


def check_fusable(k: Kernel) -> None:
    """Each :attr:`Kernel.fusable` group names two or more distinct logical dimensions of one
    size and tiling (as mapped dimensions must have), untiled for now, and no instruction
    iterates two dimensions of the fusion class the group joins (one loop cannot run two
    indices of one iteration space)."""
    for group in k.fusable:
        owner = f"fusable dimensions {list(group)}"
        if (not isinstance(group, tuple) or len(group) < 2
                or not all(isinstance(d, str) for d in group)):
            raise KernelError(f"{owner}: a fusable group names two or more logical dimensions")
        if len(set(group)) != len(group):
            raise KernelError(f"{owner}: a dimension is named twice")
        for d in group:
            if d not in k._logical:
                known = ", ".join(sorted(k._logical)) or "none"
                raise KernelError(f"{owner}: unknown logical dimension {d!r} (known: {known})")
        dims = [k.logical(d) for d in group]
        first = dims[0]
        for dim in dims[1:]:
            if (dim.size != first.size or dim.tile_sizes != first.tile_sizes
                    or dim.max_factor != first.max_factor or dim.divisible != first.divisible):
                raise KernelError(
                    f"{owner}: {first.name!r} (size {first.size}, tiles "
                    f"{[list(t) for t in first.tile_sizes]}) and {dim.name!r} (size {dim.size}, "
                    f"tiles {[list(t) for t in dim.tile_sizes]}) must have the same size and "
                    "tiling")
        tiled = [dim.name for dim in dims if dim.tile_sizes]
        if tiled:
            raise KernelError(
                f"{owner}: {tiled[0]!r} is strip-mined; only untiled dimensions can be declared "
                "fusable (without a mapping, nothing keeps the tile sizes of fused tiles equal)")
    if not k.fusable:
        return
    cls = k.logical_class
    joined = {cls[d] for group in k.fusable for d in group}
    for inst in k.instructions:
        seen: dict[str, str] = {}
        for d in inst.dims:
            c = cls[d]
            if c in joined and c in seen:
                raise KernelError(
                    f"instruction {inst.name!r} iterates {seen[c]!r} and {d!r}, which the "
                    "fusable declarations put in one fusion class: its loops could be fused "
                    "with each other")
            seen[c] = d
