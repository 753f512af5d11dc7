"""GPU benchmark: partita's tuned CUDA kernels beside cuBLAS, on one device, in one process.

Each case is tuned on the gpu target for its share of the budget (``partita.tune(...,
target="gpu")``: CUDA printed, built by nvcc, checked against numpy and timed on the device),
then its best is built again and timed alternately with the library a user would call instead,
through CuPy (cuBLAS for the products; a device-to-device copy for the memory-bound axpy):
:data:`ROUNDS` rounds, each the median of event-timed launches on the null stream after
warm-up (the protocol of the tuner's own timing, :func:`partita.targets.gpu.cuda
.time_repetitions`), each figure the median over the rounds. CuPy's products run in fp32
(``CUPY_TF32`` unset: no tensor cores), as partita's kernels do.

Without a CUDA device (or without CuPy) the script says so and exits 0, so ``make bench``
runs on any machine. ``--render FILE`` rewrites the BENCHMARKS.md section from a results file
measured elsewhere (a lent GPU machine) without a device.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import partita
from partita.kernels.registry import get_spec
from partita.runtime.harness import TimingOptions
from partita.targets import get as get_target
from partita.targets.base import TargetUnavailable
from partita.tuning.tuned import Tuned
from results import RESULTS_DIR, Record, machine, provenance, record, target, write_results
from sections import replace_section

ROUNDS = 3
"""Alternating timings of partita's best and the reference after the search."""

TIMING = TimingOptions(warmups=3, warmup_s=0.05, min_reps=10, max_reps=200, budget_s=1.0)
"""Event-timed launches per round, for partita's kernel and the reference alike."""


@dataclass(frozen=True)
class GpuCase:
    label: str
    kernel: str
    params: dict[str, int]
    target: str
    """'ratio<=X' (partita's time over the reference's) or 'copy>=X' (partita's bandwidth
    over a device copy's)."""
    share: float
    """The case's share of ``--budget``."""


CASES = [
    GpuCase("sgemm 1024^3", "matmul", {"m": 1024, "n": 1024, "k": 1024}, "ratio<=2.0", 0.40),
    GpuCase("sgemm 256x256x32", "matmul", {"m": 256, "n": 256, "k": 32}, "ratio<=1.0", 0.15),
    GpuCase("batched 512x32x32x64", "batched_matmul", {"b": 512, "m": 32, "n": 32, "k": 64},
            "ratio<=1.0", 0.15),
    GpuCase("strided sgemm 1024^3 (A stride 32)", "matmul",
            {"m": 1024, "n": 1024, "k": 1024, "stride_a": 32}, "ratio<=1.0", 0.15),
    GpuCase("axpy 2^26", "axpy", {"n": 1 << 26}, "copy>=0.85", 0.15),
]


# -- the references, through CuPy --------------------------------------------------------------


def event_time(cp: Any, call: Callable[[], Any]) -> float:
    """One call between two CUDA events on the null stream, in seconds."""
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    call()
    end.record()
    end.synchronize()
    return float(cp.cuda.get_elapsed_time(start, end)) * 1e-3


def repeated(cp: Any, call: Callable[[], Any]) -> float:
    """The median of event-timed calls, warmed up and repeated as partita's are."""
    from partita.targets.gpu.cuda import time_repetitions

    times, _, _ = time_repetitions(lambda: event_time(cp, call), TIMING)
    return float(np.median(times))


def reference_call(cp: Any, case: GpuCase) -> tuple[str, Callable[[], Any], float]:
    """(the reference's name, one call of it on device arrays, bytes it moves)."""
    p = case.params
    rng = np.random.default_rng(0)

    def dev(*shape: int) -> Any:
        return cp.asarray(rng.standard_normal(shape, dtype=np.float32))

    if case.kernel == "axpy":
        src, dst = dev(p["n"]), cp.empty(p["n"], dtype=cp.float32)
        return "device copy (CuPy)", lambda: cp.copyto(dst, src), 2.0 * 4 * p["n"]
    if case.kernel == "batched_matmul":
        a, b = dev(p["b"], p["m"], p["k"]), dev(p["b"], p["k"], p["n"])
        c = cp.empty((p["b"], p["m"], p["n"]), dtype=cp.float32)
        return "cuBLAS (CuPy matmul)", lambda: cp.matmul(a, b, out=c), 0.0
    m, n, k, stride = p["m"], p["n"], p["k"], p.get("stride_a", 1)
    b, c = dev(k, n), cp.empty((m, n), dtype=cp.float32)
    if stride == 1:
        a = dev(m, k)
        return "cuBLAS (CuPy matmul)", lambda: cp.matmul(a, b, out=c), 0.0
    view = dev(m * k * stride)[::stride].reshape(m, k)

    def copy_then_product() -> Any:
        return cp.matmul(cp.ascontiguousarray(view), b, out=c)

    return "the view copied contiguous, then cuBLAS (CuPy)", copy_then_product, 0.0


# -- one case ----------------------------------------------------------------------------------


