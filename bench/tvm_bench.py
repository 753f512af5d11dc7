"""partita against TVM MetaSchedule at the same wall-clock budget: the tuner a user would pick
instead, on sgemm 1024^3 and the ResNet-50 3x3 layer (conv2d NHWC/KRSC/NPQK, 58x58x64 image,
K=64, stride 1, no padding).

Run with ``python bench/tvm_bench.py --budget 300 --write BENCHMARKS.md`` (the ``bench``
extra installs TVM). Each case is tuned by partita for ``--budget`` seconds (as
families_bench.py tunes: seed 0, records starting empty), then by MetaSchedule for the same
wall-clock: MetaSchedule takes a trial count, so it tunes in rounds that continue one work
directory, database and cost model, each round sized to the time left at the rate measured so
far, until the budget has passed; the best schedule in the database is then built. Both are
checked against numpy on the same inputs, then timed alternating over :data:`ROUNDS` rounds
(partita in the tuner's worker, TVM's built module in this process, compiled and warmed up
outside the timed region); each figure is the median over the rounds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import statistics
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import partita
from families_bench import median_time
from host import machine_description
from partita.codegen.program import Program, reduction_length
from partita.kernels.registry import get_spec, library_reference
from partita.runtime.buffers import compare
from partita.runtime.data import tolerance
from partita.runtime.evaluate import Evaluator
from partita.search.stop import WallTime
from results import RESULTS_DIR, Record, provenance, record, target, write_results
from sections import replace_section
from summary import update as update_summary

ROUNDS = 5
TRIALS_PER_ROUND = 64
"""MetaSchedule's default trials per iteration: one round is one batch of builds."""
MIN_ROUND = 8
"""A round of fewer trials than this is not started (what is left of the budget is unused)."""
CHECK_BUDGET = 5.0
"""partita's budget with ``--check`` (seconds)."""


@dataclass
class Case:
    label: str
    kernel: str
    params: dict[str, Any]


CASES = [
    Case("sgemm 1024^3", "matmul", {"m": 1024, "n": 1024, "k": 1024}),
    Case("conv2d ResNet-50 3x3 (N=1, 58x58x64, K=64)", "conv2d",
         {"n": 1, "h": 58, "w": 58, "c": 64, "k": 64, "r": 3, "s": 3}),
]


def load_tvm() -> Any:
    """TVM with MetaSchedule and XGBoost (its cost model), or exit with one line."""
    try:
        import tvm  # the bench extra: a heavy, optional dependency
        import tvm.s_tir.meta_schedule
        import xgboost  # noqa: F401
    except ImportError as e:
        sys.exit(f"tvm_bench.py needs TVM MetaSchedule ({e.name} is missing): pip install "
                 "'apache-tvm==0.27.0.post1' 'apache-tvm-ffi==0.1.14.post0' xgboost-cpu "
                 "psutil cloudpickle (the bench extra)")
    return tvm


def te_module(tvm: Any, case: Case) -> Any:
    """The case in TVM's tensor expression language, same layouts and dtype: an IRModule."""
    from tvm import te
    p = case.params
    if case.kernel == "matmul":
        a = te.placeholder((p["m"], p["k"]), "float32", name="A")
        b = te.placeholder((p["k"], p["n"]), "float32", name="B")
        k = te.reduce_axis((0, p["k"]), "k")
        out = te.compute((p["m"], p["n"]), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k),
                         name="C")
    else:
        a = te.placeholder((p["n"], p["h"], p["w"], p["c"]), "float32", name="I")
        b = te.placeholder((p["k"], p["r"], p["s"], p["c"]), "float32", name="F")
        r, s, c = (te.reduce_axis((0, p[x]), x) for x in ("r", "s", "c"))
        shape = (p["n"], p["h"] - p["r"] + 1, p["w"] - p["s"] + 1, p["k"])
        out = te.compute(shape, lambda n, y, x, f: te.sum(
            a[n, y + r, x + s, c] * b[f, r, s, c], axis=[r, s, c]), name="O")
    return tvm.IRModule({"main": te.create_prim_func([a, b, out])})


def host_target_spec(tvm: Any) -> dict[str, Any]:
    """LLVM for this host's CPU as LLVM names it (znver4 here, AVX-512 included), on the cores
    this process may use (TVM 0.27 takes a target as a dict, no longer as ``llvm -mcpu=``)."""
    return {"kind": "llvm", "mcpu": tvm.target.codegen.llvm_get_system_cpu(),
            "num-cores": len(os.sched_getaffinity(0))}


