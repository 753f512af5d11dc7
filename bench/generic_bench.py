"""Size-generic kernels against per-size tunes and the usual libraries.

A size-generic matmul against per-size tunes and numpy: the matmul is tuned once over
dynamic sizes (``partita.tune_generic``) on at most 12 training sizes, then timed at 30 other
sizes spanning 32 to 4096 per dimension (square, odd, tall, skinny), each set beside numpy
and beside a tune of that size alone (``partita.tune`` for ``--alone-budget`` seconds, on
records of its own, so it starts from nothing as a user's first tune of a new shape does).
The generic kernel's whole tuning time (static tunes, versions, thresholds) is set beside the
sum of the 30 separate tunes.

Run with ``make bench`` (``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python
bench/generic_bench.py --budget 600 --alone-budget 120 --write BENCHMARKS.md``), which takes
over an hour; ``--quick`` runs a few sizes with tiny budgets to check the script. All three
are timed in this process, side by side: partita's two entries called through cffi (the
generic one is the dispatcher, sizes as arguments), numpy's ``matmul`` into a preallocated
output, alternating over :data:`ROUNDS` rounds; each figure is the median over the rounds of
the median per call (warm-up first).

A size-generic conv2d over CNN layer shapes follows, against PyTorch's CPU conv2d and per-shape
tunes (``generic_conv.py``); ``--kernel matmul`` or ``--kernel conv2d`` runs one section.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import generic_conv as conv
import partita
from host import machine_description
from partita.codegen.program import Program, signature
from partita.ir.types import DType
from partita.runtime.compile import Compiler
from partita.runtime.data import note_blas_call
from partita.tuning.dispatch import declaration, load_function, per_call
from results import RESULTS_DIR, Record, provenance, record, target, write_results
from sections import replace_section
from summary import update as update_summary

Size = tuple[int, int, int]

TRAIN: list[Size] = [
    (32, 32, 32), (128, 128, 128), (512, 512, 512), (1536, 1536, 1536),  # square
    (97, 131, 203), (777, 555, 333),  # odd
    (2048, 64, 64), (4096, 256, 128),  # tall
    (64, 2048, 64), (32, 32, 2048), (256, 256, 2048),  # skinny, long reductions
    (1024, 1024, 256),
]
SIZES: list[Size] = [
    (48, 48, 48), (64, 64, 64), (100, 100, 100), (200, 200, 200), (256, 256, 256),
    (384, 384, 384), (640, 640, 640), (1000, 1000, 1000), (1024, 1024, 1024),
    (2048, 2048, 2048),  # square
    (33, 65, 129), (301, 77, 513), (999, 1001, 97), (1234, 567, 89), (71, 4096, 37),  # odd
    (4096, 32, 32), (4096, 128, 64), (3000, 512, 256), (2048, 1024, 64),
    (4096, 64, 512),  # tall
    (32, 4096, 32), (64, 64, 4096), (128, 2048, 128), (32, 1024, 4096),
    (512, 32, 512),  # skinny
    (1024, 256, 1024), (256, 4096, 256), (4096, 4096, 32), (512, 2048, 512),
    (1536, 1536, 128),
]
QUICK_TRAIN: list[Size] = [(32, 32, 32), (96, 64, 80), (192, 160, 128)]
QUICK_SIZES: list[Size] = [(48, 48, 48), (130, 33, 70), (200, 200, 96)]

ROUNDS = 5
TARGETS = {"alone": 1.25, "numpy": 1.3, "tuning": 0.25}
"""The generic kernel's time over the size-alone tune's and over numpy's, at most; its tuning
time over the sum of the separate tunes', at most."""
COMMAND = ("python bench/generic_bench.py --budget {budget:g} --alone-budget {alone:g} "
           "--write BENCHMARKS.md")
CONV_COMMAND = ("python bench/generic_bench.py --kernel conv2d --conv-budget {budget:g} "
                "--alone-budget {alone:g} --write BENCHMARKS.md")


def operands(size: Size, seed: int) -> dict[str, np.ndarray]:
    m, n, k = size
    rng = np.random.default_rng(seed)
    return {"A": rng.standard_normal((m, k), dtype=np.float32),
            "B": rng.standard_normal((k, n), dtype=np.float32),
            "C": np.zeros((m, n), np.float32)}


