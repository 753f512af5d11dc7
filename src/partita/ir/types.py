"""Element types and the errors every layer of partita raises on bad kernel definitions."""

from __future__ import annotations

from enum import Enum

import numpy as np


class KernelError(ValueError):
    """A kernel definition is invalid. The message names the offending object."""


class DType(Enum):
    """Element type of arrays, scalars and instruction results."""

    FP32 = "float32"
    FP64 = "float64"
    INT32 = "int32"

    @property
    def c_type(self) -> str:
        return {"float32": "float", "float64": "double", "int32": "int"}[self.value]

    @property
    def itemsize(self) -> int:
        return {"float32": 4, "float64": 8, "int32": 4}[self.value]

    @property
    def numpy(self) -> np.dtype:
        return np.dtype(self.value)

    @property
    def is_float(self) -> bool:
        return self is not DType.INT32

    @classmethod
    def parse(cls, name: str | DType) -> DType:
        """Accept a DType or one of its names (``fp32``, ``float32``, ``f32`` ...)."""
        if isinstance(name, DType):
            return name
        aliases = {
            "fp32": "float32", "f32": "float32", "float": "float32", "float32": "float32",
            "fp64": "float64", "f64": "float64", "double": "float64", "float64": "float64",
            "int32": "int32", "i32": "int32", "int": "int32",
        }
        key = str(name).lower()
        if key not in aliases:
            valid = ", ".join(sorted({"float32", "float64", "int32"}))
            raise KernelError(f"unknown dtype {name!r}: expected one of {valid}")
        return cls(aliases[key])