def host_target(tvm: Any) -> Any:
    return tvm.target.Target(host_target_spec(tvm))


def import_intrinsics() -> None:
    """A builder worker's initializer: MetaSchedule's default build imports TVM's tensor
    intrinsics at a worker's first build (24 s on this host), which the 30 s build timeout
    counts; imported here, outside the timeout, every build of a batch no longer times out."""
    import tvm.s_tir.tensor_intrin  # noqa: F401


@contextlib.contextmanager
def quiet_logs() -> Iterator[None]:
    """On leaving, close MetaSchedule's log handlers: each tune binds one to the console
    stream of the moment (here a file of the work directory, closed and removed after it)
    and others to files of the work directory."""
    try:
        yield
    finally:
        for name in list(logging.root.manager.loggerDict):
            if name.startswith("tvm.s_tir.meta_schedule"):
                logger = logging.getLogger(name)
                for handler in list(logger.handlers):
                    logger.removeHandler(handler)
                    handler.close()


def tune_tvm(tvm: Any, mod: Any, budget: float, work_dir: str, seed: int) -> dict[str, Any]:
    """MetaSchedule for ``budget`` seconds of wall-clock, in rounds continuing one database and
    cost model; the best schedule's IRModule (None without one), trials and seconds spent."""
    from tvm.s_tir import meta_schedule as ms
    tgt, cores = host_target(tvm), len(os.sched_getaffinity(0))
    start, trials, rounds = time.perf_counter(), 0, 0
    # the first round has a trial per 20 s of budget (15 for 300 s: a round of 8 trials took
    # 104 to 268 s on this shared 2-core host), the next ones the rate measured so far
    size = min(TRIALS_PER_ROUND, max(MIN_ROUND, int(budget // 20)))
    # MetaSchedule logs every trial to the console: sent to a file of the work directory
    with open(Path(work_dir) / "console.log", "a") as log, contextlib.redirect_stdout(log), \
            quiet_logs():
        database = ms.database.JSONDatabase(work_dir=work_dir)
        cost_model = ms.cost_model.XGBModel(num_tuning_cores=cores, tree_method="auto")
        builder = ms.builder.LocalBuilder(max_workers=cores, initializer=import_intrinsics)
        runner = ms.runner.Runner.create("local")
        while size >= MIN_ROUND:
            ms.tune_tir(mod, tgt, work_dir, max_trials_global=size, num_trials_per_iter=size,
                        builder=builder, runner=runner, database=database,
                        cost_model=cost_model, num_tuning_cores=cores, seed=seed + rounds)
            trials, rounds = trials + size, rounds + 1
            elapsed = time.perf_counter() - start
            size = min(TRIALS_PER_ROUND, int((budget - elapsed) * trials / elapsed))
    wall = time.perf_counter() - start
    measured = [r for r in database.get_all_tuning_records()
                if r.run_secs and all(float(t) < 1e9 for t in r.run_secs)]
    sch = ms.tir_integration.compile_tir(database, mod, tgt)
    return {"mod": None if sch is None else sch.mod, "trials": trials,
            "measured": len(measured), "rounds": rounds, "wall": wall}


def tvm_call(tvm: Any, mod: Any, inputs: list[np.ndarray], out_shape: tuple[int, ...]
             ) -> tuple[Any, Any]:
    """The built module's call on ``inputs`` (compiled here, outside any timed region) and
    its output tensor."""
    lib = tvm.compile(mod, target=host_target(tvm))
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(a, dev) for a in inputs]
    out = tvm.runtime.empty(out_shape, "float32", dev)
    fn = lib["main"]
    return (lambda: fn(*args, out)), out


def verify(case: Case, name: str, got: np.ndarray, inputs: list[np.ndarray]) -> None:
    """Raise unless ``got`` is the numpy reference's result within partita's own tolerance
    for float32 (the bound every tuned candidate is checked with)."""
    kernel = partita.kernel(case.kernel, **case.params)
    ref = library_reference(kernel)
    assert ref is not None
    expected = next(iter(ref(*(a.astype(np.float64) for a in inputs)).values()))
    magnitude = next(iter(ref(*(np.abs(a.astype(np.float64)) for a in inputs)).values()))
    tol = tolerance(expected, magnitude, float(np.finfo(np.float32).eps) / 2,
                    reduction_length(kernel))
    c = compare(np.asarray(got), expected, tol)
    if c.bad:
        raise RuntimeError(f"{case.label}: {name} is wrong in {c.bad} elements (worst at "
                           f"{c.where}: {c.got} for {c.expected}, tolerance {c.tol:.3g})")


def case_inputs(tuned: partita.Tuned, seed: int) -> list[np.ndarray]:
    """Uniform values in [-1, 1] for the kernel's inputs, in its signature's order."""
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, p.shape).astype(np.float32) for p in tuned.inputs]