def c_call(library: Path, entry: str, params: Any, size: Size,
           arrays: dict[str, np.ndarray]) -> tuple[Callable[..., Any], list[Any]]:
    """An entry loaded through cffi and its arguments (sizes as numbers, arrays in place)."""
    ffi, fn = load_function(library, entry, declaration(entry, params))
    sizes = dict(zip("mnk", size, strict=True))
    args: list[Any] = []
    for p in params:
        if p.kind == "size":
            args.append(sizes[p.name])
        else:
            args.append(ffi.cast(f"{DType.parse(p.dtype).c_type} *",
                                 arrays[p.name].ctypes.data))
    return fn, args


LIBRARIES = ("numpy", "torch")
"""The calls whose threads keep spinning a while after they return (OpenBLAS's for about
2^28 cycles): the call timed next waits for them to fall asleep (``per_call`` settles)."""


def side_by_side(calls: dict[str, tuple[Callable[..., Any], list[Any]]], rounds: int
                 ) -> dict[str, float]:
    """Each call's median time per call, in alternating rounds; the median over rounds."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, (fn, args) in calls.items():
            times[name].append(per_call(fn, args, min_s=0.1))
            if name in LIBRARIES:
                note_blas_call()
    return {name: statistics.median(ts) for name, ts in times.items()}


def tune_alone(size: Size, budget: float, seed: int, directory: Path
               ) -> tuple[partita.Tuned, float]:
    """A tune of ``size`` alone, on records of its own; its wall time."""
    m, n, k = size
    start = time.perf_counter()
    tuned = partita.tune(partita.kernel("matmul", m=m, n=n, k=k), budget=budget, seed=seed,
                         db=directory / f"alone-{m}x{n}x{k}.sqlite")
    return tuned, time.perf_counter() - start


def measure(size: Size, generic: partita.GenericTuned, alone: partita.Tuned, seed: int,
            rounds: int) -> dict[str, Any]:
    """The generic kernel, the size-alone tune and numpy at ``size``, side by side, with the
    generic kernel's result checked against numpy's."""
    arrays = {name: operands(size, seed) for name in ("generic", "alone", "numpy")}
    generic_call = c_call(generic.loaded_library(), generic.entry, signature(generic.kernel),
                          size, arrays["generic"])
    so = Compiler().build([Program(alone.kernel, alone.entry, alone.source, alone.params)])
    alone_call = c_call(so.path, alone.entry, alone.params, size, arrays["alone"])
    a, b, c = (arrays["numpy"][x] for x in "ABC")

    def numpy_call() -> None:
        np.matmul(a, b, out=c)

    times = side_by_side({"generic": generic_call, "alone": alone_call,
                          "numpy": (numpy_call, [])}, rounds)
    m, n, k = size
    expected = a.astype(np.float64) @ b.astype(np.float64)
    got = arrays["generic"]["C"]
    return {"size": size, "label": f"{m}x{n}x{k}", **times,
            "version": generic.version_for({"m": m, "n": n, "k": k}) + 1,
            "right": bool(np.allclose(got, expected, rtol=1e-4, atol=1e-5 * k)),
            "max_error": float(np.abs(got - expected).max())}


def run(train: list[Size], sizes: list[Size], budget: float, alone_budget: float,
        seed: int, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        print(f"tuning the generic matmul on {len(train)} sizes for {budget:g} s ...",
              flush=True)
        start = time.perf_counter()
        generic = partita.tune_generic("matmul", train, budget=budget, seed=seed,
                                       db=directory / "generic.sqlite")
        generic_s = time.perf_counter() - start
        print(generic.report(), flush=True)
        rows, alone_s = [], 0.0
        for size in sizes:
            alone, took = tune_alone(size, alone_budget, seed, directory)
            alone_s += took
            rows.append(measure(size, generic, alone, seed, rounds))
            print(table(rows[-1:]), flush=True)
    return {"rows": rows, "generic_s": generic_s, "alone_s": alone_s,
            "versions": len(generic.versions), "chain": generic.chain(),
            "train": train, "warnings": generic.warnings}


def _t(t: float) -> str:
    return f"{t * 1e6:.4g} us" if t < 1e-3 else f"{t * 1e3:.4g} ms"


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| m x n x k | generic (version) | tuned alone | numpy | generic ÷ alone | "
             "generic ÷ numpy | right |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['label']} | {_t(r['generic'])} (V{r['version']}) | "
                     f"{_t(r['alone'])} | {_t(r['numpy'])} | "
                     f"{r['generic'] / r['alone']:.3g} | {r['generic'] / r['numpy']:.3g} | "
                     f"{'yes' if r['right'] else '**no**'} |")
    return "\n".join(lines) + "\n"


def summary(result: dict[str, Any]) -> str:
    rows = result["rows"]
    worst_alone = max(r["generic"] / r["alone"] for r in rows)
    worst_numpy = max(r["generic"] / r["numpy"] for r in rows)
    share = result["generic_s"] / result["alone_s"]
    within = sum(r["generic"] / r["alone"] <= TARGETS["alone"]
                 and r["generic"] / r["numpy"] <= TARGETS["numpy"] for r in rows)
    return (f"Worst generic ÷ alone {worst_alone:.3g} (target ≤ {TARGETS['alone']:g}), worst "
            f"generic ÷ numpy {worst_numpy:.3g} (target ≤ {TARGETS['numpy']:g}); "
            f"{within} of {len(rows)} sizes within both. Tuning: {result['generic_s']:.0f} s "
            f"for the generic kernel ({result['versions']} versions: "
            f"`{result['chain']}`), {result['alone_s']:.0f} s for the {len(rows)} separate "
            f"tunes: {share:.3g} of it (target ≤ {TARGETS['tuning']:g}).")


def to_records(result: dict[str, Any], command: str, machine: dict[str, Any]) -> list[Record]:
    rows = result["rows"]
    details = {"sizes": [{k: r[k] for k in ("label", "generic", "alone", "numpy", "version",
                                            "right")} for r in rows],
               "train": result["train"], "chain": result["chain"]}
    out = []
    for ref, name in (("alone", "a tune of that size alone"), ("numpy", "numpy/OpenBLAS")):
        worst = max(rows, key=lambda r, ref=ref: r["generic"] / r[ref])
        out.append(record(f"size-generic matmul, worst of {len(rows)} sizes vs {ref} "
                          f"({worst['label']})", quantity="time", unit="s",
                          partita=worst["generic"], reference_name=name,
                          reference=worst[ref], tgt=target("<=", TARGETS[ref]),
                          command=command, machine_desc=machine, details=details))
    out.append(record(f"size-generic matmul, tuning time vs {len(rows)} separate tunes",
                      quantity="time", unit="s", partita=result["generic_s"],
                      reference_name="the separate tunes", reference=result["alone_s"],
                      tgt=target("<=", TARGETS["tuning"]), command=command,
                      machine_desc=machine))
    return out


REPORT = """## Size-generic matmul

