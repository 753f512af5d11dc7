"""BENCHMARKS.md is made of sections, each rewritten by its own benchmark script."""

from __future__ import annotations

import re
from pathlib import Path


def replace_section(path: str | Path, name: str, text: str) -> None:
    """Put ``text`` between ``<!-- name -->`` and ``<!-- /name -->`` (appended if absent)."""
    p = Path(path)
    old = p.read_text() if p.exists() else "# Benchmarks\n"
    block = f"<!-- {name} -->\n{text.rstrip()}\n<!-- /{name} -->"
    pattern = re.compile(rf"<!-- {re.escape(name)} -->.*?<!-- /{re.escape(name)} -->", re.S)
    new = pattern.sub(lambda _: block, old) if pattern.search(old) else \
        old.rstrip() + "\n\n" + block + "\n"
    p.write_text(new if new.endswith("\n") else new + "\n")


def section_text(path: str | Path, name: str) -> str:
    """What lies between ``<!-- name -->`` and ``<!-- /name -->`` in ``path`` ("" if absent)."""
    p = Path(path)
    text = p.read_text() if p.exists() else ""
    start, end = text.find(f"<!-- {name} -->"), text.find(f"<!-- /{name} -->")
    return text[start:end] if 0 <= start < end else ""


def table_rows(section: str) -> dict[str, str]:
    """The rows of the Markdown table in ``section``, by their first cell (the case)."""
    return {line.split(" | ")[0][2:]: line for line in section.splitlines()
            if line.startswith("| ") and not line.startswith("| case")}

