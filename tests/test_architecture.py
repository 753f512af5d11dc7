"""The code's shape, held to the rules the project keeps: short functions and modules, no
private names reached across modules, and no target named outside its own folder."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "partita"
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 800


def modules() -> list[tuple[Path, ast.Module, str]]:
    return [(p, ast.parse(p.read_text()), p.read_text()) for p in sorted(SRC.rglob("*.py"))]


def test_no_function_is_longer_than_80_lines() -> None:
    long = [f"{p.relative_to(SRC)}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for p, tree, _ in modules() for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.end_lineno is not None
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, long


def test_no_module_is_longer_than_800_lines() -> None:
    long = [f"{p.relative_to(SRC)} ({len(text.splitlines())} lines)" for p, _, text in modules()
            if len(text.splitlines()) > MAX_MODULE_LINES]
    assert not long, long


def test_no_private_name_is_imported_from_another_module() -> None:
    private = [f"{p.relative_to(SRC)}:{node.lineno}: {node.module}.{alias.name}"
               for p, tree, _ in modules() for node in ast.walk(tree)
               if isinstance(node, ast.ImportFrom)
               for alias in node.names
               if alias.name.startswith("_") and not alias.name.startswith("__")]
    assert not private, private


def test_targets_are_named_only_in_their_own_folders() -> None:
    """Tuning, the CLI and the other layers ask the target; none of them branches on its
    name."""
    pattern = re.compile(r"""(==|!=)\s*["'](cpu|gpu)["']|\bif\s+gpu\b|\bis_gpu\b""")
    found = [f"{p.relative_to(SRC)}:{n}: {line.strip()}"
             for p, _, text in modules() if "targets" not in p.relative_to(SRC).parts
             for n, line in enumerate(text.splitlines(), 1) if pattern.search(line)]
    assert not found, found
