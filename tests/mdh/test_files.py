"""Kernels in a user's file, named as FILE.py:FUNCTION: loaded, called with the command
line's parameters, and every mistake named in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from partita.ir.types import KernelError
from partita.kernels.files import file_kernel, is_file_kernel

SOURCE = '''
from partita import mdh


def jacobi2d(n=64, dtype="float32"):
    w = mdh.scalar("w")
    return mdh.md_hom(
        "my_jacobi", {"i": n - 2, "j": n - 2}, (mdh.cc, mdh.cc),
        f=lambda c, u, d, l, r: (c + u + d + l + r) * w,
        inputs=[mdh.view("x", lambda i, j, di=di, dj=dj: (i + 1 + di, j + 1 + dj))
                for di, dj in ((0, 0), (-1, 0), (1, 0), (0, -1), (0, 1))],
        output=mdh.view("y", lambda i, j: (i + 1, j + 1), shape=[n, n]), dtype=dtype)


def broken(n):
    return 3

def fails(n):
    raise RuntimeError("no grid")
'''


@pytest.fixture
def kernels_file(tmp_path: Path) -> str:
    path = tmp_path / "my_kernels.py"
    path.write_text(SOURCE)
    return str(path)


def test_a_kernel_in_a_file_is_built_with_the_given_parameters(kernels_file: str) -> None:
    assert is_file_kernel(f"{kernels_file}:jacobi2d")
    assert not is_file_kernel("matmul")
    k = file_kernel(f"{kernels_file}:jacobi2d", n="10", dtype="float64")
    assert k.name == "my_jacobi"
    assert {a.name: (a.shape, a.dtype.value) for a in k.arrays} == {
        "x": ((10, 10), "float64"), "y": ((10, 10), "float64")}


@pytest.mark.parametrize("name,params,message", [
    ("{}:missing", {}, r"has no function 'missing'"),
    ("{}:jacobi2d", {"m": "3"}, r"jacobi2d: got an unexpected keyword argument 'm'"),
    ("{}:broken", {"n": "3"}, r"broken returned int, not a kernel"),
    ("{}:fails", {"n": "3"}, r"fails raised RuntimeError: no grid"),
    ("/nowhere/k.py:f", {}, r"kernel file /nowhere/k.py does not exist"),
])
def test_mistakes_are_named(kernels_file: str, name: str, params: dict, message: str) -> None:
    with pytest.raises(KernelError, match=message):
        file_kernel(name.format(kernels_file), **params)


@pytest.mark.slow
def test_the_commands_take_a_kernel_in_a_file(kernels_file: str, tmp_path: Path) -> None:
    import json

    from click.testing import CliRunner

    from partita.cli import main

    runner = CliRunner()
    name = f"{kernels_file}:jacobi2d"
    sampled = runner.invoke(main, ["sample", name, "n=18", "--count", "2", "--json"])
    assert sampled.exit_code == 0, sampled.output
    report = json.loads(sampled.output)
    assert (report["verified"], report["reference"]) == (2, "sequential semantics")
    db = str(tmp_path / "records.sqlite")
    tuned = runner.invoke(main, ["tune", name, "n=34", "--evaluations", "2", "--db", db,
                                 "--json"])
    assert tuned.exit_code == 0, tuned.output
    assert json.loads(tuned.output.splitlines()[-1])["verified"]
    shown = runner.invoke(main, ["show", name, "n=34", "--db", db])
    assert shown.exit_code == 0 and "best" in shown.output, shown.output
    missing = runner.invoke(main, ["space", f"{kernels_file}:missing"])
    assert missing.exit_code != 0
    assert missing.output.strip().splitlines() == [
        f"error: kernel file {kernels_file} has no function 'missing'"]
