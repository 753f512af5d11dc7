"""Random GPU implementations the GPU tests check, stored as decision lists.

A random descent of the GPU space takes seconds for a matrix product (most descents end in
dead ends and are retried), and replaying a stored decision list about one second. The tests
therefore replay implementations that ``python tests/gpu/samples.py`` drew, with
``random_implementation(root, random.Random(seed))`` for seeds ``0 .. count - 1`` of each
configuration, and recorded with whether the printers accept them (``printed``) or refuse
them as unsound (``unsound``, see test_unsound.py). The tests replay every ``printed`` one and
a few ``unsound`` ones. After a change to the GPU space, draw them again; after a change to
the printers, ``python tests/gpu/samples.py --classify`` records their verdicts again.
"""

from __future__ import annotations

import json
import multiprocessing
import random
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SAMPLES = Path(__file__).with_name("samples.json")

CONFIGS: dict[str, tuple[str, dict[str, Any], int]] = {
    # name: (library kernel, parameters, number of implementations drawn)
    "axpy": ("axpy", {"n": 256}, 12),
    "axpy_fp64": ("axpy", {"n": 64, "dtype": "float64"}, 8),
    "matmul": ("matmul", {"m": 16, "n": 16, "k": 8}, 30),
    "matmul_fp64": ("matmul", {"m": 8, "n": 16, "k": 4, "dtype": "float64"}, 20),
    "matmul_transposed": ("matmul", {"m": 8, "n": 16, "k": 8, "transpose_a": 1,
                                     "transpose_b": 1}, 25),
    "matmul_transposed_a": ("matmul", {"m": 16, "n": 8, "k": 4, "transpose_a": 1}, 20),
    "matmul_strided": ("matmul", {"m": 8, "n": 8, "k": 8, "stride_a": 3}, 25),
    "batched_matmul": ("batched_matmul", {"b": 2, "m": 8, "n": 8, "k": 4}, 18),
    "batched_matmul_reuse": ("batched_matmul", {"b": 4, "m": 4, "n": 8, "k": 4,
                                                "reuse_b": 1}, 18),
}

UNSOUND_REPLAYED = 1
"""Implementations recorded as unsound that the tests replay per configuration, to check that
the printers still refuse them for the documented reason."""


def root(config: str) -> Any:
    """The root candidate of a configuration's GPU space."""
    from partita.api import kernel, space

    name, params, _ = CONFIGS[config]
    return space(kernel(name, **params), "gpu").root()


def classify(cand: Any) -> str:
    """``printed`` when both printers accept an implementation, else ``unsound``."""
    from partita.codegen.gpu import UnsoundCandidate, print_cuda, print_opencl

    try:
        print_cuda(cand)
        print_opencl(cand)
    except UnsoundCandidate:
        return "unsound"
    return "printed"


def _draw(job: tuple[str, list[int]]) -> list[tuple[str, dict[str, Any]]]:
    from partita.search.sampling import random_implementation

    config, seeds = job
    top = root(config)
    out = []
    for s in seeds:
        cand = random_implementation(top, random.Random(s))
        out.append((config, {"seed": s, "status": classify(cand),
                             "decisions": [d.to_json() for d in cand.decisions]}))
    return out


