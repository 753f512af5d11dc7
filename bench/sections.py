"""BENCHMARKS.md is made of sections, each rewritten by its own benchmark script."""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path


def machine_name() -> str:
    """The CPU's model name and the cores this process may use, e.g. ``AMD EPYC 9R14, 2
    cores``: figures from another CPU are not comparable."""
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{name}, {len(os.sched_getaffinity(0))} cores"


def replace_section(path: str | Path, name: str, text: str) -> None:
    """Put ``text`` between ``<!-- name -->`` and ``<!-- /name -->`` (appended if absent)."""
    p = Path(path)
    old = p.read_text() if p.exists() else "# Benchmarks\n"
    block = f"<!-- {name} -->\n{text.rstrip()}\n<!-- /{name} -->"
    pattern = re.compile(rf"<!-- {re.escape(name)} -->.*?<!-- /{re.escape(name)} -->", re.S)
    new = pattern.sub(lambda _: block, old) if pattern.search(old) else \
        old.rstrip() + "\n\n" + block + "\n"
    p.write_text(new if new.endswith("\n") else new + "\n")
