"""Exported C libraries and HTML reports.

The export is checked the way a user would use it: ``make``, ``make check``, and a separate C
program linked against the shared and the static library whose output is compared with numpy.
Reports are written from synthetic evaluations (shaped as the records return them) and from a
real records file, including runs where nothing was measured.
"""

from __future__ import annotations

import json
import random
import shutil
import struct
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import partita
from partita.codegen.c import print_c
from partita.codegen.program import Param, Program, signature
from partita.db import BestRow, EvaluationRow, Records
from partita.ir.builder import KernelBuilder
from partita.ir.kernel import Kernel
from partita.report import build_flags, export_c, prototype, write_report
from partita.report.export import DEFAULT_BUILD_FLAGS
from partita.report.html import PLOTS, format_time, is_violation
from partita.search.sampling import random_implementation

TIMED_FLAGS = ("-O3 -march=native -fopenmp -fPIC -shared -std=gnu11 "
               "-Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=aligned_alloc,"
               "--wrap=posix_memalign")
"""Flags as the records keep them: the timing build's, harness link flags included."""

needs_cc = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("make") is None,
                              reason="needs gcc and make")


def run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def pattern(n: int) -> np.ndarray:
    """Input values that float32 sums hold exactly (multiples of 1/4 in [-1.25, 1.25])."""
    j = np.arange(n)
    return (((j * 7 + 3) % 11) - 5) * 0.25


# ---------------------------------------------------------------------- export


# One worker runs this module, so its module fixtures (a tune each) are built once.
pytestmark = pytest.mark.xdist_group("test_report")


@pytest.fixture(scope="module")
def matmul() -> tuple[Kernel, Program, str]:
    k = partita.kernel("matmul", m=16, n=16, k=8)
    cand = random_implementation(partita.space(k).root(), random.Random(0))
    return k, print_c(cand, "mm16"), cand.decisions_json()