def _classify(job: tuple[str, list[dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    config, rows = job
    top = root(config)
    return [(config, {**row, "status": classify(_replay(top, row["decisions"]))})
            for row in rows]


def _replay(top: Any, decisions: list[Any]) -> Any:
    from partita.space.candidate import Decision

    cand = top
    for d in decisions:
        cand = cand.apply(Decision.from_json(d))
        if not cand:
            break
    return cand


def _collect(pool_fn: Any, jobs: list[Any], workers: int) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {c: [] for c in CONFIGS}
    with ProcessPoolExecutor(workers) as pool:
        for rows in pool.map(pool_fn, jobs):
            for config, row in rows:
                out[config].append(row)
    for rows in out.values():
        rows.sort(key=lambda r: r["seed"])
    return out


def draw_all(workers: int = 2) -> dict[str, list[dict[str, Any]]]:
    """Every configuration's implementations, drawn in ``workers`` processes."""
    jobs = [(c, list(range(i, n, workers))) for c, (_, _, n) in CONFIGS.items()
            for i in range(workers)]
    return _collect(_draw, jobs, workers)


def classify_all(workers: int = 2) -> dict[str, list[dict[str, Any]]]:
    """The stored implementations with the printers' current verdicts."""
    jobs = [(c, rows[i::workers]) for c, rows in load().items() for i in range(workers)]
    return _collect(_classify, jobs, workers)


def load() -> dict[str, list[dict[str, Any]]]:
    return json.loads(SAMPLES.read_text())


@dataclass
class Printed:
    """One stored implementation replayed and printed.

    ``status`` is ``printed``, ``unsound`` (the printer proved it cannot be correct:
    ``message`` says why) or ``stale`` (the space no longer accepts the decisions).
    ``facts`` records the decisions the launch configuration must agree with.
    """

    config: str
    seed: int
    decisions: list[Any]
    status: str
    message: str = ""
    recorded: str = ""
    """The verdict stored with the decisions."""
    cuda: Any = None
    opencl: Any = None
    facts: dict[str, Any] = field(default_factory=dict)
    unaligned: tuple[Any, Any] | None = None
    """With vector dims: the CUDA and OpenCL programs printed without alignment proofs, so
    that the fallbacks (unrolled lanes, ``vloadn``/``vstoren``) are checked too."""

    @property
    def name(self) -> str:
        return f"{self.config}/{self.seed}"


def launch_facts(cand: Any) -> dict[str, Any]:
    """The decisions about threads and blocks, in plain data (to cross process bounds)."""
    from partita.codegen.looptree import dim_size

    k = cand.kernel
    kinds = {d.name: cand.domain("dim_kind", d.name)[0] for d in k.dims}
    threads = [d for d, kind in kinds.items() if kind == "THREAD"]
    return {
        "kinds": kinds,
        "sizes": {d.name: dim_size(cand, d.name) for d in k.dims},
        "merged": [[a, b] for a in kinds for b in kinds
                   if a < b and cand.domain("order", a, b) == ("MERGED",)],
        "mapping": {f"{a} {b}": cand.domain("thread_mapping", a, b)[0]
                    for a in threads for b in threads if a != b},
        "counters": {c: list(cand.counter(c)) for c in ("threads", "thread_dims",
                                                         "block_dims")},
    }


def unaligned(cand: Any, entry: str) -> tuple[Any, Any]:
    """CUDA and OpenCL programs printed as if no vector access were provably aligned."""
    from partita.codegen.gpu import CudaPrinter, OpenclPrinter
    from partita.codegen.gpulower import GpuPlan

    class Unaligned(GpuPlan):
        def aligned(self, *args: Any) -> bool:
            return False

    class Cuda(CudaPrinter):
        plan_class = Unaligned

    class Opencl(OpenclPrinter):
        plan_class = Unaligned

    return Cuda(cand, entry).print(), Opencl(cand, entry).print()


def replay_and_print(job: tuple[str, list[dict[str, Any]]]) -> list[Printed]:
    """Replay a configuration's implementations and print them in CUDA and OpenCL."""
    from partita.codegen.gpu import UnsoundCandidate, print_cuda, print_opencl

    config, rows = job
    top = root(config)
    out = []
    for row in rows:
        cand = _replay(top, row["decisions"])
        if not cand or not cand.is_implementation:
            out.append(Printed(config, row["seed"], row["decisions"], "stale",
                               getattr(cand, "reason", "not an implementation"),
                               row["status"]))
            continue
        entry = f"partita_{config}_{row['seed']}"
        try:
            cuda, opencl = print_cuda(cand, entry), print_opencl(cand, entry)
        except UnsoundCandidate as exc:
            out.append(Printed(config, row["seed"], row["decisions"], "unsound", str(exc),
                               row["status"]))
            continue
        vectors = any(cand.domain("dim_kind", d.name) == ("VECTOR",) for d in cand.kernel.dims)
        out.append(Printed(config, row["seed"], row["decisions"], "printed", "",
                           row["status"], cuda=cuda, opencl=opencl,
                           facts=launch_facts(cand),
                           unaligned=unaligned(cand, entry + "_u") if vectors else None))
    return out


def replay_all(workers: int = 2) -> list[Printed]:
    """The stored implementations to check, replayed and printed in ``workers`` processes:
    every ``printed`` one and :data:`UNSOUND_REPLAYED` ``unsound`` ones per configuration."""
    jobs = []
    for config, rows in load().items():
        if config not in CONFIGS:
            continue
        unsound = [r for r in rows if r["status"] == "unsound"][:UNSOUND_REPLAYED]
        jobs.append((config, [r for r in rows if r["status"] == "printed"] + unsound))
    # One job per configuration (its space compiles once); the longest start first.
    jobs.sort(key=lambda job: -len(job[1]))
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        return [p for rows in pool.map(replay_and_print, jobs) for p in rows]


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    start = time.monotonic()
    samples = classify_all() if "--classify" in sys.argv[1:] else draw_all()
    SAMPLES.write_text(json.dumps(samples, separators=(",", ":")) + "\n")
    rows = [r for v in samples.values() for r in v]
    printed = sum(r["status"] == "printed" for r in rows)
    print(f"{len(rows)} implementations ({printed} printed, {len(rows) - printed} unsound) in "
          f"{time.monotonic() - start:.0f} s -> {SAMPLES}")