def retime(cp: Any, tuned: Tuned, case: GpuCase) -> dict[str, Any]:
    """partita's best and the reference, alternating over :data:`ROUNDS` rounds."""
    from partita.targets.gpu.cuda import CudaRunner

    plug = get_target("gpu")
    space = partita.space(tuned.kernel, target="gpu")
    cand = space.replay(tuned.decisions)
    program = plug.print_program(cand, tuned.entry)
    name, call, copy_bytes = reference_call(cp, case)
    ours, theirs = [], []
    with CudaRunner(seed=0, timing=TIMING) as runner:
        for _ in range(ROUNDS):
            m = runner.measure(program)
            if not m.ok or m.median_s is None:
                raise RuntimeError(f"timing the best again failed: {m.status} {m.reason}")
            ours.append(m.median_s)
            theirs.append(repeated(cp, call))
    return {"time": statistics.median(ours), "reference": statistics.median(theirs),
            "reference_name": name, "copy_bytes": copy_bytes, "rounds": (ours, theirs)}


def run_case(cp: Any, case: GpuCase, budget: float, db: Path) -> dict[str, Any]:
    k = partita.kernel(case.kernel, **case.params)
    spec = get_spec(case.kernel)
    params = spec.resolve(case.params)
    t0 = time.perf_counter()

    def progress(e: Any, _state: Any) -> None:
        # Each evaluation as it lands: a batch that builds or runs long shows where.
        took = f"{e.median_s * 1e3:.4g} ms" if e.median_s else e.reason[:80]
        print(f"  {time.perf_counter() - t0:6.1f} s  #{e.index} {e.status} {took} "
              f"(bound {e.bound_s * 1e3:.3g} ms)", flush=True)

    tuned = partita.tune(k, target="gpu", budget=budget * case.share, db=db, seed=0,
                         on_evaluation=progress)
    elapsed = time.perf_counter() - t0
    res = tuned.result
    n, within = res.accuracy_counts() if res else (0, {})
    out: dict[str, Any] = {
        "label": case.label, "search_s": tuned.time, "elapsed_s": elapsed,
        "evaluations": len(res.evaluations) if res else 0,
        "failed": len(res.failures) if res else 0,
        "violations": len(res.violations) if res else 0,
        "bounds_within_10x": within.get(10, 0) / n if n else None,
        "root_bound_s": res.root_bound_s if res else None,
        "flops": spec.flops(**params), "bytes": spec.bytes(**params),
        "decisions": [str(d) for d in tuned.decisions],
    }
    print(f"  best {tuned.time * 1e3:.4g} ms after {elapsed:.0f} s; timing it beside "
          "the reference ...", flush=True)
    out.update(retime(cp, tuned, case))
    return out


# -- the report --------------------------------------------------------------------------------


def case_of(label: str) -> GpuCase:
    return next(c for c in CASES if c.label == label)


def verdict(r: dict[str, Any]) -> tuple[float, str]:
    """(the figure the target bounds, its text)."""
    case = case_of(r["label"])
    if case.target.startswith("copy"):
        value = float(case.target.split(">=")[1])
        frac = (r["bytes"] / r["time"]) / (r["copy_bytes"] / r["reference"])
        return frac, f"{frac:.0%} of the copy's bandwidth (≥ {value:.0%}) " \
                     f"{'met' if frac >= value else 'not met'}"
    value = float(case.target.split("<=")[1])
    ratio = r["time"] / r["reference"]
    return ratio, f"{ratio:.2f} (≤ {value:g}) {'met' if ratio <= value else 'not met'}"


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| case | partita | reference | partita ÷ reference (target) | GFLOP/s | GB/s "
            "| evaluations (failed) | bound violations | bounds within 10x |\n"
            "|---|---|---|---|---|---|---|---|---|\n")
    lines = []
    for r in rows:
        if r.get("error"):
            lines.append(f"| {r['label']} | failed: {r['error']} | - | - | - | - | - | - | - |")
            continue
        within = r["bounds_within_10x"]
        lines.append(
            f"| {r['label']} | {r['time'] * 1e3:.4g} ms ({r['search_s'] * 1e3:.4g}) | "
            f"{r['reference'] * 1e3:.4g} ms, {r['reference_name']} | {verdict(r)[1]} | "
            f"{r['flops'] / r['time'] / 1e9:.4g} | {r['bytes'] / r['time'] / 1e9:.4g} | "
            f"{r['evaluations']} ({r['failed']}) | {r['violations']} | "
            f"{'-' if within is None else f'{within:.0%}'} |")
    return head + "\n".join(lines) + "\n"


COMMAND = "python bench/gpu_bench.py --budget {budget:g} --write BENCHMARKS.md"

REPORT = """## The gpu target beside cuBLAS

{provenance}

{table}
Each case is tuned on the gpu target for its share of {budget:g} s (sgemm 1024^3 40%, the
others 15% each; MCTS, seed 0, records starting empty), then its best is built again and timed
alternately with the reference through CuPy, in the same process on the same device, over
{rounds} rounds: each the median of launches timed with CUDA events on the null stream after
warm-up, the figure the median of the rounds (the search's own time in brackets). cuBLAS runs
in fp32 without tensor cores, as partita's kernels do. axpy moves 12 bytes per element; the
copy, 8. Rerun on a machine without a device, the script exits at once; `--render` rewrites
this section from `bench/results/gpu.json`.
"""