{provenance}

{summary}

{table}
The generic kernel is trained on {train} sizes ({train_list}) with {budget:g} s in all, then
timed at sizes none of which it was trained on, each beside a tune of that size alone for
{alone:g} s (records of its own) and numpy. "Version" is the version the dispatcher ran.
Timed side by side in this process over {rounds} alternating rounds (median of the medians
per call; a call timed after numpy's waits for OpenBLAS's threads to stop spinning); "right"
checks the generic kernel's product against numpy's in double precision.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--budget", type=float, default=600.0,
                        help="seconds for the generic kernel's whole tune")
    parser.add_argument("--conv-budget", type=float, default=240.0,
                        help="seconds for the generic conv2d's whole tune (its 10 layer "
                             "shapes tuned alone take 10 times --alone-budget)")
    parser.add_argument("--alone-budget", type=float, default=120.0,
                        help="seconds for each size's tune alone")
    parser.add_argument("--quick", action="store_true",
                        help="a few sizes and tiny budgets: checks that the script works")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--write", help="rewrite the generic section of this file")
    parser.add_argument("--results", type=Path, default=RESULTS_DIR)
    parser.add_argument("--kernel", choices=("matmul", "conv2d", "both"), default="both",
                        help="which sections to run")
    args = parser.parse_args()
    rounds = 2 if args.quick else ROUNDS
    if args.quick:
        args.budget, args.alone_budget = min(args.budget, 9.0), min(args.alone_budget, 10.0)
        args.conv_budget = min(args.conv_budget, 9.0)
    if args.kernel != "conv2d":
        matmul_section(args, rounds)
    if args.kernel != "matmul":
        conv_section(args, rounds)