def run(tvm: Any, case: Case, budget: float, db: Path, seed: int, check: bool
        ) -> dict[str, Any]:
    """Tune the case with both tuners (or, with ``check``, partita briefly and TVM not at
    all: its default schedule), verify both, then time them side by side."""
    k = partita.kernel(case.kernel, **case.params)
    t0 = time.perf_counter()
    tuned = partita.tune(k, stop=WallTime(CHECK_BUDGET if check else budget), db=db, seed=seed)
    partita_wall = time.perf_counter() - t0
    mod = te_module(tvm, case)
    if check:
        tvm_res = {"mod": mod, "trials": 0, "measured": 0, "rounds": 0, "wall": 0.0}
    else:
        with tempfile.TemporaryDirectory() as work_dir:
            tvm_res = tune_tvm(tvm, mod, budget, work_dir, seed)
    if tvm_res["mod"] is None:
        raise RuntimeError(f"{case.label}: MetaSchedule measured no valid schedule")
    inputs = case_inputs(tuned, seed)
    out_shape = tuple(next(p.shape for p in tuned.outputs))
    call, out = tvm_call(tvm, tvm_res["mod"], inputs, out_shape)
    call()
    verify(case, "TVM", out.numpy(), inputs)
    verify(case, "partita", tuned(*inputs), inputs)
    times = {"partita": math.nan, "tvm": math.nan} if check else retime(tuned, call, seed)
    flops = get_spec(case.kernel).flops(**get_spec(case.kernel).resolve(case.params))
    return {"case": case, **times, "flops": flops, "partita_wall": partita_wall,
            "evals": len(tuned.result.evaluations) if tuned.result else 0,
            "tvm_trials": tvm_res["trials"], "tvm_measured": tvm_res["measured"],
            "tvm_rounds": tvm_res["rounds"], "tvm_wall": tvm_res["wall"]}


def retime(tuned: partita.Tuned, tvm_run: Any, seed: int) -> dict[str, float]:
    """partita (the worker's median) and TVM (in this process) in :data:`ROUNDS` alternating
    rounds; medians."""
    prog = Program(tuned.kernel, tuned.entry, tuned.source, tuned.params)
    rounds: dict[str, list[float]] = {"partita": [], "tvm": []}
    with Evaluator(seed=seed) as ev:
        for _ in range(ROUNDS):
            rounds["tvm"].append(median_time(tvm_run))
            m = ev.evaluate([prog])[0]
            if not m.ok or m.median_s is None:
                raise RuntimeError(f"timing the best again failed: {m.status} {m.reason}")
            rounds["partita"].append(m.median_s)
    return {k: statistics.median(v) for k, v in rounds.items()}


