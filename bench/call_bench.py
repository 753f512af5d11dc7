"""The time a user gets: a tuned kernel called from Python, beside the time the tuner recorded.

Run with ``make bench`` (``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python
bench/call_bench.py --budget 60 --write BENCHMARKS.md``). Each case is tuned (fresh records),
then, in :data:`ROUNDS` rounds, timed four ways side by side: in the tuner's worker (the
harness that recorded it: warm-up, then calls back to back until the median is stable), the
bare C entry called from this process in a loop (cffi, pointers converted once), the
``Tuned`` object called in a loop (``out=`` given: argument checks and pointers every call),
and numpy's product. Each figure is the median of per-call times over the rounds.

What the ``Tuned`` call costs beside the bare one is also taken apart: the same call with an
empty C function in the kernel's place, timed in a loop (warm caches) and right after each
call of the kernel (caches the kernel has just streamed its arrays through), which is where it
runs when the kernel is called in a loop. A last row sets the figures against what is aimed at
(:data:`AIM_COST_S` over the bare call, :data:`AIM_RATIO` of the recorded time).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cffi
import numpy as np

import partita
from host import machine_description
from partita.codegen.program import Program, prototype
from partita.config import c_compiler
from partita.runtime.call import KernelCall
from partita.runtime.evaluate import Evaluator
from partita.runtime.native_call import native_call
from partita.tuning import Tuned
from results import RESULTS_DIR, Record, provenance, record, write_results
from sections import replace_section
from summary import update as update_summary

ROUNDS = 5
AIM_COST_S = 3e-6
"""What a ``Tuned`` call may cost over the bare call of its C entry."""
AIM_RATIO = 1.10
"""How far above the time the tuner recorded a ``Tuned`` call may run."""


@dataclass
class Case:
    label: str
    params: dict


CASES = [
    Case("sgemm 256x256x32", {"m": 256, "n": 256, "k": 32}),
    Case("sgemm 16x1000x2048", {"m": 16, "n": 1000, "k": 2048}),
    Case("sgemm 1x1000x2048", {"m": 1, "n": 1000, "k": 2048}),
    Case("sgemm 1024^3", {"m": 1024, "n": 1024, "k": 1024}),
]


def per_call(fn: Any, min_s: float = 0.3, min_calls: int = 20) -> float:
    """Median per-call time of ``fn()`` over batches of calls (warm-up first)."""
    for _ in range(3):
        fn()
    t0 = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t0, 1e-7)
    batch = max(1, int(0.01 / one))
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_calls or time.perf_counter() - start < min_s:
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        times.append((time.perf_counter() - t0) / batch)
    return statistics.median(times)


def paired(bare: Any, through: Any, min_s: float = 0.6) -> tuple[float, float, float]:
    """Median per-call times of ``bare()`` and ``through()`` called in alternating batches,
    and the median of their differences batch by batch: a core that the host lends away for
    a while slows both sides of a pair alike."""
    for _ in range(3):
        bare(), through()
    t0 = time.perf_counter()
    bare()
    batch = max(1, int(0.005 / max(time.perf_counter() - t0, 1e-7)))
    a: list[float] = []
    b: list[float] = []
    start = time.perf_counter()
    while len(a) < 20 or time.perf_counter() - start < min_s:
        t0 = time.perf_counter()
        for _ in range(batch):
            bare()
        t1 = time.perf_counter()
        for _ in range(batch):
            through()
        t2 = time.perf_counter()
        a.append((t1 - t0) / batch)
        b.append((t2 - t1) / batch)
    return (statistics.median(a), statistics.median(b),
            statistics.median(y - x for x, y in zip(a, b, strict=True)))


def idle_checks(call: KernelCall) -> Any:
    """The checked call of ``call`` with a C entry that does nothing: the checks in C
    (:mod:`partita.runtime.native_call`) bound to an empty function of the same prototype
    where they serve the call, else the Python path with its C call replaced."""
    params = tuple(a.param for a in call.args)
    if call.native is None:
        idle = copy.copy(call)
        idle.fn = lambda *args: None
        return idle._fast_path() or idle.general
    folder = Path(tempfile.mkdtemp(prefix="partita-idle-"))
    (folder / "idle.c").write_text(prototype("partita_idle", params) + " {}\n")
    subprocess.run([c_compiler(), "-O2", "-shared", "-fPIC", "-o", str(folder / "idle.so"),
                    str(folder / "idle.c")], check=True)
    ffi = cffi.FFI()
    ffi.cdef(prototype("partita_idle", params).replace("restrict", "") + ";")
    lib = ffi.dlopen(str(folder / "idle.so"))
    _IDLE.append(lib)  # loaded for the life of the process
    return native_call(params, int(ffi.cast("uintptr_t", lib.partita_idle)), call.general)


_IDLE: list[Any] = []


def python_work(call: Any, A: np.ndarray, B: np.ndarray, C: np.ndarray, bare: Any,
                min_s: float = 0.3) -> tuple[float, float]:
    """The work of a checked call besides its kernel (the call with an empty C function in
    the kernel's place): its median time called in a loop, and right after each bare call of the
    kernel."""
    checks = idle_checks(call)
    warm = per_call(lambda: checks((A, B), C), min_s=min_s)
    after: list[int] = []
    start = time.perf_counter()
    while len(after) < 20 or time.perf_counter() - start < min_s:
        bare()
        t0 = time.perf_counter_ns()
        checks((A, B), C)
        after.append(time.perf_counter_ns() - t0)
    return warm, statistics.median(after) * 1e-9


def arrays(params: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    A = rng.uniform(-1, 1, (params["m"], params["k"])).astype(np.float32)
    B = rng.uniform(-1, 1, (params["k"], params["n"])).astype(np.float32)
    return A, B, np.empty((params["m"], params["n"]), np.float32)


def measure(tuned: Tuned, params: dict, ev: Evaluator) -> dict[str, float]:
    A, B, C = arrays(params)
    call = tuned._load()
    tuned(A, B, out=C)
    ptrs = [call._pointer(spec, a) for spec, a in zip(call.args, (A, B, C), strict=True)]
    fn = call.fn
    program = Program(tuned.kernel, tuned.entry, tuned.source, tuned.params)
    (worker,) = ev.evaluate([program])
    bare, through, cost = paired(lambda: fn(*ptrs), lambda: tuned(A, B, out=C))
    warm, after = python_work(call, A, B, C, lambda: fn(*ptrs))
    # the same inputs in arrays placed as the tuner's timings place them (partita.empty)
    Aa, Ba, Ca = (partita.aligned_copy(a) for a in (A, B, C))
    aligned = per_call(lambda: tuned(Aa, Ba, out=Ca))
    blas = per_call(lambda: np.matmul(A, B, out=C))
    time.sleep(0.3)  # OpenBLAS's threads spin a while after numpy's last call
    return {"worker": worker.median_s or float("nan"), "bare": bare, "tuned": through,
            "cost": cost, "checks_warm": warm, "checks_after": after, "aligned": aligned,
            "numpy": blas}


COMMAND = ("env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/call_bench.py "
           "--budget {budget} --write BENCHMARKS.md")

REPORT = """## Calling a tuned kernel from Python

{provenance}

Each case is tuned for {budget} s, then timed
in {rounds} rounds, four ways side by side: in the tuner's worker (the harness that recorded
the time), the bare C entry called from Python in a loop, the `Tuned` object called in a loop
(`fast(A, B, out=C)`: argument checks and pointers at every call), and numpy. Each figure is
the median over the rounds of per-call medians; the bare and `Tuned` calls run in alternating
batches, and their difference is the median of the differences batch by batch. The work of
the `Tuned` call besides its kernel (the Python call, and the argument checks, done in C
where Python's headers are installed) is timed with an empty C function in the kernel's
place, called in a loop with warm caches, and right after each bare call of the kernel, as it
runs when the kernel is called in a loop: from caches the kernel has just streamed its arrays
through. Where the kernel takes milliseconds (1024^3), the difference of the paired calls
varies from pair to pair by far more than the microseconds it measures; the work after the
kernel is the finer figure there. The arrays are numpy's (`astype` copies, which numpy places 16
bytes past a cache line); the `Tuned` call is also timed on copies of them in arrays from
`partita.empty`, placed as the tuner's worker places its buffers (64-byte aligned, 2 MiB from
2 MiB up).

