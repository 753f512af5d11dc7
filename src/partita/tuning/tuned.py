"""The result of a tune: a callable best implementation, and how it is read back from records."""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from partita.codegen.program import Param, Program, signature
from partita.db import BestRow, Records
from partita.ir.kernel import Kernel
from partita.kernels.registry import library_params
from partita.paths import cache_root
from partita.runtime.call import KernelCall
from partita.runtime.compile import Compiler, compiler_version
from partita.runtime.data import reference_kind
from partita.search.tuner import TuneResult
from partita.space.candidate import Candidate, DeadEnd, Space
from partita.targets import get as get_target
from partita.targets.cpu.target import host_fingerprint


def kernel_params(k: Kernel) -> dict[str, Any]:
    """A kernel's parameters as the records key it: a library kernel's parameters, else its
    sizes and element type."""
    params = library_params(k)
    if params is not None:
        return params
    return {s.name: s.value for s in k.sizes} | {"dtype": k.compute_dtype.value}


def host_machine() -> dict[str, Any]:
    """This machine's fingerprint as the records key it (its CPU and C compiler)."""
    return host_fingerprint(compiler_version())


def records_target(target: str, cold_cache: bool = False) -> str:
    """The target as the records name it. Times taken from cold caches are kept apart from
    warm ones (``cpu+cold``): the two measure different things (a 64 MB gemv streams from a
    32 MB L3 warm, from memory cold), so they never compete for one best, and an
    implementation measured warm is measured again cold."""
    return f"{target}+cold" if cold_cache else target


def variant_text(params: dict[str, Any]) -> str:
    """``key=value`` pairs of a variant's parameters, space separated."""
    return " ".join(f"{k}={v}" for k, v in params.items())


@dataclass
class Tuned:
    """The best implementation of a kernel found so far, callable on numpy arrays.

    Call it with the kernel's inputs in signature order (scalars, then ``in`` and ``inout``
    arrays); it returns the output array (or a tuple of them). ``out=`` (an array, or a dict by
    name) writes the outputs in place. Arguments are checked against the kernel: a wrong
    dtype raises TypeError, a wrong shape or memory layout ValueError, each naming the
    argument.
    """

    kernel: Kernel
    source: str
    entry: str
    decisions: list[Any]
    time: float | None
    params: tuple[Param, ...]
    flags: str = ""
    evaluations: int = 0
    result: TuneResult | None = field(default=None, repr=False)
    code_path: Path | None = None
    variant: dict[str, Any] | None = None
    """With ``reassociate``: the parameters of the order of the sum that won (the kernel is
    then that variant); None otherwise."""
    variants: list[dict[str, Any]] | None = field(default=None, repr=False)
    """With ``reassociate``: every order of the sum tried, with its root bound, best time,
    evaluations and why it stopped (:meth:`partita.variants.Variant.to_json`)."""
    reference: str = "numpy"
    """What every candidate was checked against (:data:`partita.runtime.data.REFERENCE_KINDS`):
    the library's numpy reference, one the caller gave, or the kernel's sequential meaning."""
    _fn: KernelCall | None = field(default=None, repr=False)
    _call: Any = field(default=None, repr=False)
    """The loaded entry's specialised call (or its general one): one Python call less per
    call of the kernel."""

    # -- calling ---------------------------------------------------------------------------

    def _load(self) -> KernelCall:
        if self._fn is None:
            prog = Program(self.kernel, self.entry, self.source, self.params)
            so = Compiler().build([prog])
            self._fn = KernelCall(self.kernel.name, self.entry, self.params, so.path)
            self._call = self._fn.fast or self._fn
        return self._fn

    @property
    def inputs(self) -> list[Param]:
        return [p for p in self.params if p.kind == "scalar"
                or (p.kind == "array" and p.role in ("in", "inout"))]

    @property
    def outputs(self) -> list[Param]:
        return [p for p in self.params if p.kind == "array" and p.role in ("out", "inout")]

    def __call__(self, *args: Any, out: Any = None) -> Any:
        call = self._call
        if call is None:
            self._load()
            call = self._call
        return call(args, out)

    # -- reporting -------------------------------------------------------------------------

    def report(self) -> str:
        lines = [f"{self.kernel.name}: best {self._ms(self.time)} "
                 f"after {self.evaluations} evaluations, each verified against "
                 f"{self.reference}"]
        if self.result is not None:
            acc = self.result.accuracy()
            lines.append(f"  model: {len(self.result.violations)} bound violations; "
                         f"{100 * acc['within_10x']:.0f}% of bounds within 10x")
            gap = self.result.optimality_gap
            if gap is not None:
                lines.append(f"  certificate: nothing left in the space runs faster than "
                             f"{self._ms(self.result.space_lower_bound_s)} (gap {gap:.3g}x)")
            if self.result.slowed:
                lines.append(f"  {len(self.result.slowed)} implementations timed while a core "
                             "ran slowed, even after retiming: their times are high")
        if self.variant is not None:
            lines.append(f"  order of the sum: {variant_text(self.variant)} "
                         f"(of {len(self.variants or [])} tried)")
        if self.code_path is not None:
            lines.append(f"  C source: {self.code_path}")
        return "\n".join(lines)

    @staticmethod
    def _ms(t: float | None) -> str:
        return "n/a" if t is None else f"{t * 1e3:.4g} ms"


