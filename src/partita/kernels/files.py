"""Kernels defined in a user's Python file, named on the command line as ``FILE.py:FUNCTION``.

The function takes the kernel's parameters as keywords (``n=4096`` on the command line) and
returns a :class:`~partita.ir.kernel.Kernel`, built with the builder or :mod:`partita.mdh`.
Parameter values are integers where they read as integers, else strings. Every mistake (no
such file, no such function, a parameter the function does not take, something other than a
kernel returned) is a :class:`~partita.ir.types.KernelError` naming it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from partita.ir.kernel import Kernel
from partita.ir.types import KernelError


def is_file_kernel(name: str) -> bool:
    """Whether ``name`` names a kernel in a file (``path/to/file.py:function``)."""
    path, sep, function = name.rpartition(":")
    return bool(sep) and path.endswith(".py") and function.isidentifier()


def _value(raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    try:
        return int(raw, 0)
    except ValueError:
        return raw


def _module(path: Path) -> ModuleType:
    if not path.is_file():
        raise KernelError(f"kernel file {path} does not exist")
    # One module per file contents: editing the file and asking again loads the new version.
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    name = f"partita_user_kernels_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise KernelError(f"kernel file {path} cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the user's code: any error it raises is reported as theirs
        raise KernelError(f"kernel file {path} failed to load: {type(exc).__name__}: {exc}"
                          ) from exc
    sys.modules[name] = module
    return module


def file_kernel(name: str, **params: Any) -> Kernel:
    """The kernel that ``FUNCTION(**params)`` of ``FILE.py`` returns, for ``name`` =
    ``FILE.py:FUNCTION``."""
    if not is_file_kernel(name):
        raise KernelError(f"{name!r} does not name a kernel in a file (FILE.py:FUNCTION)")
    path_text, _, function_name = name.rpartition(":")
    path = Path(path_text).expanduser()
    function = getattr(_module(path), function_name, None)
    if not callable(function):
        raise KernelError(f"kernel file {path} has no function {function_name!r}")
    values = {key: _value(raw) for key, raw in params.items()}
    try:
        inspect.signature(function).bind(**values)
    except TypeError as exc:
        raise KernelError(f"{name}: {exc}") from None
    try:
        kernel = function(**values)
    except KernelError:
        raise
    except Exception as exc:  # the user's code
        raise KernelError(f"{name} raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(kernel, Kernel):
        raise KernelError(f"{name} returned {type(kernel).__name__}, not a kernel (build one "
                          "with partita.KernelBuilder or partita.mdh)")
    return kernel
