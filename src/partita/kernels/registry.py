"""Registry of library kernels, shared by the Python API and the command line."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from partita.ir.kernel import Kernel
from partita.ir.types import KernelError


@dataclass(frozen=True)
class ParamSpec:
    """A parameter of a library kernel: ``kind`` is ``size`` (at least 1), ``stride`` (at
    least 1), ``flag`` (0 or 1), ``offset`` (any integer), ``dtype`` or ``text`` (a string
    the kernel parses itself, such as a contraction's index specification)."""

    name: str
    kind: str
    default: Any
    doc: str = ""

    def parse(self, kernel: str, raw: Any) -> Any:
        """Convert a value (from Python or a ``key=value`` string) or raise KernelError."""
        if self.kind == "dtype":
            dtype = str(raw)
            if dtype not in ("float32", "float64"):
                raise KernelError(f"kernel {kernel!r}: {self.name} must be float32 or float64, "
                                  f"got {raw!r}")
            return dtype
        if self.kind == "text":
            if not isinstance(raw, str) or not raw:
                raise KernelError(f"kernel {kernel!r}: {self.name} must be a non-empty string, "
                                  f"got {raw!r}")
            return raw
        try:
            value = int(raw)
        except (TypeError, ValueError):
            raise KernelError(f"kernel {kernel!r}: {self.name} must be an integer, "
                              f"got {raw!r}") from None
        if isinstance(raw, float) and raw != value:
            raise KernelError(f"kernel {kernel!r}: {self.name} must be an integer, got {raw!r}")
        if self.kind == "flag" and value not in (0, 1):
            raise KernelError(f"kernel {kernel!r}: {self.name} is a flag (0 or 1), got {raw!r}")
        if self.kind == "size" and value < 1:
            raise KernelError(f"kernel {kernel!r}: size {self.name} must be >= 1, got {raw!r}")
        if self.kind == "stride" and value < 1:
            raise KernelError(f"kernel {kernel!r}: {self.name} must be >= 1, got {raw!r}")
        return value


@dataclass(frozen=True)
class KernelSpec:
    """A library kernel: how to build it, and what it computes (numpy reference)."""

    name: str
    doc: str
    params: tuple[ParamSpec, ...]
    build: Callable[..., Kernel]
    reference: Callable[..., dict[str, Any]]
    flops: Callable[..., int]
    bytes: Callable[..., int]
    outputs: tuple[str, ...] = field(default=())
    reference_params: tuple[str, ...] = field(default=())
    """Parameters the reference takes as keywords after the arrays (a stencil's ``steps``)."""
    baseline: bool = True
    """Whether the reference is what a user would call instead (a numpy routine), timed
    beside the tuned kernel; False for a reference written as Python loops."""
    reassociations: Callable[[dict[str, Any], int], list[dict[str, Any]]] | None = None
    """For a kernel with parameters that only change the order of its floating-point additions
    (a sum split into partial sums): given the resolved parameters and the number of cores,
    the values of those parameters worth trying, the sum in order first. None: the kernel
    has no such parameter."""

    more_params: Callable[[dict[str, Any]], tuple[ParamSpec, ...]] | None = None
    """Parameters that depend on the values of :attr:`params` (a contraction's size per index
    letter of its specification): given those values, the further parameters."""

    derived_sizes: Callable[[dict[str, Any]], dict[str, int]] | None = None
    """For a kernel whose size-generic form has sizes that are no parameter (a convolution's
    output rows and columns, derived from the image's): given the resolved parameters, those
    sizes. None: every size of the kernel is a parameter."""
    size_names: tuple[tuple[str, str], ...] = ()
    """The kernel's size of each size parameter whose name differs (conv2d's ``h`` is its
    image's rows ``n_h``); a parameter not listed is a size of the same name."""
    generic_static: tuple[str, ...] = ()
    """Size parameters a size-generic kernel keeps static (a convolution's filter extents:
    the output's extents are derived from them, and the filter's taps are unrolled)."""

    def names(self, given: dict[str, Any]) -> list[str]:
        """The names of the kernel's parameters for the values ``given`` (those of
        :attr:`more_params` depend on them)."""
        return [*(p.name for p in self.params), *(p.name for p in self._more(given))]

    def _more(self, given: dict[str, Any]) -> tuple[ParamSpec, ...]:
        if self.more_params is None:
            return ()
        return self.more_params({p.name: p.parse(self.name, given.get(p.name, p.default))
                                 for p in self.params})

    def resolve(self, given: dict[str, Any]) -> dict[str, Any]:
        """Defaults completed and values checked; unknown parameters are errors."""
        resolved = {p.name: p.parse(self.name, given.get(p.name, p.default))
                    for p in self.params}
        more = self._more(given)
        known = self.names(given)
        for key in given:
            if key not in known:
                raise KernelError(f"kernel {self.name!r} has no parameter {key!r} "
                                  f"(parameters: {', '.join(known)})")
        resolved.update((p.name, p.parse(self.name, given.get(p.name, p.default)))
                        for p in more)
        return resolved


_REGISTRY: dict[str, KernelSpec] = {}


def register(spec: KernelSpec) -> KernelSpec:
    _REGISTRY[spec.name] = spec
    return spec


def list_kernels() -> list[KernelSpec]:
    return list(_REGISTRY.values())


def get_spec(name: str) -> KernelSpec:
    if name not in _REGISTRY:
        raise KernelError(f"unknown kernel {name!r} (kernels: {', '.join(sorted(_REGISTRY))})")
    return _REGISTRY[name]


def kernel(name: str, **params: Any) -> Kernel:
    """The library kernel ``name`` built for ``params`` (defaults for the others)."""
    spec = get_spec(name)
    resolved = spec.resolve(params)
    k = spec.build(**resolved)
    # The tag lets the runtime find this kernel's numpy reference; a user kernel that only
    # shares the name does not carry it. The parameters (variants such as partials or
    # transpose_a included, which are not sizes) go with it into the records.
    return dataclasses.replace(k, meta=(*k.meta, ("library", name),
                                        ("params", tuple(sorted(resolved.items())))))


def library_params(k: Kernel) -> dict[str, Any] | None:
    """The parameters ``k`` was built with by :func:`kernel`, if it is a library kernel."""
    params = dict(k.meta).get("params")
    return dict(params) if params is not None else None


def library_name(k: Kernel) -> str | None:
    """The library kernel ``k`` was built as by :func:`kernel`, if any."""
    return dict(k.meta).get("library")


def library_reference(k: Kernel) -> Callable[..., dict[str, Any]] | None:
    """The numpy reference of library kernel ``k``, with the parameters it takes bound."""
    name = library_name(k)
    if name is None:
        return None
    spec = get_spec(name)
    params = library_params(k) or {}
    if not spec.reference_params:
        return spec.reference
    return functools.partial(spec.reference, **{p: params[p] for p in spec.reference_params})