def code_dir() -> Path:
    """Where the code of tuned kernels is written: ``code/`` in partita's cache directory."""
    return cache_root() / "code"


def write_code(kernel: Kernel, source: str, suffix: str = ".c") -> Path:
    path = code_dir() / f"{kernel.name}_{kernel.structural_hash}{suffix}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    return path


class StaleRecord(LookupError):
    """Recorded decisions that no longer replay to an implementation of the kernel."""


def _with_added_choices(cand: Candidate, added: Mapping[str, str]) -> Candidate | DeadEnd:
    """``cand`` with the choices the space gained after its decisions were recorded fixed to
    the values that print the code those records measured (``Target.added_choices``)."""
    out: Candidate | DeadEnd = cand
    for choice, args in cand.open_choices():
        if choice in added and isinstance(out, Candidate):
            out = out.restrict(choice, args, (added[choice],))
    return out


def rebuild_program(kernel: Kernel, best: BestRow, target: str = "cpu"
                    ) -> tuple[Any, bool]:
    """The program of a recorded best, printed again from its decisions (records are data:
    their stored source is never compiled, so a records file from elsewhere runs no code of
    its author's), and whether it is the very source that was measured (its digest)."""
    decisions = best.decisions
    plug = get_target(target)
    try:
        cand = Space(plug.space_def(kernel), kernel).replay(decisions)
    except (ValueError, TypeError, KeyError) as exc:
        raise StaleRecord(f"the recorded decisions of {kernel.name} do not replay: {exc}; "
                          "tune it again") from exc
    if isinstance(cand, Candidate):
        cand = _with_added_choices(cand, plug.added_choices)
    if isinstance(cand, DeadEnd) or not cand.is_implementation:
        why = cand.reason if isinstance(cand, DeadEnd) else "choices are left open"
        raise StaleRecord(f"the recorded decisions of {kernel.name} are no implementation of "
                          f"this build's space ({why}): tune it again")
    program = plug.print_program(cand, best.entry)
    measured = hashlib.sha256(best.source.encode()).hexdigest()[:16]
    return program, program.digest == measured


def from_record(kernel: Kernel, best: BestRow, evaluations: int,
                target: str = "cpu", stacklevel: int = 3) -> Tuned:
    """The :class:`Tuned` of a recorded best, its code printed again and written to
    :func:`code_dir` (with a warning where it differs from the code that was measured,
    attributed ``stacklevel`` frames up: to the caller of ``load`` or ``tune``)."""
    program, same = rebuild_program(kernel, best, target)
    if not same:
        warnings.warn(f"{kernel.name}: the code printed again from the recorded decisions "
                      "differs from the code that was measured (another build of partita, or "
                      "an edited records file); the recorded time may not hold",
                      stacklevel=stacklevel)
    tuned = Tuned(kernel, program.source, program.entry, list(best.decisions),
                  best.time_s, signature(kernel), best.flags, evaluations)
    tuned.code_path = write_code(kernel, program.source, get_target(target).code_suffix)
    tuned.reference = reference_kind(kernel)
    return tuned


def load(kernel: Kernel, *, target: str = "cpu", db: str | Path | None = None,
         cold_cache: bool = False) -> Tuned:
    """The best implementation recorded for ``kernel`` on this machine, without tuning (with
    ``cold_cache``, the best timed from cold caches)."""
    with Records(db) as rec:
        kid = rec.kernel_id(kernel, kernel_params(kernel))
        mid = rec.machine_id(host_machine())
        best = rec.best(kid, mid, records_target(target, cold_cache))
        total = len(rec.evaluations(kid, mid))
    if best is None:
        timed = " timed from cold caches" if cold_cache else ""
        raise LookupError(f"no implementation of {kernel.name}{timed} is recorded on this "
                          f"machine ({rec.path}): tune it first")
    return from_record(kernel, best, total, target)