def table(rows: list[dict[str, Any]], peak: float) -> str:
    lines = ["| case | partita | TVM MetaSchedule | partita / TVM (target) | GFLOP/s (% of "
             "peak) partita, TVM | partita evaluations, wall-clock | TVM trials (measured), "
             "rounds, wall-clock |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        gp, gt = (r["flops"] / r[x] / 1e9 for x in ("partita", "tvm"))
        ratio = r["partita"] / r["tvm"]
        met = "met" if ratio <= 1.0 else "not met"
        lines.append(
            f"| {r['case'].label} | {r['partita'] * 1e3:.4g} ms | {r['tvm'] * 1e3:.4g} ms | "
            f"{ratio:.2f} (<= 1.0) {met} | {gp:.3g} ({100 * gp / peak:.0f}%), {gt:.3g} "
            f"({100 * gt / peak:.0f}%) | {r['evals']}, {r['partita_wall']:.0f} s | "
            f"{r['tvm_trials']} ({r['tvm_measured']}), {r['tvm_rounds']}, "
            f"{r['tvm_wall']:.0f} s |")
    return "\n".join(lines) + "\n"


def to_record(r: dict[str, Any], command: str, machine: dict[str, Any], target_str: str
              ) -> Record:
    details = {"gflops": r["flops"] / r["partita"] / 1e9,
               "tvm_gflops": r["flops"] / r["tvm"] / 1e9, "evaluations": r["evals"],
               "partita_wall_s": r["partita_wall"], "tvm_trials": r["tvm_trials"],
               "tvm_measured": r["tvm_measured"], "tvm_rounds": r["tvm_rounds"],
               "tvm_wall_s": r["tvm_wall"], "tvm_target": target_str}
    return record(r["case"].label, quantity="time", unit="s", partita=r["partita"],
                  reference_name="TVM MetaSchedule", reference=r["tvm"],
                  tgt=target("<=", 1.0), command=command, machine_desc=machine,
                  details=details)


COMMAND = "python bench/tvm_bench.py --budget {budget:g} --write BENCHMARKS.md"

REPORT = """## Against TVM MetaSchedule at equal budget

{provenance}

{table}
{notes}
"""

NOTES = """Each case is tuned by partita for {budget:g} s (`partita.tune` with a wall-time
stop, MCTS, seed {seed}, records starting empty), then by TVM's MetaSchedule (apache-tvm 0.27,
the evolutionary search with its XGBoost cost model, local builder and runner) for the same
wall-clock, on the same computation written in TVM's tensor expression language with the same
layouts and dtype (row-major A m x k and B k x n; NHWC image, KRSC filter, NPQK output), for
the target `{target}` (this host's CPU as LLVM names it). MetaSchedule takes a trial count,
not a time: it tunes in rounds of at most {per_round} trials (one batch of builds) that
continue one work directory, database and cost model, the first of a trial per 20 s of
budget (at least {min_round}), each next one sized to the time left at the rate measured so
far, until the budget has passed (a round of fewer than {min_round} trials is not started, so its
wall-clock may end short of the budget or run past it: both tuners' wall-clocks are in the
table); the best schedule in its database is then built. Its builder's workers import TVM's
tensor intrinsics before their first build (an initializer): MetaSchedule's default build
does it inside the 30 s build timeout, where it took up to 24 s on this host (2 cores,
shared) and every build of a batch timed out. Both results are checked against numpy on the
same inputs (partita's float32 tolerance), then timed alternating over {rounds} rounds,
partita in the tuner's worker and TVM's module in this process (compiled and warmed up
outside the timed region); each figure is the median over the rounds. Trials count every
candidate MetaSchedule sent to be built, measured those that built and ran.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--budget", type=float, default=300.0, help="seconds per tuner and case")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", help="comma-separated substrings of case labels")
    parser.add_argument("--check", action="store_true",
                        help=f"only verify: partita tuned {CHECK_BUDGET:g} s, TVM untuned")
    parser.add_argument("--write", help="rewrite the tvm section of this Markdown file")
    parser.add_argument("--results", type=Path, default=RESULTS_DIR,
                        help="with --write, the folder of results (default: bench/results)")
    args = parser.parse_args()
    tvm = load_tvm()
    cases = [c for c in CASES if not args.only
             or any(s in c.label for s in args.only.split(","))]
    machine = machine_description()
    peak = machine["peak_gflops_fp32"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            budget = f"partita {CHECK_BUDGET:g} s, TVM untuned" if args.check \
                else f"{args.budget:g} s with each tuner"
            print(f"tuning {case.label} ({budget}) ...", flush=True)
            rows.append(run(tvm, case, args.budget, Path(tmp) / "records.sqlite", args.seed,
                            args.check))
            print("verified against numpy" if args.check else table(rows[-1:], peak),
                  flush=True)
    if args.check:
        return
    text = table(rows, peak)
    print(text)
    if args.write:
        command = COMMAND.format(budget=args.budget)
        target_str = json.dumps(host_target_spec(tvm), separators=(",", ":"))
        records = [to_record(r, command, machine, target_str) for r in rows]
        replace_section(args.write, "tvm", REPORT.format(
            provenance=provenance(command, records[0]), table=text, notes=textwrap.fill(
                NOTES.format(budget=args.budget, seed=args.seed, target=target_str,
                             per_round=TRIALS_PER_ROUND, min_round=MIN_ROUND, rounds=ROUNDS),
                width=96, break_long_words=False, break_on_hyphens=False)))
        write_results("tvm", "Against TVM MetaSchedule", records, args.results,
                      keep_other_cases=bool(args.only))
        update_summary(args.write, args.results)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
