"""The kernel IR: the semantic backbone every decision refers to."""

from partita.ir.builder import KernelBuilder
from partita.ir.kernel import Array, Dim, Kernel, LogicalDim, ScalarParam, SizeParam
from partita.ir.lmad import LMAD, disjoint
from partita.ir.operands import (
    Access,
    Affine,
    Const,
    Index,
    Instruction,
    Operand,
    Reduce,
    Scalar,
    Value,
)
from partita.ir.types import DType, KernelError

__all__ = [
    "LMAD", "Access", "Affine", "Array", "Const", "DType", "Dim", "Index", "Instruction",
    "Kernel", "KernelBuilder", "KernelError", "LogicalDim", "Operand", "Reduce", "Scalar",
    "ScalarParam", "SizeParam", "Value", "disjoint",
]
