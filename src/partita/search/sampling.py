"""Uniform random descents that end in implementations (dead ends are retried)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from partita.codegen.c import CodegenError, print_c
from partita.codegen.program import Program
from partita.runtime.evaluate import Checked
from partita.space.candidate import Candidate, DeadEnd
from partita.space.estimate import random_descent


class NoImplementation(RuntimeError):
    """Random descents kept ending in dead ends."""


def random_implementation(root: Candidate | DeadEnd, rng: random.Random,
                          tries: int = 1000) -> Candidate:
    """One implementation drawn by uniform random descent from ``root``."""
    if isinstance(root, DeadEnd):
        raise NoImplementation(f"the space has no implementation: {root.reason}")
    for _ in range(tries):
        leaf, _, _ = random_descent(root, rng)
        if isinstance(leaf, Candidate):
            return leaf
    raise NoImplementation(f"{tries} random descents all ended in dead ends")


def sample_implementations(root: Candidate | DeadEnd, count: int, rng: random.Random,
                           tries: int = 1000) -> Iterator[Candidate]:
    """``count`` implementations, each drawn independently by :func:`random_implementation`."""
    for _ in range(count):
        yield random_implementation(root, rng, tries)


@dataclass
class SampleReport:
    """Random implementations of a kernel, compiled, run and checked (``partita sample``)."""

    sampled: int = 0
    compiled: int = 0
    verified: int = 0
    failed: list[dict[str, Any]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    best_time_s: float | None = None
    best_decisions: list[Any] | None = None

    def to_json(self, flops: int | None = None) -> dict[str, Any]:
        gflops = (flops / self.best_time_s / 1e9
                  if flops and self.best_time_s else None)
        return {"sampled": self.sampled, "compiled": self.compiled, "verified": self.verified,
                "failed": self.failed, "best_time_s": self.best_time_s,
                "gflops_best": gflops, "best_decisions": self.best_decisions}


def sample_and_evaluate(root: Candidate | DeadEnd, count: int, rng: random.Random,
                        evaluate: Callable[[list[Program]], Sequence[Checked]],
                        printer: Callable[[Candidate, str], Program] = print_c
                        ) -> SampleReport:
    """Draw ``count`` implementations, print, compile, run and verify each one.

    ``evaluate`` returns one result per program (see :class:`partita.runtime.Checked`)."""
    report = SampleReport()
    cands = list(sample_implementations(root, count, rng))
    report.sampled = len(cands)
    programs: list[tuple[Candidate, Program]] = []
    for i, cand in enumerate(cands):
        try:
            programs.append((cand, printer(cand, f"partita_sample_{i}")))
        except CodegenError as exc:
            report.failed.append({"reason": f"codegen_error: {exc}",
                                  "decisions": [d.to_json() for d in cand.decisions]})
    results = evaluate([p for _, p in programs]) if programs else []
    for (cand, _), m in zip(programs, results, strict=True):
        if m.status != "compile_error":
            report.compiled += 1
        if m.status == "ok":
            report.verified += 1
            if m.median_s is not None:
                report.times.append(m.median_s)
                if report.best_time_s is None or m.median_s < report.best_time_s:
                    report.best_time_s = m.median_s
                    report.best_decisions = [d.to_json() for d in cand.decisions]
        else:
            report.failed.append({"reason": f"{m.status}: {m.reason}",
                                  "decisions": [d.to_json() for d in cand.decisions]})
    return report
