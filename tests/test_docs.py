"""The examples in the documentation run as written (with a smaller tuning budget)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), re.S)


@pytest.mark.slow  # tunes every kernel of the guide: 9 s
def test_the_kernels_of_the_guide_tune_and_match_numpy(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    monkeypatch.setenv("PARTITA_DB", str(tmp_path / "records.sqlite"))
    mdh_code, code, *rest = python_blocks(DOCS / "kernels.md")
    assert rest, "the histogram example"
    exec(compile(mdh_code.replace("budget=20", "evaluations=3"), "docs/kernels.md", "exec"), {})
    builder = code.split("fast = partita.tune")[0]
    assert len([line for line in builder.splitlines()
                if line.strip() and not line.startswith(("import", "from"))]) <= 16
    code = code.replace("budget=20", "evaluations=3")
    exec(compile(code, "docs/kernels.md", "exec"), {})
    for more in rest:
        assert "budget=20" in more
        exec(compile(more.replace("budget=20", "evaluations=3"), "docs/kernels.md", "exec"), {})


@pytest.mark.slow
def test_the_size_generic_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARTITA_DB", str(tmp_path / "records.sqlite"))
    code, conv = python_blocks(DOCS / "generic.md")
    assert "budget=20" in code and "budget=20" in conv
    code = code.replace("budget=20", "evaluations=2").replace("mm.write()",
                                                              f"mm.write({str(tmp_path)!r})")
    exec(compile(code, "docs/generic.md", "exec"), {})
    assert (tmp_path / "matmul_generic.c").read_text().startswith("/* partita")
    exec(compile(conv.replace("budget=20", "evaluations=2"), "docs/generic.md", "exec"), {})
