"""The package imports its parts on first use: the processes partita starts (the worker that
times kernels, above all) import what they run, not the search, the records or the
printers, and the names the package exports are the ones documented."""

from __future__ import annotations

import json
import subprocess
import sys

import partita


def modules_after(statement: str) -> set[str]:
    code = (f"import sys; {statement}; import json; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('partita'))))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True)
    return set(json.loads(out.stdout))


def test_the_worker_imports_no_search_records_or_printers() -> None:
    loaded = modules_after("import partita.runtime.worker")
    assert "partita.runtime.worker" in loaded
    layers = ("api", "search", "tuning", "db", "codegen", "model", "space", "kernels", "cli")
    heavy = {m for m in loaded if "." in m and m.split(".")[1] in layers}
    assert heavy <= {"partita.space"}, heavy  # the empty package, see partita/__init__


def test_importing_the_package_imports_none_of_its_layers() -> None:
    assert modules_after("import partita") == {"partita", "partita.lazy", "partita.space"}


def test_every_exported_name_resolves_and_is_listed() -> None:
    for name in partita.__all__:
        assert getattr(partita, name) is not None, name
        assert name in dir(partita)
    assert partita.Space.__module__ == "partita.space.candidate"


def test_space_is_the_function_whatever_was_imported_first() -> None:
    """A subpackage's first import binds its name on the package: ``partita.space`` stays
    the function even where ``partita.space.candidate`` is the first thing imported."""
    code = ("import partita.space.candidate, partita; "
            "k = partita.kernel('matmul', m=8, n=8, k=8); "
            "print(type(partita.space(k)).__name__)")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True)
    assert out.stdout.strip() == "Space"


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        partita.tunee  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "module 'partita' has no attribute 'tunee'" in str(exc)
    else:
        raise AssertionError("partita.tunee resolved")
