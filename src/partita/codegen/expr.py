"""C expressions every printer builds: index arithmetic with constants folded, names of loop
indices, literals, and the error a printer raises on a construct it cannot print."""

from __future__ import annotations

import math

from partita.ir.types import DType


class CodegenError(ValueError):
    """A candidate cannot be printed (a construct the printer does not support)."""


def c_name(dim: str) -> str:
    """The C index variable of a tile dimension (``i.1`` is ``i_1``)."""
    return dim.replace(".", "_")


def fold_product(factors: list[str | int]) -> str:
    """The product of integer and expression factors, constants folded."""
    const = 1
    exprs = []
    for f in factors:
        if isinstance(f, str) and f.isdigit():
            f = int(f)
        if isinstance(f, int):
            const *= f
        else:
            exprs.append(f)
    if const == 0:
        return "0"
    parts = ([] if const == 1 and exprs else [str(const)]) + exprs
    return " * ".join(parts)


def fold_sum(terms: list[str]) -> str:
    """The sum of expressions, with the constant ones folded into one last term."""
    const = sum(int(t) for t in terms if t.isdigit())
    terms = [t for t in terms if not t.isdigit()] + ([str(const)] if const else [])
    return " + ".join(terms) if terms else "0"


def c_literal(value: float | int, dtype: DType) -> str:
    """A constant as C source: ``1.5f`` in float, ``1.5`` in double, ``INFINITY``,
    ``-INFINITY`` and ``NAN`` (from math.h, OpenCL C and CUDA alike) for the non-finite,
    which ``repr`` would print as names no compiler knows (``inff``)."""
    if not dtype.is_float:
        return str(int(value))
    x = float(value)
    if math.isnan(x):
        return "NAN"
    if math.isinf(x):
        return "INFINITY" if x > 0 else "-INFINITY"
    return repr(x) + ("f" if dtype is DType.FP32 else "")


COMPARE = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
"""The C operator of each comparison opcode."""


def math_call(op: str, dtype: DType, x: str, overloaded: bool = False) -> str:
    """``exp``, ``log``, ``sqrt`` or ``abs`` of a scalar: C's and CUDA's ``expf`` in float
    and ``exp`` in double; OpenCL C has only the ``overloaded`` names (``exp``, ``fabs``).
    An integer's ``abs`` is a conditional negation (OpenCL's ``abs`` returns an unsigned)."""
    if op == "abs" and not dtype.is_float:
        return f"(({x}) < 0 ? -({x}) : ({x}))"
    name = "fabs" if op == "abs" else op
    return name + ("f" if dtype is DType.FP32 and not overloaded else "") + f"({x})"