| case | recorded by the tuner | worker, again | bare call | `Tuned` call \
| `Tuned` - bare | its own work: warm, after the kernel | `Tuned` / recorded \
| on `partita.empty` arrays: `Tuned` / recorded | numpy |
|---|---|---|---|---|---|---|---|---|---|
{rows}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--budget", type=float, default=60.0)
    ap.add_argument("--write", help="rewrite the 'call' section of this markdown file")
    ap.add_argument("--results", type=Path, default=RESULTS_DIR,
                    help="with --write, the folder of results (default: bench/results)")
    args = ap.parse_args()
    command = COMMAND.format(budget=f"{args.budget:g}")
    machine = machine_description()
    rows, records = [], []
    costs: list[float] = []
    ratios: list[float] = []
    placed_ratios: list[float] = []
    with tempfile.TemporaryDirectory() as tmp, Evaluator(seed=0) as ev:
        for case in CASES:
            k = partita.kernel("matmul", **case.params)
            tuned = partita.tune(k, budget=args.budget, db=Path(tmp) / "records.sqlite")
            rounds = [measure(tuned, case.params, ev) for _ in range(ROUNDS)]
            med = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
            print(case.label, f"recorded {tuned.time:.4g}", {k: f"{v:.4g}" for k, v in med.items()},
                  flush=True)
            ratio = med["tuned"] / (tuned.time or float("nan"))
            placed = med["aligned"] / (tuned.time or float("nan"))
            costs.append(med["cost"])
            ratios.append(ratio)
            placed_ratios.append(placed)
            rows.append(f"| {case.label} | {_us(tuned.time)} | {_us(med['worker'])} | "
                        f"{_us(med['bare'])} | {_us(med['tuned'])} | "
                        f"{med['cost'] * 1e6:.2f} us | {med['checks_warm'] * 1e6:.2f} us, "
                        f"{med['checks_after'] * 1e6:.2f} us | {ratio:.2f} | "
                        f"{placed:.2f} ({_us(med['aligned'])}) | {_us(med['numpy'])} |")
            records.append(call_record(case.label, tuned.time, med, command, machine))
    rows.append(aim_row(costs, ratios, placed_ratios))
    first = records[0] if records else record("", quantity="time", unit="s", partita=None,
                                              command=command, machine_desc=machine)
    text = REPORT.format(budget=f"{args.budget:g}", provenance=provenance(command, first),
                         rounds=ROUNDS, rows="\n".join(rows))
    print(text)
    if args.write:
        replace_section(args.write, "call", text)
        write_results("call", "Calling from Python", records, args.results)
        update_summary(args.write, args.results)


