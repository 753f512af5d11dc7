"""Package attributes imported on first use (PEP 562).

Every process that runs a part of partita imports the package first: the sandboxed worker
that times kernels, a cluster's workers, a spawned child, each ``partita`` command. Most need
none of the search, the records or the printers, whose imports take most of a second
(:mod:`partita` and :mod:`partita.runtime` export names from those modules)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def exports(package: str, homes: dict[str, tuple[str, ...]], namespace: dict[str, Any]
            ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package`` (whose globals are
    ``namespace``): the first imports each name of ``homes`` (module -> names) from its
    module when first asked for, and keeps it in ``namespace`` so that later lookups do not
    reach it; the second lists those names with the package's own."""
    home_of = {name: module for module, names in homes.items() for name in names}

    def attribute(name: str) -> Any:
        module = home_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = namespace[name] = getattr(importlib.import_module(module), name)
        return value

    def listing() -> list[str]:
        return sorted(set(namespace) | set(home_of))

    return attribute, listing
