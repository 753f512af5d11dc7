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