@pytest.fixture(scope="module")
def built(matmul: tuple[Kernel, Program, str],
          tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The matmul export, built with ``make`` (once for the module: gcc -O3 is slow)."""
    if shutil.which("gcc") is None or shutil.which("make") is None:
        pytest.skip("needs gcc and make")
    k, prog, decisions = matmul
    out = tmp_path_factory.mktemp("export")
    export_c(out, k, prog.source, prog.entry, prog.params, TIMED_FLAGS, decisions, 2.5e-6)
    run(["make"], out)
    return out


def test_export_writes_source_header_makefile(matmul: tuple[Kernel, Program, str],
                                              tmp_path: Path) -> None:
    k, prog, decisions = matmul
    files = export_c(tmp_path, k, prog.source, prog.entry, prog.params, TIMED_FLAGS,
                     decisions, 2.5e-6)
    assert [f.name for f in files] == ["mm16.c", "mm16.h", "Makefile", "example.c",
                                       "mm16.decisions.json"]
    assert all(f.is_file() for f in files)

    source = (tmp_path / "mm16.c").read_text()
    head = source[:source.index(prog.source)]
    assert "kernel matmul (m=16, n=16, k=8" in head
    assert f"decisions:      {len(json.loads(decisions))}" in head
    assert "2.5 us" in head and "-march=native" in head
    assert '#include "mm16.h"' in head
    assert source.endswith(prog.source)  # the measured code, unchanged

    header = (tmp_path / "mm16.h").read_text()
    assert header.index("#ifndef PARTITA_EXPORT_MM16_H") < header.index("#include <stdint.h>")
    assert header.rstrip().endswith("#endif /* PARTITA_EXPORT_MM16_H */")
    proto = "void mm16(const float *restrict A, const float *restrict B, float *restrict C);"
    assert proto in header and proto[:-1] == prototype("mm16", prog.params)
    assert proto[:-1] in prog.source  # the printer's definition has the same signature
    assert "void mm16_packed(void **args);" in header
    assert "@param A  input (read only)" in header and "shape [16, 8]" in header
    assert "strides [8, 1] elements, buffer of 128 elements" in header
    assert "@param C  output" in header and "shape [16, 16]" in header

    makefile = (tmp_path / "Makefile").read_text()
    assert "CFLAGS = -O3 -march=native -fopenmp -fPIC -std=gnu11\n" in makefile
    assert "--wrap" not in makefile  # harness symbols do not exist outside the harness
    assert "-L. $(LDLIBS)" in makefile and "LDLIBS = -lmm16 -fopenmp -lm" in makefile
    assert "\n\t$(CC) $(CFLAGS) -shared" in makefile  # recipes start with a tab

    saved = json.loads((tmp_path / "mm16.decisions.json").read_text())
    assert saved["decisions"] == json.loads(decisions) and saved["kernel"] == "matmul"


@needs_cc
def test_make_builds_both_libraries_and_check_runs(built: Path) -> None:
    assert (built / "libmm16.so").is_file() and (built / "libmm16.a").is_file()
    nm = shutil.which("nm")
    if nm:
        symbols = run([nm, "-D", "--defined-only", "libmm16.so"], built).stdout
        assert " T mm16\n" in symbols and " T mm16_packed\n" in symbols
    out = run(["make", "check"], built).stdout
    assert "-L. -lmm16 -fopenmp" in out  # the link line a user copies
    assert "C[0] = 0" in out and "mm16: ok" in out


@needs_cc
@pytest.mark.parametrize("library", ["shared", "static"])
def test_exported_library_computes_matmul(built: Path, matmul: tuple[Kernel, Program, str],
                                          library: str) -> None:
    """A separate program fills the inputs, calls the library and checks C[i, j] against
    numpy: the export works, not just links."""
    _, prog, _ = matmul
    p = {q.name: q for q in prog.params}
    A, B, C = p["A"], p["B"], p["C"]
    views = {}
    for q in (A, B):
        buf = pattern(q.footprint)
        views[q.name] = np.lib.stride_tricks.as_strided(
            buf, q.shape, tuple(s * buf.itemsize for s in q.strides))
    expected = views["A"] @ views["B"]
    i, j = 13, 6
    offset = i * C.strides[0] + j * C.strides[1]
    test_c = f"""
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "mm16.h"

static float *filled(int n) {{
    float *p = malloc((size_t)n * sizeof(float));
    for (int j = 0; j < n; j++) p[j] = (float)(((j * 7 + 3) % 11) - 5) * 0.25f;
    return p;
}}

int main(void) {{
    float *A = filled({A.footprint}), *B = filled({B.footprint});
    float *C = calloc({C.footprint}, sizeof(float));
    mm16(A, B, C);
    double got = C[{offset}], want = {float(expected[i, j])!r};
    printf("C[{i}, {j}] = %.9g (numpy: %.9g)\\n", got, want);
    return fabs(got - want) <= 1e-5 * (1 + fabs(want)) ? 0 : 1;
}}
"""
    work = built / library
    work.mkdir(exist_ok=True)
    (work / "test.c").write_text(test_c)
    if library == "shared":
        link = ["-L..", "-lmm16", "-fopenmp", "-Wl,-rpath," + str(built)]
    else:
        link = ["../libmm16.a", "-fopenmp", "-lm"]
    run(["gcc", "-O2", "-std=gnu11", "-I..", "-o", "test", "test.c", *link], work)
    out = run(["./test"], work).stdout
    assert f"C[{i}, {j}] = " in out


DYNAMIC_AXPY = """
#include <stdint.h>
void axd(int64_t n, float alpha, const float *restrict x, float *restrict y) {
    for (int64_t i = 0; i < n; i++) y[i] = alpha * x[i] + y[i];
}
void axd_packed(void **args) {
    axd(*(int64_t *)args[0], *(float *)args[1], (const float *)args[2], (float *)args[3]);
}
"""


def axpy_dynamic() -> Kernel:
    b = KernelBuilder("axpy", "float32")
    n = b.size("n")
    alpha = b.scalar("alpha")
    x = b.array("x", None, [n])
    y = b.array("y", None, [n], role="inout")
    i = b.dim("i", n, tiles=[(1, 4)])
    b.store(y, [i], b.fma(alpha, b.load(x, [i]), b.load(y, [i]), dims=[i]))
    return b.build()


@needs_cc
def test_export_with_dynamic_sizes(tmp_path: Path) -> None:
    k = axpy_dynamic()
    params = signature(k)  # as printed: shapes unknown until call time
    assert [q.kind for q in params] == ["size", "scalar", "array", "array"]

    export_c(tmp_path / "sized", k, DYNAMIC_AXPY, "axd", params, "", [], sizes={"n": 37})
    header = (tmp_path / "sized" / "axd.h").read_text()
    assert "void axd(int64_t n, float alpha, const float *restrict x, float *restrict y);" \
        in header
    assert "dynamic size, int64_t (exported for n = 37)" in header
    assert "int64_t n = 37;" in (tmp_path / "sized" / "example.c").read_text()
    assert "y[0] = 0" in run(["make", "check"], tmp_path / "sized").stdout

    export_c(tmp_path / "unsized", k, DYNAMIC_AXPY, "axd", params, "", [])
    assert "#error" in (tmp_path / "unsized" / "example.c").read_text()
    run(["make"], tmp_path / "unsized")  # the library itself still builds


def test_header_compiles_as_cpp(matmul: tuple[Kernel, Program, str], tmp_path: Path) -> None:
    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    k, prog, decisions = matmul
    export_c(tmp_path, k, prog.source, prog.entry, prog.params, "", decisions)
    (tmp_path / "use.cpp").write_text('#include "mm16.h"\n'
                                      "void f(float *a, float *b, float *c) { mm16(a, b, c); }\n")
    run(["g++", "-fsyntax-only", "use.cpp"], tmp_path)


def test_export_rejects_wrong_names(matmul: tuple[Kernel, Program, str],
                                    tmp_path: Path) -> None:
    k, prog, decisions = matmul
    with pytest.raises(ValueError, match="does not define 'other'"):
        export_c(tmp_path, k, prog.source, "other", prog.params, "", decisions)
    with pytest.raises(ValueError, match="not a C identifier"):
        export_c(tmp_path, k, prog.source, prog.entry, prog.params, "", decisions,
                 name="my lib")
    assert not list(tmp_path.iterdir())


def test_build_flags_drop_harness_flags() -> None:
    assert build_flags(TIMED_FLAGS) == ["-O3", "-march=native", "-fopenmp", "-fPIC",
                                        "-std=gnu11"]
    assert build_flags("") == list(DEFAULT_BUILD_FLAGS)
    assert build_flags("-O2 -o out.so -shared") == ["-O2", "-fPIC"]
    params = (Param("n", "size", "int64"), Param("a", "scalar", "float64"),
              Param("x", "array", "float64", "inout", (4,), (1,), 4))
    assert prototype("f", params) == "void f(int64_t n, double a, double *restrict x)"
    assert prototype("g", ()) == "void g(void)"


# ---------------------------------------------------------------------- HTML report


def synthetic_evaluations() -> list[dict[str, Any]]:
    """40 measured implementations improving over time, bounds at 60% of the time, one
    violation, and failures of three kinds (one reason with HTML in it)."""
    rng = random.Random(1)
    evals: list[dict[str, Any]] = []
    for i in range(40):
        t = 1e-3 * (1 + 20 * rng.random()) / (1 + i / 10)
        evals.append({"index": i, "decisions": [["size", ["i.1"], [i]]], "bound_s": 0.6 * t,
                      "status": "ok", "reason": "", "median_s": t, "min_s": 0.98 * t,
                      "spread": 0.02, "reps": 9, "elapsed_s": 0.5 * i})
    evals[25]["bound_s"] = 3 * evals[25]["median_s"]  # the model claims it cannot be that fast
    for i, slowdown in ((3, 1.1), (7, 2.4), (9, 1.2)):  # three timings judged by the probe
        evals[i]["slowdown"] = slowdown
    failures = [("compile_error", "p0_mm.c:3: error: expected ';' before '}' token"),
                ("compile_error", "p1_mm.c:9: error: 'x' undeclared"),
                ("wrong", "C[3, 4] = 7 <script>alert(1)</script>, expected 8 & more"),
                ("timeout", "no answer within 30 s")]
    for n, (status, reason) in enumerate(failures):
        evals.insert(5 + 7 * n, {"index": -1, "decisions": [], "bound_s": 1e-4,
                                 "status": status, "reason": reason, "median_s": None,
                                 "min_s": None, "spread": None, "reps": 0, "elapsed_s": 0.0})
    for i, ev in enumerate(evals):
        ev["index"] = i
    return evals


def as_rows(evals: list[dict[str, Any]]) -> list[EvaluationRow]:
    """The evaluations (as a search writes them) as the records return them, with made-up
    ids and dates."""
    return [EvaluationRow(id=i + 1, run_id=1, kernel_id=1, machine_id=1, index=ev["index"],
                          decisions=ev["decisions"], decisions_hash="", bound_s=ev["bound_s"],
                          status=ev["status"], reason=ev["reason"], median_s=ev["median_s"],
                          min_s=ev["min_s"], spread=ev.get("spread"), reps=ev.get("reps", 0),
                          elapsed_s=ev.get("elapsed_s", 0.0), source_digest="", flags="",
                          created_at=0.0, slowdown=ev.get("slowdown"))
            for i, ev in enumerate(evals)]


def best_of(evals: list[EvaluationRow]) -> BestRow:
    ok = min((e for e in evals if e.ok and e.median_s is not None),
             key=lambda e: e.median_s or 0.0)
    assert ok.median_s is not None
    return BestRow(kernel_id=1, machine_id=1, target="cpu", evaluation_id=ok.id,
                   time_s=ok.median_s, entry="mm_best", flags="-O3 -march=native",
                   source="void mm_best(void) { /* a < b && c */ }",
                   decisions=[["dim_kind", ["i.0"], ["PARALLEL"]], ["size", ["j.1", "j.2"], [8]]],
                   updated_at=0.0)


def is_png(path: Path) -> bool:
    data = path.read_bytes()
    if not data.startswith(b"\x89PNG\r\n\x1a\n") or data[12:16] != b"IHDR":
        return False
    width, height = struct.unpack(">II", data[16:24])
    return width > 100 and height > 100 and data.endswith(b"IEND\xaeB`\x82")


def test_report_from_synthetic_evaluations(tmp_path: Path) -> None:
    evals = as_rows(synthetic_evaluations())
    best = best_of(evals)
    machine = {"key": "m-1", "model": "Test CPU <x86>", "cores": 8, "compiler": "gcc 12",
               "flags": ["avx2", "fma"], "cpu": {"nested": "not shown"}}
    flops = 2 * 64 * 64 * 64
    page = write_report(tmp_path / "rep", title="matmul m=64 <tuned>", kernel_desc="kernel mm",
                        evaluations=evals, best=best, machine=machine,
                        peak="peak 100 GFLOP/s", flops=flops)
    assert page == tmp_path / "rep" / "index.html"
    text = page.read_text()

    for key, name in PLOTS.items():
        if key == "gap":  # no run given: no certificate to draw
            assert not (tmp_path / "rep" / name).exists()
            assert "The last run recorded no certificate" in text
            continue
        assert is_png(tmp_path / "rep" / name), name
        assert f'src="{name}"' in text
    for heading in ("Summary", "Machine", "Best time against evaluations",
                    "Model bound against measured time", "Distribution of measured times",
                    "Best implementation", "Decisions (2)", "Failures (4)"):
        assert f">{heading}</h" in text, heading
    assert "<td>Evaluations</td><td class=\"num\">44</td>" in text
    assert "<td>Measured (ok)</td><td class=\"num\">40</td>" in text
    assert "<td>Failures</td><td class=\"num\">4</td>" in text
    assert "<td>Failures: compile_error</td><td class=\"num\">2</td>" in text
    assert "<td>Failures: wrong</td><td class=\"num\">1</td>" in text
    assert "<td>Model violations</td><td class=\"num\">1</td>" in text
    assert ("<td>Timed while a core ran slowed (&gt; 1.5x, of 3 probed)</td>"
            "<td class=\"num\">1</td>") in text
    violation = next(i for i, e in enumerate(evals, start=1) if is_violation(e))
    assert f'<tr><td class="num">{violation}</td><td class="num">' in text
    assert '<td class="num">3.06</td></tr>' in text  # bound / min time: 3 / 0.98
    assert format_time(best.time_s) in text
    assert f"{flops / best.time_s / 1e9:.4g}" in text
    assert "peak 100 GFLOP/s" in text

    # Decisions of the best, one row each; a decision over two arguments lists both.
    assert "<td>dim_kind</td><td>i.0</td><td>PARALLEL</td>" in text
    assert "<td>size</td><td>j.1, j.2</td><td>8</td>" in text
    # Everything from the records is escaped.
    assert "<script>" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "expected 8 &amp; more" in text
    assert "matmul m=64 &lt;tuned&gt;" in text and "Test CPU &lt;x86&gt;" in text
    assert "a &lt; b &amp;&amp; c" in text
    assert "not shown" not in text  # nested machine descriptions are left out


def test_violations_follow_the_tuner() -> None:
    [ok] = as_rows([{"index": 0, "decisions": [], "status": "ok", "reason": "",
                     "bound_s": 1.0, "median_s": 1.0, "min_s": 0.99}])
    assert not is_violation(ok)  # within noise
    assert is_violation(replace(ok, bound_s=1.2))
    assert is_violation(replace(ok, bound_s=1.1, min_s=None))  # falls back to the median
    assert not is_violation(replace(ok, bound_s=2.0, status="wrong"))
    assert not is_violation(replace(ok, bound_s=None))


def test_report_without_measurements(tmp_path: Path) -> None:
    """A run where everything failed still gets a page (that is when it is needed most)."""
    first = write_report(tmp_path, title="t", kernel_desc="k", best=None, machine=None,
                         evaluations=as_rows(synthetic_evaluations()))
    assert all((tmp_path / name).exists() for key, name in PLOTS.items() if key != "gap")
    failed = as_rows([{"index": i, "decisions": [], "bound_s": None, "status": "crash",
                       "reason": f"signal {i}", "median_s": None, "min_s": None}
                      for i in range(60)])
    page = write_report(tmp_path, title="all failed", kernel_desc="k", evaluations=failed,
                        best=None, machine=None, flops=1e9)
    assert page == first
    text = page.read_text()
    # The previous report's plots are gone: this page draws none of them.
    assert not any((tmp_path / name).exists() for name in PLOTS.values())
    assert "<img" not in text and "nothing to plot" in text
    assert "<td>Evaluations</td><td class=\"num\">60</td>" in text
    assert "<td>Failures: crash</td><td class=\"num\">60</td>" in text
    assert "<td>Best time</td><td class=\"num\">n/a</td>" in text
    assert "No implementation was measured successfully." in text
    assert "The first 50 of 60 are listed." in text
    assert "signal 49" in text and "signal 50" not in text

    empty = write_report(tmp_path / "empty", title="nothing", kernel_desc="", evaluations=[],
                         best=None, machine=None)
    assert "Failures (0)" in empty.read_text()


def test_report_from_records(tmp_path: Path) -> None:
    """Evaluations and best exactly as the records return them."""
    k = partita.kernel("axpy", n=64)
    evals = synthetic_evaluations()
    with Records(tmp_path / "records.sqlite") as rec:
        kid = rec.kernel_id(k, {"n": 64})
        mid = rec.machine_id({"key": "m", "model": "M", "cores": 2, "compiler": "cc"})
        run_id = rec.start_run(kid, mid, "cpu", "random")
        for ev in evals:
            eid = rec.add_evaluation(run_id, ev, flags=TIMED_FLAGS)
            if ev["status"] == "ok":
                rec.offer_best(kid, mid, "cpu", eid, ev["median_s"], ev["decisions"],
                               "void f(void) {}", "f", TIMED_FLAGS)
        rec.finish_run(run_id, space_lower_bound_s=1e-4,
                       lower_bound_history=[(0.0, 5e-5), (1.0, 1e-4)])
        stored = rec.evaluations(kid, mid)
        best = rec.best(kid, mid, "cpu")
        runs = rec.runs(kid, mid)
    assert best is not None
    page = write_report(tmp_path / "rep", title="axpy", kernel_desc=k.describe(),
                        evaluations=stored, best=best, machine=None, runs=runs)
    text = page.read_text()
    assert "<td>Evaluations</td><td class=\"num\">44</td>" in text
    assert format_time(best.time_s) in text and "Decisions (1)" in text
    assert all(is_png(tmp_path / "rep" / name) for name in PLOTS.values())
    assert ">Best time and optimality certificate</h" in text
