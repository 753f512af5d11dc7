"""Bad input gets one line naming what is wrong and a non-zero exit, never a traceback, and
nothing is allocated or created on the way."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import partita
from partita.cli import main
from partita.ir.types import KernelError
from partita.runtime.data import TooLarge, check_memory
from partita.search.stop import parse_duration


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        result.exception
    return result.exit_code, result.output


@pytest.mark.parametrize("args,message", [
    (("tune", "matmul", "m=100000", "n=100000", "k=100000"), "GiB available"),
    (("sample", "matmul", "m=100000", "n=100000", "k=100000"), "GiB available"),
    (("tune", "axpy", f"n={2**70}"), "64-bit offsets"),
    (("tune", "matmul", "m=8", "n=8", "k=8", "--budget", "nan"), "positive, finite"),
    (("tune", "matmul", "m=8", "n=8", "k=8", "--budget", "-3"), "positive, finite"),
    (("tune", "matmul", "m=8", "n=8", "k=8", "--stop", "time=inf"), "positive, finite"),
    (("tune", "matmul", "m=8", "n=8", "k=8", "--stop", "evals=0"), "at least 1"),
    (("tune", "matmul", "m=8", "n=8", "k=8", "--seed", "-5"), "--seed"),
    (("sample", "matmul", "m=8", "n=8", "k=8", "--seed", "-5"), "--seed"),
])
def test_bad_command_lines_fail_in_one_line(args: tuple[str, ...], message: str) -> None:
    code, out = run(*args)
    assert code != 0 and message in out and "Traceback" not in out


def test_read_only_commands_never_create_a_database(tmp_path: Path) -> None:
    missing = tmp_path / "nothing.sqlite"
    for command in ("show", "report", "export"):
        extra = ("--out", str(tmp_path / "o")) if command != "show" else ()
        code, out = run(command, "matmul", "m=8", "n=8", "k=8", "--db", str(missing), *extra)
        assert code != 0 and "no tuning records" in out
    assert not missing.exists()


def test_a_damaged_database_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"not a database" * 400)
    for command in ("show", "report", "export"):
        extra = ("--out", str(tmp_path / "o")) if command != "show" else ()
        code, out = run(command, "matmul", "m=8", "n=8", "k=8", "--db", str(bad), *extra)
        assert code == 2 and out.startswith("error: tuning records") and out.count("\n") == 1


def test_deeply_nested_decisions_are_refused(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    code, out = run("codegen", "matmul", "m=8", "n=8", "k=8", "--decisions", str(deep))
    assert code == 2 and "too deeply" in out


def test_the_api_takes_the_command_lines_durations() -> None:
    assert parse_duration("30s") == 30 and parse_duration("5m") == 300
    assert parse_duration(2) == 2.0
    for bad in ("nan", "soon", -1, float("inf"), True):
        with pytest.raises(ValueError, match="budget"):
            parse_duration(bad)
    k = partita.kernel("axpy", n=64)
    with pytest.raises(ValueError, match="budget 'nan'"):
        partita.tune(k, budget="nan")
    with pytest.raises(ValueError, match="seed"):
        partita.tune(k, seed=-5)


def test_sizes_are_checked_before_anything_is_allocated() -> None:
    with pytest.raises(TooLarge, match="matmul"):
        check_memory(partita.kernel("matmul", m=100000, n=100000, k=100000))
    with pytest.raises(KernelError, match="64-bit"):
        partita.kernel("axpy", n=2**70)


def test_statistics_need_no_records_and_create_none(tmp_path: Path) -> None:
    missing = tmp_path / "none.sqlite"
    code, out = run("stats", "prune", "axpy", "n=4096", "--samples", "10", "--db",
                    str(missing), "--json")
    assert code == 0, out
    assert not missing.exists()
