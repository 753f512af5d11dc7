"""Running generated programs: compile them, check their outputs, time them.

- :mod:`partita.runtime.compile`: batched gcc runs into cached shared objects;
- :mod:`partita.runtime.harness`: the C timing harness linked into every shared object;
- :mod:`partita.runtime.data`: inputs, reference outputs and error tolerances per seed;
- :mod:`partita.runtime.worker`: the process that runs untrusted kernels;
- :mod:`partita.runtime.evaluate`: :class:`Evaluator`, which ties them together, and
  :class:`Measurement`, its result.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from partita.lazy import exports

if TYPE_CHECKING:
    from partita.runtime.compile import (
        DEFAULT_FLAGS,
        CompileError,
        Compiler,
        SharedObject,
        compiler_version,
    )
    from partita.runtime.data import generate_inputs, make_case, tolerance
    from partita.runtime.evaluate import STATUSES, Checked, Evaluator, Measurement, Outcome
    from partita.runtime.harness import Timing, TimingOptions, measure, summarize

# Imported on first use (PEP 562): the sandboxed worker imports this package and needs only
# the buffers, the harness and the protocol, not the compiler's or the references' imports.
_HOMES = {
    "partita.runtime.compile": ("DEFAULT_FLAGS", "CompileError", "Compiler", "SharedObject",
                                "compiler_version"),
    "partita.runtime.data": ("generate_inputs", "make_case", "tolerance"),
    "partita.runtime.evaluate": ("STATUSES", "Checked", "Evaluator", "Measurement", "Outcome"),
    "partita.runtime.harness": ("Timing", "TimingOptions", "measure", "summarize"),
}

__all__ = [
    "DEFAULT_FLAGS", "STATUSES", "Checked", "CompileError", "Compiler", "Evaluator",
    "Measurement", "Outcome", "SharedObject", "Timing", "TimingOptions", "compiler_version",
    "generate_inputs",
    "make_case", "measure", "summarize", "tolerance",
]

__getattr__, __dir__ = exports(__name__, _HOMES, globals())
