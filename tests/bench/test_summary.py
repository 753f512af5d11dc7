"""bench/summary.py: the summary table and plot at the top of BENCHMARKS.md, made from the
benchmarks' results (bench/results/*.json), here from a small fixture."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from results import RESULTS_DIR, load_results, machine, record, target, write_results  # noqa: E402
from summary import table  # noqa: E402

NO_AVX = machine(model="AMD EPYC", cores=2, avx512=False, peak_gflops_fp32=200.0,
                 stream_triad_gbs=28.7, source="measured")
AVX = machine(model="AMD EPYC", cores=2, avx512=True, peak_gflops_fp32=236.0,
              stream_triad_gbs=None, source="measured")


def fixture(results: Path) -> None:
    """A tuning section (a time against numpy, a bandwidth against the triad) and a space
    section (a target on partita's own figure, and a row with neither target nor reference)."""
    write_results("tune", "Tuning", [
        record("sgemm 1024^3", quantity="time", unit="s", partita=0.02024,
               reference_name="numpy/OpenBLAS", reference=0.01474, tgt=target("<=", 1.10),
               command="python bench/tune_bench.py", machine_desc=NO_AVX, date="2026-11-26",
               commit="f4e90bc"),
        record("axpy 2^26", quantity="bandwidth", unit="GB/s", partita=43.4,
               reference_name="STREAM triad", reference=27.2, tgt=target(">=", 0.9),
               command="python bench/tune_bench.py", machine_desc=NO_AVX, date="2026-11-26",
               commit="f4e90bc", details={"numpy_s": float("nan")}),
    ], results)
    write_results("space", "Decision spaces", [
        record("cpu matmul 1024^3: descents/s", quantity="descents per second",
               unit="descents/s", partita=119.4, tgt=target(">=", 100.0, "partita"),
               command="python bench/space_bench.py", machine_desc=AVX, date="2026-11-27",
               commit="d76fd0b"),
        record("gpu axpy n=2^26: descents/s", quantity="descents per second",
               unit="descents/s", partita=5411.2, command="python bench/space_bench.py",
               machine_desc=AVX, date="2026-11-27", commit="d76fd0b"),
    ], results)


@pytest.fixture
def written(tmp_path: Path) -> tuple[str, Path]:
    results = tmp_path / "results"
    fixture(results)
    md = tmp_path / "BENCHMARKS.md"
    md.write_text("# Benchmarks\n\nOne sentence.\n\n<!-- tune -->\n## Tuning\n<!-- /tune -->\n")
    png = tmp_path / "summary.png"
    for _ in range(2):  # a second run replaces the summary, it does not add one
        subprocess.run([sys.executable, str(BENCH / "summary.py"), "--write", str(md),
                        "--results", str(results), "--plot", str(png)],
                       check=True, capture_output=True, cwd=tmp_path)
    return md.read_text(), png


@pytest.mark.slow
def test_table_rows(written: tuple[str, Path]) -> None:
    text, _ = written
    assert ("| Tuning | sgemm 1024^3 | 20.24 ms | numpy/OpenBLAS: 14.74 ms | 1.37 | ≤ 1.1 "
            "| **not met** | A, 2026-11-26 (f4e90bc) |") in text
    assert ("| Tuning | axpy 2^26 | 43.4 GB/s | STREAM triad: 27.2 GB/s | 1.60 | ≥ 0.9 | met "
            "| A, 2026-11-26 (f4e90bc) |") in text
    assert ("| Decision spaces | cpu matmul 1024^3: descents/s | 119.4/s | - | - "
            "| ≥ 100.0/s | met | B, 2026-11-27 (d76fd0b) |") in text
    # Neither a reference nor a target: in the results, not in the summary.
    assert "gpu axpy" not in text
    assert "Targets met: 2 of 3." in text
    assert ("- **A**: AMD EPYC, 2 cores, without AVX-512, peak 200 GFLOP/s fp32, "
            "STREAM triad 28.7 GB/s") in text
    assert ("- **B**: AMD EPYC, 2 cores, with AVX-512, peak 236 GFLOP/s fp32, "
            "STREAM triad not stated") in text


@pytest.mark.slow
def test_summary_comes_first_once_and_embeds_the_plot(written: tuple[str, Path]) -> None:
    text, _ = written
    assert text.count("<!-- summary -->") == 1 and text.count("## Summary") == 1
    assert text.index("<!-- summary -->") < text.index("<!-- tune -->")
    table_end = text.index("Targets met")
    image = text.index("![partita beside its references")
    assert table_end < image < text.index("<!-- /summary -->")
    assert "](summary.png)" in text  # relative to the Markdown file
    assert "<!-- tune -->\n## Tuning\n<!-- /tune -->" in text


@pytest.mark.slow
def test_plot_is_written(written: tuple[str, Path]) -> None:
    _, png = written
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 10_000


def test_results_are_strict_json_and_reruns_keep_other_cases(tmp_path: Path) -> None:
    fixture(tmp_path)
    data = json.loads((tmp_path / "tune.json").read_text())
    axpy = data["results"][1]
    assert axpy["details"]["numpy_s"] is None  # NaN: not measured
    assert axpy["met"] is True and axpy["reference"] == {"name": "STREAM triad", "value": 27.2}
    rerun = record("axpy 2^26", quantity="bandwidth", unit="GB/s", partita=20.0,
                   reference_name="STREAM triad", reference=28.0, tgt=target(">=", 0.9),
                   command="python bench/tune_bench.py --only axpy", machine_desc=NO_AVX)
    write_results("tune", "Tuning", [rerun], tmp_path, keep_other_cases=True)
    cases = json.loads((tmp_path / "tune.json").read_text())["results"]
    assert [c["case"] for c in cases] == ["sgemm 1024^3", "axpy 2^26"]
    assert cases[1]["partita"] == 20.0 and cases[1]["met"] is False


def test_a_target_must_say_what_it_bounds() -> None:
    with pytest.raises(ValueError, match="op must be"):
        target("<", 1.0)
    with pytest.raises(ValueError, match="unit"):
        record("x", quantity="time", unit="ms", partita=1.0, command="", machine_desc=AVX)


def test_the_committed_summary_is_made_from_the_committed_results() -> None:
    """BENCHMARKS.md's summary is what bench/summary.py makes of bench/results (a results file
    edited by hand, prune.json, needs the summary made again)."""
    page = (BENCH.parent / "BENCHMARKS.md").read_text()
    assert table(load_results(RESULTS_DIR)) in page
    # Every section a script rewrites is there once, each with its markers.
    for name in ("summary", "tune", "call", "space"):
        assert page.count(f"<!-- {name} -->") == 1 and page.count(f"<!-- /{name} -->") == 1
    assert page.index("<!-- summary -->") < min(page.index(f"<!-- {name} -->")
                                                  for name in ("tune", "call", "space"))
