"""The kernel families written through partita.mdh (convolutions, stencils, a contraction, a
transpose), each tuned with a fixed budget and then timed side by side with the library a user
would call instead: PyTorch's CPU convolution (oneDNN) where it is installed (the ``bench``
extra), ``np.einsum(..., optimize=True)`` for the contraction, ``scipy.ndimage.correlate``
(and numpy's slicing) for the stencils, numpy for the transpose, ``np.cumsum`` for the prefix
sums, and the STREAM triad for the memory-bound rows (bytes moved over time).

Run with ``make bench`` (``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python
bench/families_bench.py --budget 120 --write BENCHMARKS.md``). As in the tuning benchmark,
partita's best is timed again after the search in the tuner's worker (compiled outside the
timed region, threads created before it, warm-up first), alternating with the reference over
:data:`ROUNDS` rounds; each figure is the median over the rounds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import partita
from host import machine_description
from partita.codegen.program import Program
from partita.kernels.families import OFFSETS_1D, OFFSETS_2D, OFFSETS_3D
from partita.kernels.registry import get_spec
from partita.runtime.evaluate import Evaluator
from partita.search.stop import WallTime
from partita.targets.cpu.measure import TriadProbe
from partita.tuning import Tuned, numpy_time
from results import RESULTS_DIR, Record, provenance, record, target, write_results
from sections import replace_section
from summary import update as update_summary

ROUNDS = 5
REFERENCE_MIN_S = 0.3


@dataclass
class Case:
    label: str
    kernel: str
    params: dict[str, Any]
    reference: str
    """'torch' (PyTorch's convolution or softmax, numpy's reference without torch), 'numpy'
    or 'einsum' (the library reference), 'bincount' (``np.bincount`` alone, on as many
    indices in range), or 'triad' (bandwidth against the STREAM triad, numpy's time in the
    details)."""
    target: tuple[str, float] | None = None
    notes: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


CCSD_T = dict.fromkeys("abcdefg", 16)
CASES = [
    Case("conv2d ResNet-50 3x3 (N=1, 58x58x64, K=64)", "conv2d",
         {"n": 1, "h": 58, "w": 58, "c": 64, "k": 64, "r": 3, "s": 3}, "torch", ("<=", 1.1),
         "the 56x56 layer with its padding of 1 given as a 58x58 image"),
    Case("conv2d ResNet-50 first layer (N=16, 230x230x3, K=64, 7x7, stride 2)", "conv2d",
         {"n": 16, "h": 230, "w": 230, "c": 3, "k": 64, "r": 7, "s": 7, "stride": 2}, "torch",
         ("<=", 1.0)),
    Case("depthwise conv2d (N=1, 114x114x32, 3x3)", "depthwise_conv2d",
         {"n": 1, "h": 114, "w": 114, "c": 32, "r": 3, "s": 3}, "torch"),
    Case("contraction gdab,efgc->abcdef, every index 16", "contraction",
         {"spec": "gdab,efgc->abcdef", **CCSD_T}, "einsum", ("<=", 0.5)),
    Case("contraction dega,gfbc->abcdef, every index 16", "contraction",
         {"spec": "dega,gfbc->abcdef", **CCSD_T}, "einsum", ("<=", 0.5)),
    Case("contraction dfgb,geac->abcdef, every index 16", "contraction",
         {"spec": "dfgb,geac->abcdef", **CCSD_T}, "einsum", ("<=", 0.5)),
    Case("jacobi1d 2^24, one sweep", "jacobi1d", {"n": 1 << 24}, "triad"),
    Case("jacobi2d 4096^2, one sweep", "jacobi2d", {"n": 4096}, "triad", (">=", 0.9)),
    Case("jacobi3d 256^3, one sweep", "jacobi3d", {"n": 256}, "triad", (">=", 0.85)),
    Case("transpose 4096^2", "transpose", {"m": 4096, "n": 4096}, "numpy"),
    Case("softmax 4096x1024 (rows)", "softmax", {"m": 4096, "n": 1024}, "torch",
         notes="each row's max, exponentials and sum; PyTorch's torch.softmax(x, dim=1)"),
    Case("histogram 2^26, 256 bins", "histogram", {"n": 1 << 26, "bins": 256}, "bincount",
         ("<=", 0.5), "int32 bin indices drawn uniformly in [0, 256)"),
    Case("prefix_sum 2^26, one recurrence (chunks=1)", "prefix_sum", {"n": 1 << 26}, "triad",
         notes="x[i + 1] += x[i] in place: one chain of dependent adds, on one core"),
    Case("prefix_sum 2^26, chunks tuned (scan decomposition)", "prefix_sum", {"n": 1 << 26},
         "triad", (">=", 0.8), notes="the chunk count tuned as a variant of the order of the sum",
         extra={"reassociate": True}),
]


def median_time(call: Callable[[], Any]) -> float:
    """Median seconds per call, after a warm-up, over at least :data:`REFERENCE_MIN_S`."""
    call()
    times: list[float] = []
    spent = 0.0  # a running total: summing the list at every call is quadratic in the calls
    while len(times) < 3 or spent < REFERENCE_MIN_S:
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
        spent += times[-1]
    return statistics.median(times)


def torch_call(case: Case) -> Callable[[], Any] | None:
    """PyTorch's convolution on the case's shapes (NHWC as channels-last), or its softmax
    over rows, or None without PyTorch."""
    try:
        import torch  # the bench extra: a heavy, optional dependency
    except ImportError:
        return None
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    p = get_spec(case.kernel).resolve(case.params)
    if case.kernel == "softmax":
        rows = torch.randn(p["m"], p["n"])
        return lambda: torch.softmax(rows, dim=1)
    depthwise = case.kernel == "depthwise_conv2d"
    image = torch.randn(p["n"], p["c"], p["h"], p["w"]).to(memory_format=torch.channels_last)
    out_channels = p["c"] if depthwise else p["k"]
    weight = torch.randn(out_channels, 1 if depthwise else p["c"], p["r"], p["s"])
    weight = weight.to(memory_format=torch.channels_last)

    def call() -> Any:
        with torch.no_grad():
            return torch.nn.functional.conv2d(image, weight, stride=p["stride"],
                                              dilation=p.get("dilation", 1),
                                              groups=p["c"] if depthwise else 1)
    return call


def scipy_call(case: Case) -> Callable[[], Any] | None:
    """``scipy.ndimage.correlate`` with the stencil's weights on the case's grid, written into
    a preallocated output (the whole grid: SciPy extends the border, where the kernel keeps
    it), or None for a case that is not a stencil or without SciPy."""
    try:
        from scipy import ndimage  # the bench extra
    except ImportError:
        return None
    offsets = {"jacobi1d": OFFSETS_1D, "jacobi2d": OFFSETS_2D,
               "jacobi3d": OFFSETS_3D}.get(case.kernel)
    if offsets is None:
        return None
    rank, n = len(offsets[0]), case.params["n"]
    weights = np.zeros((3,) * rank, np.float32)
    for t, offset in enumerate(offsets):
        weights[tuple(1 + o for o in offset)] = 0.5 / (t + 1)
    grid = np.random.default_rng(0).uniform(-1, 1, (n,) * rank).astype(np.float32)
    out = np.empty_like(grid)
    return lambda: ndimage.correlate(grid, weights, output=out, mode="nearest")


def bincount_call(case: Case) -> Callable[[], Any]:
    """``np.bincount`` on indices already in range: what a user calls for the counts (the
    library's reference also clips the indices, a pass over them the kernel does not need)."""
    p = get_spec(case.kernel).resolve(case.params)
    x = np.random.default_rng(0).integers(0, p["bins"], p["n"], dtype=np.int32)
    return lambda: np.bincount(x, minlength=p["bins"])


def retime(case: Case, tuned: Tuned, probe: TriadProbe, seed: int) -> dict[str, float]:
    """partita (the worker's median), the reference and, for a memory-bound case, the
    triad, in :data:`ROUNDS` alternating rounds; medians."""
    prog = Program(tuned.kernel, tuned.entry, tuned.source, tuned.params)
    library = torch_call(case) if case.reference == "torch" else \
        bincount_call(case) if case.reference == "bincount" else None
    scipy_stencil = scipy_call(case)
    rounds: dict[str, list[float]] = {"partita": [], "reference": [], "triad": [],
                                      "scipy": []}
    with Evaluator(seed=seed) as ev:
        for _ in range(ROUNDS):
            if case.reference == "triad":
                rounds["triad"].append(probe.gbs())
            if scipy_stencil is not None:
                rounds["scipy"].append(median_time(scipy_stencil))
            m = ev.evaluate([prog])[0]
            if not m.ok or m.median_s is None:
                raise RuntimeError(f"timing the best again failed: {m.status} {m.reason}")
            rounds["partita"].append(m.median_s)
            rounds["reference"].append(median_time(library) if library is not None
                                       else numpy_time(tuned.kernel, seed, reps=3,
                                                       min_s=REFERENCE_MIN_S) or math.nan)
    return {k: statistics.median(v) if v else math.nan for k, v in rounds.items()}


def run(case: Case, budget: float, db: Path, seed: int, probe: TriadProbe) -> dict[str, Any]:
    spec = get_spec(case.kernel)
    params = spec.resolve(case.params)
    k = partita.kernel(case.kernel, **case.params)
    if case.extra.get("reassociate"):
        # the variants share the budget (a stop condition cannot be shared among them)
        tuned = partita.tune(k, budget=budget, db=db, seed=seed, reassociate=True)
        case = dataclasses.replace(case, label=f"{case.label}: chunks="
                                   f"{(tuned.variant or {}).get('chunks', 1)}")
    else:
        tuned = partita.tune(k, stop=WallTime(budget), db=db, seed=seed)
    times = retime(case, tuned, probe, seed)
    t = times["partita"]
    res = tuned.result
    for e in res.violations if res else []:
        # The records are a temporary database: what a violation needs to be diagnosed is
        # printed here, or it is lost with them.
        print(f"  bound violation: evaluation {e.index}, bound {e.bound_s:.4g} s, fastest "
              f"{e.min_s} s, median {e.median_s} s, slowdown {e.slowdown}\n"
              f"    decisions: {json.dumps(e.decisions)}", flush=True)
    return {"case": case, **times, "gflops": spec.flops(**params) / t / 1e9,
            "gbs": spec.bytes(**params) / t / 1e9,
            "reference_name": reference_name(case),
            "evals": len(res.evaluations) if res else 0,
            "failed": len(res.failures) if res else 0,
            "violations": len(res.violations) if res else 0, "source": tuned.source}


def reference_name(case: Case) -> str:
    if case.reference == "torch":
        if torch_call(case) is None:
            return "numpy"
        return "PyTorch" if case.kernel == "softmax" else "PyTorch (oneDNN)"
    return {"einsum": "np.einsum(optimize=True)", "numpy": "numpy", "bincount": "np.bincount",
            "triad": "STREAM triad"}[case.reference]


def of_peak(value: float, peak: float | None) -> str:
    """``value`` with its share of the machine's ``peak`` (none where it was not measured)."""
    return f"{value:.3g}" if not peak else f"{value:.3g} ({value / peak:.0%})"


def table(rows: list[dict[str, Any]]) -> str:
    """Each row's GFLOP/s and GB/s come with their share of the peak FLOP/s and of the STREAM
    triad of the machine that row was measured on (``peak``, ``machine_triad``)."""
    lines = ["| case | partita | reference | ratio or bandwidth (target) | GFLOP/s (% of peak) "
             "| GB/s (% of the machine's triad) | evaluations (failed) | bound violations |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        case: Case = r["case"]
        if case.reference == "triad":
            frac = r["gbs"] / r["triad"]
            versus = f"{frac:.0%} of the triad's {r['triad']:.1f} GB/s"
            figure = frac
            reference = f"numpy {r['reference'] * 1e3:.4g} ms"
            if not math.isnan(r["scipy"]):
                reference += (f"; scipy.ndimage {r['scipy'] * 1e3:.4g} ms "
                              f"(partita / scipy {r['partita'] / r['scipy']:.2f})")
        else:
            figure = r["partita"] / r["reference"]
            versus = f"{figure:.2f}"
            reference = f"{r['reference_name']} {r['reference'] * 1e3:.4g} ms"
        if case.target is not None:
            op, value = case.target
            met = figure <= value if op == "<=" else figure >= value
            shown = f"{value:.0%}" if case.reference == "triad" else f"{value:g}"
            versus += f" ({op} {shown}) {'met' if met else 'not met'}"
        lines.append(f"| {case.label} | {r['partita'] * 1e3:.4g} ms | {reference} | {versus} | "
                     f"{of_peak(r['gflops'], r.get('peak'))} | "
                     f"{of_peak(r['gbs'], r.get('machine_triad'))} | "
                     f"{r['evals']} ({r['failed']}) | {r['violations']} |")
    return "\n".join(lines) + "\n"


SCIPY_SUFFIX = ", against SciPy"


def to_records(r: dict[str, Any], command: str, machine: dict[str, Any]) -> list[Record]:
    """The case's record, and for a stencil another against ``scipy.ndimage.correlate``."""
    out = [to_record(r, command, machine)]
    if not math.isnan(r["scipy"]):
        out.append(record(f"{r['case'].label}{SCIPY_SUFFIX}", quantity="time", unit="s",
                          partita=r["partita"], reference_name="scipy.ndimage.correlate",
                          reference=r["scipy"], command=command, machine_desc=machine,
                          details={"gbs": r["gbs"]}))
    return out


def to_record(r: dict[str, Any], command: str, machine: dict[str, Any]) -> Record:
    case: Case = r["case"]
    details = {"gflops": r["gflops"], "gbs": r["gbs"], "evaluations": r["evals"],
               "failed": r["failed"], "bound_violations": r["violations"],
               "notes": case.notes}
    tgt = None
    if case.reference == "triad":
        if case.target is not None:
            tgt = target(case.target[0], case.target[1])
        details["numpy_s"] = r["reference"]
        return record(case.label, quantity="bandwidth", unit="GB/s", partita=r["gbs"],
                      reference_name="STREAM triad", reference=r["triad"], tgt=tgt,
                      command=command, machine_desc=machine, details=details)
    if case.target is not None:
        tgt = target(case.target[0], case.target[1])
    return record(case.label, quantity="time", unit="s", partita=r["partita"],
                  reference_name=r["reference_name"], reference=r["reference"], tgt=tgt,
                  command=command, machine_desc=machine, details=details)


COMMAND = ("env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/families_bench.py "
           "--budget {budget:g} --write BENCHMARKS.md")

REPORT = """## Kernel families against the libraries people call

{provenance}

{table}
Each case is built through `partita.mdh` (the library's `conv2d`, `depthwise_conv2d`,
`contraction`, `jacobi2d`, `jacobi3d` and `transpose`; `histogram` and `prefix_sum` through the
builder), tuned for {budget:g} s (MCTS, seed {seed}, records starting empty), then timed again
in the tuner's worker, alternating with the reference over {rounds} rounds; each figure is the
median over the rounds. The references run in this process on the same shapes: PyTorch's
`conv2d` on channels-last tensors (its CPU build, the `bench` extra; numpy's reference where
PyTorch is not installed) and its `softmax` over rows, `np.einsum` with `optimize=True` (three
CCSD(T) contractions of the TCCG suite of Springer and Bientinesi, every index 16),
`np.bincount` on as many int32 indices in range, `scipy.ndimage.correlate` (the same weights;
it also writes the border, which the kernel keeps) and numpy's slicing for the stencils, and
numpy for the transpose. The stencils are memory-bound: their row compares the bytes they must
move (the grid read, the interior written) over their time with the STREAM triad timed in the
same rounds. The convolutions are not padded: the ResNet-50 3x3 layer is given its padded 58x58
image, which is the same arithmetic without the border tests of a padded view (`pad=1`). The
prefix sums (the library's `prefix_sum`, the running sum of 2^26 + 1 floats in place) are
memory-bound too once the recurrence is split: their rows count the array read and written once
(what `np.cumsum`, the reference, moves) against the triad, whether the kernel runs as one
chain of dependent adds (`chunks=1`) or as the scan decomposition whose chunk count the tuner
picks (`reassociate=True`; each chunk scanned in place, then its offset added: two passes
over the array, each parallel over the chunks). Each row's GFLOP/s and GB/s are also given as
shares of the peak FLOP/s and of the STREAM triad of the machine that row was measured on
(named in the summary), as `partita machine` measured them. What stands between each row and
its target is in [docs/benchmark-notes.md](docs/benchmark-notes.md#kernel-families).
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--budget", type=float, default=120.0, help="seconds per case")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", help="comma-separated substrings of case labels")
    parser.add_argument("--keep-code", type=Path,
                        help="write each case's best implementation (C source) into this folder")
    parser.add_argument("--write", help="rewrite the families section of this Markdown file")
    parser.add_argument("--results", type=Path, default=RESULTS_DIR,
                        help="with --write, the folder of results (default: bench/results)")
    args = parser.parse_args()
    cases = [c for c in CASES if not args.only
             or any(s in c.label for s in args.only.split(","))]
    rows = []
    host = machine_description()
    with tempfile.TemporaryDirectory() as tmp, TriadProbe() as probe:
        db = Path(tmp) / "records.sqlite"
        for case in cases:
            print(f"tuning {case.label} for {args.budget:g} s ...", flush=True)
            rows.append(run(case, args.budget, db, args.seed, probe))
            rows[-1].update(peak=host.get("peak_gflops_fp32"),
                            machine_triad=host.get("stream_triad_gbs"))
            if args.keep_code:
                args.keep_code.mkdir(parents=True, exist_ok=True)
                name = "".join(ch if ch.isalnum() else "_" for ch in case.label)
                (args.keep_code / f"{name}.c").write_text(rows[-1]["source"])
            print(table(rows[-1:]), flush=True)
    text = table(rows)
    print(text)
    if args.write:
        write_section(args, rows, text)


def write_section(args: argparse.Namespace, rows: list[dict[str, Any]], text: str) -> None:
    """Rewrite the families section, its results and the summary. A rerun of some cases
    (``--only``) keeps the other cases' records; the section's table is made from every
    record, and names the rows rerun."""
    machine = machine_description()
    only = f' --only "{args.only}"' if args.only else ""
    command = COMMAND.format(budget=args.budget) + only
    records = [rec for r in rows for rec in to_records(r, command, machine)]
    if args.only:
        forget_variants(args.results / "families.json", rows)
    path = write_results("families", "Kernel families", records, args.results,
                         keep_other_cases=bool(args.only))
    how, rerun = "", ""
    if args.only:
        text = table_of_records(json.loads(path.read_text())["results"])
        how = ", the rows rerun last (named below the table; every row's date and build are in " \
              "the summary)"
        names = ", ".join(r["case"].label for r in rows)
        rerun = f"\nRerun afterwards with `{command}`: {names}.\n"
    replace_section(args.write, "families", REPORT.format(
        provenance=provenance(COMMAND.format(budget=args.budget), records[0], how),
        table=text + rerun, budget=args.budget, seed=args.seed, rounds=ROUNDS))
    update_summary(args.write, args.results)


def forget_variants(path: Path, rows: list[dict[str, Any]]) -> None:
    """Drop from the results the records of the cases rerun whose label names the variant
    the tuner found (``prefix_sum ..., chunks tuned: chunks=32``): the rerun's own record,
    under another variant's name, replaces them."""
    if not path.exists():
        return
    data = json.loads(path.read_text())
    rerun = {case_of(r["case"].label).label for r in rows}
    data["results"] = [rec for rec in data["results"]
                       if case_of(rec["case"].removesuffix(SCIPY_SUFFIX)).label not in rerun
                       or rec["case"] in {r["case"].label for r in rows}]
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")


def case_of(label: str) -> Case:
    """The case a row's label names (a variant's label extends its case's)."""
    return next(c for c in CASES if label == c.label or label.startswith(c.label + ":"))


def table_of_records(records: list[Record]) -> str:
    """The section's table made from the recorded cases (the figures :func:`table` prints
    from a run), in :data:`CASES` order."""
    scipy = {r["case"].removesuffix(SCIPY_SUFFIX): r for r in records
             if r["case"].endswith(SCIPY_SUFFIX)}
    rows = []
    for rec in (r for r in records if not r["case"].endswith(SCIPY_SUFFIX)):
        case = case_of(rec["case"])
        d = rec["details"]
        params = get_spec(case.kernel).resolve(case.params)
        triad = rec["unit"] == "GB/s"
        seconds = get_spec(case.kernel).bytes(**params) / rec["partita"] / 1e9 if triad \
            else rec["partita"]
        rows.append({"case": dataclasses.replace(case, label=rec["case"]), "partita": seconds,
                     "reference": d["numpy_s"] if triad else rec["reference"]["value"],
                     "reference_name": rec["reference"]["name"],
                     "triad": rec["reference"]["value"] if triad else math.nan,
                     "scipy": scipy[rec["case"]]["reference"]["value"]
                     if rec["case"] in scipy else math.nan,
                     "gflops": d["gflops"], "gbs": d["gbs"], "evals": d["evaluations"],
                     "peak": rec["machine"].get("peak_gflops_fp32"),
                     "machine_triad": rec["machine"].get("stream_triad_gbs"),
                     "failed": d["failed"], "violations": d["bound_violations"]})
    rows.sort(key=lambda r: CASES.index(case_of(r["case"].label)))
    return table(rows)

if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