def aim_row(costs: list[float], ratios: list[float], placed: list[float]) -> str:
    """The table's last row: in how many cases the `Tuned` call is within what is aimed at
    (over the bare call, and against the recorded time), and the worst case."""
    def within(values: list[float], aim: float) -> str:
        return f"{sum(v <= aim for v in values)} of {len(values)} within"

    worst_cost = f"{max(costs) * 1e6:.2f} us" if costs else "n/a"
    worst_ratio = f"{max(ratios):.2f}" if ratios else "n/a"
    worst_placed = f"{max(placed):.2f}" if placed else "n/a"
    return (f"| aimed at | | | | | at most {AIM_COST_S * 1e6:g} us: {within(costs, AIM_COST_S)} "
            f"(worst {worst_cost}) | | at most {AIM_RATIO:.2f}: {within(ratios, AIM_RATIO)} "
            f"(worst {worst_ratio}) | at most {AIM_RATIO:.2f}: {within(placed, AIM_RATIO)} "
            f"(worst {worst_placed}) | |")


def call_record(label: str, recorded: float | None, med: dict[str, float], command: str,
                machine: dict[str, Any]) -> Record:
    """The case's result: the `Tuned` call beside numpy, the other timings as details."""
    details: dict[str, Any] = {f"{key}_s": value for key, value in med.items()}
    details["recorded_s"] = recorded
    return record(f"{label}, `Tuned` call", quantity="time", unit="s", partita=med["tuned"],
                  reference_name="numpy/OpenBLAS", reference=med["numpy"], command=command,
                  machine_desc=machine, details=details)


def _us(t: float | None) -> str:
    return "n/a" if t is None else f"{t * 1e6:.4g} us" if t < 1e-3 else f"{t * 1e3:.4g} ms"


if __name__ == "__main__":
    main()