def conv_section(args: argparse.Namespace, rounds: int) -> None:
    """The size-generic conv2d over CNN layer shapes (see ``generic_conv.py``)."""
    train, layers = (conv.QUICK_TRAIN, conv.QUICK_LAYERS) if args.quick else \
        (conv.TRAIN, conv.LAYERS)
    with tempfile.TemporaryDirectory() as tmp:
        result = conv.run(train, layers, args.conv_budget, args.alone_budget, args.seed,
                          rounds, Path(tmp), side_by_side)
    text = conv.table(result["rows"])
    print(text + "\n" + conv.summary(result))
    if args.write:
        machine = machine_description()
        command = CONV_COMMAND.format(budget=args.conv_budget, alone=args.alone_budget)
        records = conv_records(result, command, machine)
        replace_section(args.write, "generic-conv2d", conv.REPORT.format(
            provenance=provenance(command, records[0], f", seed {args.seed}"),
            summary=textwrap.fill(conv.summary(result), width=96), table=text,
            train=len(train), train_list=", ".join("x".join(map(str, t)) for t in train),
            budget=args.conv_budget, alone=args.alone_budget, rounds=rounds))
        write_results("generic-conv2d", "Size-generic conv2d", records, args.results)
        update_summary(args.write, args.results)


def conv_records(result: dict[str, Any], command: str, machine: dict[str, Any]
                 ) -> list[Record]:
    rows = result["rows"]
    details = {"layers": [{k: r.get(k) for k in ("label", "generic", "alone", "torch",
                                                 "version", "right")} for r in rows],
               "train": result["train"], "chain": result["chain"]}
    out = []
    for ref, name in (("alone", "a tune of that shape alone"), ("torch", "PyTorch conv2d")):
        if not all(ref in r for r in rows):
            continue  # PyTorch not installed
        worst = max(rows, key=lambda r, ref=ref: r["generic"] / r[ref])
        out.append(record(f"size-generic conv2d, worst of {len(rows)} layer shapes vs {ref} "
                          f"({worst['label']})", quantity="time", unit="s",
                          partita=worst["generic"], reference_name=name,
                          reference=worst[ref], tgt=target("<=", conv.TARGETS[ref]),
                          command=command, machine_desc=machine, details=details))
    out.append(record(f"size-generic conv2d, tuning time vs {len(rows)} separate tunes",
                      quantity="time", unit="s", partita=result["generic_s"],
                      reference_name="the separate tunes", reference=result["alone_s"],
                      tgt=target("<=", conv.TARGETS["tuning"]), command=command,
                      machine_desc=machine))
    return out


def matmul_section(args: argparse.Namespace, rounds: int) -> None:
    """The size-generic matmul over 30 sizes."""
    train, sizes = (QUICK_TRAIN, QUICK_SIZES) if args.quick else (TRAIN, SIZES)
    result = run(train, sizes, args.budget, args.alone_budget, args.seed, rounds)
    text = table(result["rows"])
    print(text + "\n" + summary(result))
    if args.write:
        machine = machine_description()
        command = COMMAND.format(budget=args.budget, alone=args.alone_budget)
        records = to_records(result, command, machine)
        replace_section(args.write, "generic", REPORT.format(
            provenance=provenance(command, records[0], f", seed {args.seed}"),
            summary=textwrap.fill(summary(result), width=96), table=text, train=len(train),
            train_list=", ".join("x".join(map(str, s)) for s in train), budget=args.budget,
            alone=args.alone_budget, rounds=rounds))
        write_results("generic", "Size-generic matmul", records, args.results)
        update_summary(args.write, args.results)


if __name__ == "__main__":
    main()