def gpu_machine(info: dict[str, Any]) -> dict[str, Any]:
    return machine(model=info["name"], cores=None, avx512=None,
                   peak_gflops_fp32=round(info["peak_gflops_fp32"], -2), stream_triad_gbs=None,
                   source="datasheet", kind="gpu",
                   notes=f"{info['sms']} SMs, driver {info['driver']}, nvcc {info['nvcc']}")


def records_of(rows: list[dict[str, Any]], info: dict[str, Any], command: str) -> list[Record]:
    desc = gpu_machine(info)
    out = []
    for r in rows:
        case = case_of(r["label"])
        if r.get("error"):
            rec = record(case.label, quantity="time", unit="s", partita=None,
                         command=command, machine_desc=desc, details=r)
            rec["met"] = False
        elif case.target.startswith("copy"):
            rec = record(case.label, quantity="bandwidth", unit="GB/s",
                         partita=r["bytes"] / r["time"] / 1e9,
                         reference_name=r["reference_name"],
                         reference=r["copy_bytes"] / r["reference"] / 1e9,
                         tgt=target(">=", float(case.target.split(">=")[1])),
                         command=command, machine_desc=desc, details=r)
        else:
            rec = record(case.label, quantity="time", unit="s", partita=r["time"],
                         reference_name=r["reference_name"], reference=r["reference"],
                         tgt=target("<=", float(case.target.split("<=")[1])),
                         command=command, machine_desc=desc, details=r)
        out.append(rec)
    return out


def render(data: dict[str, Any], write: str) -> None:
    rows, info = data["rows"], data["device"]
    command = COMMAND.format(budget=data["budget"])
    recs = records_of(rows, info, command)
    for rec in recs:
        rec["date"], rec["commit"] = data["date"], data["commit"]
    text = REPORT.format(provenance=provenance(command, recs[0]), table=table(rows),
                         budget=data["budget"], rounds=ROUNDS)
    replace_section(write, "gpu", text)
    write_results("gpu", "The gpu target beside cuBLAS", recs, RESULTS_DIR)


# -- main --------------------------------------------------------------------------------------


def device_info() -> dict[str, Any]:
    from partita.targets.gpu.cuda import cuda_device
    from partita.targets.gpu.nvcc import find_nvcc, nvcc_version

    dev = cuda_device()
    return {"name": dev.name, "sms": dev.multiprocessors, "driver": dev.driver_version,
            "nvcc": nvcc_version(find_nvcc()),
            # Hopper's 128 fp32 lanes per SM, an FMA two flops, at the 1.98 GHz boost clock
            # of the H100 and H200 datasheets.
            "peak_gflops_fp32": round(dev.multiprocessors * 128 * 2 * 1.98, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--budget", type=float, default=600.0,
                        help="seconds of tuning, shared among the cases")
    parser.add_argument("--only", help="comma-separated substrings of case labels")
    parser.add_argument("--out", type=Path, help="write the measured results here (JSON)")
    parser.add_argument("--write", help="rewrite the gpu section of this Markdown file")
    parser.add_argument("--render", type=Path,
                        help="rewrite the section from this results file (no device needed)")
    args = parser.parse_args()
    if args.render:
        render(json.loads(args.render.read_text()), args.write or "BENCHMARKS.md")
        return 0
    if os.environ.get("CUPY_TF32"):
        parser.error("CUPY_TF32 is set: cuBLAS would use tensor cores, partita does not")
    try:
        import cupy as cp

        from partita.targets.gpu.cuda import tuning_device

        tuning_device()
    except ImportError as exc:
        print(f"gpu benchmark skipped: CuPy, through which cuBLAS is called, is not installed "
              f"(pip install cupy-cuda13x): {exc}")
        return 0
    except TargetUnavailable as exc:
        print(f"gpu benchmark skipped: {exc}")
        return 0
    # A tune whose build or launch hangs shows where, on stderr.
    faulthandler.dump_traceback_later(60, repeat=True)
    info = device_info()
    print(f"device: {info}", flush=True)
    cases = [c for c in CASES if not args.only or any(s in c.label for s in args.only.split(","))]
    rows: list[dict[str, Any]] = []
    from results import git_commit

    data = {"budget": args.budget, "device": info, "rows": rows,
            "date": time.strftime("%Y-%m-%d"), "commit": git_commit()}
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            print(f"tuning {case.label} for {args.budget * case.share:.0f} s ...", flush=True)
            try:
                row = run_case(cp, case, args.budget, Path(tmp) / "records.sqlite")
            except Exception as exc:  # the row says what failed; the other cases still run
                traceback.print_exc()
                row = {"label": case.label, "error": f"{type(exc).__name__}: {exc}"[:300]}
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "decisions"}, default=str),
                  flush=True)
            if args.out:
                args.out.write_text(json.dumps(data, indent=1, default=str) + "\n")
    print(table(rows))
    if args.write:
        render(json.loads(json.dumps(data, default=str)), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
