"""The examples of docs/mdh.md run as written."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "mdh.md"


def test_the_examples_build_their_kernels() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert blocks
    for code in blocks:
        exec(compile(code, str(DOC), "exec"), {})
