"""Tuning a kernel end to end, with records: what ``partita.tune`` and ``partita tune`` run.

kernel -> space -> search (model bounds) -> C -> worker (check, time) -> records. The records
make tuning incremental: a kernel already tuned on this machine is returned at once (unless
asked to continue), a continued or interrupted run skips what was evaluated and prunes with
the best time known, and every evaluation is stored as it completes.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from partita.codegen.c import CodegenError, print_c
from partita.codegen.program import Param, Program, signature
from partita.db import Records
from partita.db.records import host_fingerprint
from partita.ir.kernel import Kernel
from partita.kernels.registry import get_spec, library_name, library_params, library_reference
from partita.model import Model
from partita.model.cpu import cpu_rates
from partita.paths import cache_root
from partita.runtime import Compiler, Evaluator, TimingOptions, compiler_version
from partita.runtime.call import KernelCall
from partita.runtime.data import (
    check_memory,
    exact_inputs,
    generate_inputs,
    note_blas_call,
    reference_kind,
    view,
)
from partita.search.sampling import NoImplementation, random_implementation
from partita.search.stop import Evaluations, Stop, WallTime, parse_duration
from partita.search.strategies import SearchState
from partita.search.tuner import Evaluation, TuneResult, tune_space
from partita.space.candidate import Candidate, DeadEnd, Space
from partita.targets import space_def

if TYPE_CHECKING:
    from partita.gpu.cuda import CudaDevice


def _params_of(k: Kernel) -> dict[str, Any]:
    """A library kernel's parameters, else its sizes and element type."""
    params = library_params(k)
    if params is not None:
        return params
    return {s.name: s.value for s in k.sizes} | {"dtype": k.arrays[0].dtype.value}


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

    # -- calling ---------------------------------------------------------------------------

    def _load(self) -> KernelCall:
        if self._fn is None:
            prog = Program(self.kernel, self.entry, self.source, self.params)
            so = Compiler().build([prog])
            self._fn = KernelCall(self.kernel.name, self.entry, self.params, so.path)
        return self._fn

    @property
    def inputs(self) -> list[Param]:
        return [p for p in self.params if p.kind == "scalar"
                or (p.kind == "array" and p.role in ("in", "inout"))]

    @property
    def outputs(self) -> list[Param]:
        return [p for p in self.params if p.kind == "array" and p.role in ("out", "inout")]

    def __call__(self, *args: Any, out: Any = None) -> Any:
        return (self._fn or self._load())(args, out)

    # -- reporting -------------------------------------------------------------------------

    def report(self) -> str:
        lines = [f"{self.kernel.name}: best {self._ms(self.time)} "
                 f"after {self.evaluations} evaluations, each verified against "
                 f"{self.reference}"]
        if self.result is not None:
            acc = self.result.accuracy()
            lines.append(f"  model: {len(self.result.violations)} bound violations; "
                         f"{100 * acc['within_10x']:.0f}% of bounds within 10x")
            if self.result.slowed:
                lines.append(f"  {len(self.result.slowed)} implementations timed while a core "
                             "ran slowed, even after retiming: their times are high")
        if self.variant is not None:
            lines.append(f"  order of the sum: {_variant_text(self.variant)} "
                         f"(of {len(self.variants or [])} tried)")
        if self.code_path is not None:
            lines.append(f"  C source: {self.code_path}")
        return "\n".join(lines)

    @staticmethod
    def _ms(t: float | None) -> str:
        return "n/a" if t is None else f"{t * 1e3:.4g} ms"


def _variant_text(params: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())


# -- the machine ------------------------------------------------------------------------------


def machine_model(kernel: Kernel, measure: bool = True) -> Model:
    """The lower-bound model with this machine's measured rates (measured once, cached)."""
    from partita.targets.cpu.measure import describe

    d = describe(measure_if_missing=measure)
    return Model(cpu_rates(d, kernel.arrays[0].dtype.value))


def target_model(kernel: Kernel, target: str, measure: bool = True) -> Model:
    """The model ``tune`` bounds with: this machine's rates on the CPU (measured first if
    none are cached and ``measure``), the H100's on the GPU."""
    if target == "gpu":
        from partita.model.gpu import gpu_rates
        from partita.targets.gpu.device import H100

        return Model(gpu_rates(H100, kernel.arrays[0].dtype.value))
    return machine_model(kernel, measure)


def code_dir() -> Path:
    """Where the C of tuned kernels is written: ``code/`` in partita's cache directory."""
    return cache_root() / "code"


def write_code(kernel: Kernel, source: str, suffix: str = ".c") -> Path:
    path = code_dir() / f"{kernel.name}_{kernel.structural_hash}{suffix}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    return path


# -- tuning -------------------------------------------------------------------------------------


def call_limit(best_s: float, floor_s: float = 0.5, factor: float = 5.0,
               default_s: float = 10.0) -> float:
    """How long one call of a candidate may run: ``factor`` times the best time so far (an
    implementation that slow cannot win, and a hang must not stall the search). Each call is
    repeated for warm-up and timing, so a generous factor lets a few hopeless candidates eat
    the budget of a large kernel."""
    return default_s if math.isinf(best_s) else max(floor_s, factor * best_s)


def _batch_best(best_s: float, done: list[Any]) -> float:
    """The best time so far, the batch's fully timed programs included (an abandoned one
    is never faster than the best, by construction)."""
    times = [m.median_s for m in done if m.ok and m.median_s is not None
             and getattr(m, "stop", "") != "abandoned"]
    return min([best_s, *times])


FIRST_CALL_BOUNDS = 50.0
"""With nothing measured yet, a call may run this many times the root's bound (at least
:func:`call_limit`'s default): on matmul 4096^3 (bound 0.5 s) every candidate of a first
batch ran past a fixed 10 s, and the tune ended with nothing verified."""


def batch_limit(best_s: float, root_bound_s: float = 0.0) -> Callable[[list[Any]], float]:
    """The per-call limit of each program of a batch: :func:`call_limit` of the best time so
    far, including the programs of the batch measured before it (with none,
    :data:`FIRST_CALL_BOUNDS` times the kernel's root bound if that is longer)."""
    def limit(done: list[Any]) -> float:
        best = _batch_best(best_s, done)
        if math.isinf(best):
            return max(call_limit(best), FIRST_CALL_BOUNDS * root_bound_s)
        return call_limit(best)
    return limit


COMPILE_LIMIT_S = 60.0
"""gcc time allowed per candidate while tuning: code that takes longer to compile (thousands
of unrolled copies) is never the fastest, and the build would stall the search."""

ABANDON_FACTOR = 1.5
"""A candidate whose fastest call is this much slower than the best time so far is timed no
further: it cannot be the new best, and on a large kernel each extra call costs seconds."""


def batch_abandon(best_s: float) -> Callable[[list[Any]], float]:
    """The time beyond which timing a program of a batch stops (:data:`ABANDON_FACTOR`
    times the best so far, the batch's own measurements included; 0 with no best yet)."""
    def limit(done: list[Any]) -> float:
        best = _batch_best(best_s, done)
        return 0.0 if math.isinf(best) else ABANDON_FACTOR * best
    return limit


TRANSFERRED = 3
"""How many related kernels' best implementations a tune starts from."""


def adapt(space: Space, decisions: list[Any], rng: random.Random) -> Candidate | None:
    """An implementation of ``space`` that keeps every decision of another kernel's
    implementation that still applies (taken in order; one that names an object this kernel
    lacks, a value outside its universe, or that would empty a domain is dropped), completed
    by random descent (a few tries: a tune waits for it). Decisions name dims and
    instructions, so the best of matmul 1024^3 keeps its tile sizes, kinds, order and
    temporaries on 2048^3."""
    cand = space.replay(decisions, lenient=True)
    if isinstance(cand, DeadEnd):
        return None
    try:
        return random_implementation(cand, rng, tries=5)
    except NoImplementation:
        return None


def _distance(a: dict[str, Any], b: dict[str, Any]) -> float:
    """How far apart two kernels' parameters are: size ratios count their log2, any other
    difference (dtype, layout flags) as a ratio of 2^16."""
    d = 0.0
    for key in set(a) | set(b):
        x, y = a.get(key), b.get(key)
        if x == y:
            continue
        if (isinstance(x, int) and isinstance(y, int) and not isinstance(x, bool)
                and x > 1 and y > 1):
            d += abs(math.log2(x / y))
        else:
            d += 16.0
    return d


def transferred(rec: Records, space: Space, kernel: Kernel, params: dict[str, Any],
                kernel_id: int, machine_id: int, target: str, seed: int,
                skip: Iterable[str] = ()) -> list[Candidate]:
    """The best implementations recorded for the same kernel with other parameters (the
    :data:`TRANSFERRED` closest), adapted to ``space`` (:func:`adapt`): a tune starts from
    them, so that a large size inherits what a smaller one found."""
    rows = rec.related_best(kernel.name, kernel_id, machine_id, target)
    rows.sort(key=lambda r: (_distance(params, r["params"]), r["time_s"]))
    rng = random.Random(seed)
    seen = set(skip)
    out = []
    for row in rows[:TRANSFERRED]:
        cand = adapt(space, row["decisions"], rng)
        if cand is not None and cand.decisions_json() not in seen:
            seen.add(cand.decisions_json())
            out.append(cand)
    return out


SKETCH_COMPLETIONS = 2
"""Implementations of each sketch in the first batch (random completions: a bad one is
common, two rarely both are)."""


def sketched(space: Space, model: Model, seed: int, completions: int = SKETCH_COMPLETIONS
             ) -> tuple[list[Candidate], list[Candidate]]:
    """(the sketches of the kernel as partial candidates, ``completions`` random completions
    of each for the first batch); see :mod:`partita.search.sketch`. Completions whose bound
    exceeds the least of them twice over are left out: the search would prune them."""
    from partita.search.sketch import sketch_candidates

    lanes = max(1, model.rates.vector_bytes // space.kernel.arrays[0].dtype.itemsize)
    seeds = [c for _, c in sketch_candidates(space, lanes, model.rates.cores)]
    rng = random.Random(seed)
    first: list[tuple[float, Candidate]] = []
    for c in seeds:
        for _ in range(completions):
            try:
                impl = random_implementation(c, rng, tries=5)
            except NoImplementation:
                break
            first.append((model.bound(impl).time_s, impl))
    least = min((b for b, _ in first), default=0.0)
    return seeds, [c for b, c in first if b <= 2 * least]


GPU_FIRST_DRAWS = 64
"""Random implementations drawn for the first batch on the gpu target, which has no sketches:
the batch holds those of least bound that the device can launch."""


def gpu_first_batch(space: Space, model: Model, device: CudaDevice, seed: int, size: int,
                    draws: int = GPU_FIRST_DRAWS) -> list[Candidate]:
    """The ``size`` implementations of least bound among ``draws`` random ones that fit
    ``device`` (a :class:`~partita.gpu.cuda.CudaDevice`). Random GPU implementations of a
    matmul 1024^3 are bounded at 9 to 50,000 times the root (a uniformly random first batch
    ran one launch for 57 s), and a third ask for more shared memory than a block has."""
    from partita.codegen.gpu import print_cuda

    rng = random.Random(seed)
    root = space.root()
    ranked: list[tuple[float, Candidate]] = []
    for _ in range(draws):
        try:
            impl = random_implementation(root, rng, tries=5)
        except NoImplementation:
            continue
        try:
            fits = device.misfit(print_cuda(impl)) is None
        except CodegenError:
            fits = False
        if fits:
            ranked.append((model.bound(impl).time_s, impl))
    ranked.sort(key=lambda r: r[0])  # stable: equal bounds keep the order drawn
    return [c for _, c in ranked[:size]]


def records_target(target: str, cold_cache: bool = False) -> str:
    """The target as the records name it. Times taken from cold caches are kept apart from
    warm ones (``cpu+cold``): the two measure different things (a 64 MB gemv streams from a
    32 MB L3 warm, from memory cold), so they never compete for one best, and an
    implementation measured warm is measured again cold."""
    return f"{target}+cold" if cold_cache else target


def budget_stop(budget_s: float | str | None, evaluations: int | None) -> Stop:
    """Stop at ``budget_s`` (seconds, or ``"30s"``, ``"5m"``) or after ``evaluations``."""
    stops: list[Stop] = []
    if budget_s is not None:
        stops.append(WallTime(parse_duration(budget_s)))
    if evaluations is not None:
        stops.append(Evaluations(evaluations))
    if not stops:
        stops.append(WallTime(60.0))
    out = stops[0]
    for s in stops[1:]:
        out = out | s
    return out


def tune(kernel: Kernel, *, budget: float | str | None = 60.0,
         evaluations: int | None = None,
         stop: Stop | None = None, target: str = "cpu", search: str = "mcts", seed: int = 0,
         db: str | Path | None = None, continue_: bool = False, batch: int = 4,
         model: Model | None = None, reference: Callable[..., dict[str, Any]] | None = None,
         on_evaluation: Callable[[Evaluation, SearchState], None] | None = None,
         transfer: bool = True, sketches: bool = True, reassociate: bool = False,
         cold_cache: bool = False, choice_order: str | Sequence[str] = "default",
         **search_options: Any) -> Tuned:
    """Tune ``kernel`` on this machine and return its best implementation.

    Every evaluated implementation is checked against the kernel's numpy reference before it
    is timed; a wrong one is recorded as failed and never becomes the best.

    With a best already recorded for this kernel and machine, it is returned at once unless
    ``continue_``; a continued run starts from the records (it prunes with the known best and
    skips implementations already evaluated). With ``transfer``, the first batch holds the
    best implementations recorded for related kernels (other sizes), adapted; with
    ``sketches`` (CPU), completions of the kernel's sketches (:mod:`partita.search.sketch`),
    which MCTS then keeps completing for part of its proposals. ``reference`` computes a
    kernel built with the builder in numpy (called like the kernel, returning a dict of
    outputs by name); library kernels have theirs.

    On the ``gpu`` target, implementations are printed as CUDA, built with nvcc, run, checked
    and timed on the CUDA device (:mod:`partita.gpu.cuda`), and bounded by the GPU model (the
    H100's figures); without a usable device it raises
    :class:`~partita.gpu.cuda.CudaUnavailable` (a RuntimeError) saying why. The returned
    object's source is then CUDA (``code_path`` ends in ``.cu``); it cannot be called.

    With ``reassociate``, the order of the kernel's sum is tuned too (library kernels that
    declare one, such as ``dot`` and ``gemv``): every split into partial sums is a variant,
    and ``budget`` and ``evaluations`` are shared among them by successive halving cut by the
    bound (:mod:`partita.variants`). The result is the fastest variant (``variant`` names its
    parameters; ``variants`` lists them all); ``stop`` cannot be given then.

    With ``cold_cache`` (CPU), every timed call starts from cold caches: a buffer of twice the
    last-level cache is written before each call, outside the timed interval, so the search
    chooses for data that streams from memory, as a kernel called on fresh data does. Warm
    (the default), repeated calls find what fits in the caches there. Cold and warm times are
    recorded apart (:func:`records_target`).

    ``choice_order`` is the order in which the search takes decisions (see
    :func:`partita.space`): ``"default"`` (layouts, sizes, kinds, memory spaces, order,
    prefetching), ``"reverse"``, or the choices to take first. It changes the tree the search
    walks and where the bound prunes it, not the implementations; a run records it in its
    options.
    """
    if target not in ("cpu", "gpu"):
        raise ValueError(f"unknown target {target!r} (targets: cpu, gpu)")
    budget = parse_duration(budget) if budget is not None else None
    if evaluations is not None and (isinstance(evaluations, bool) or not isinstance(
            evaluations, int) or evaluations < 1):
        raise ValueError(f"evaluations must be a positive integer, got {evaluations!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if target == "cpu":
        check_memory(kernel)  # TooLarge, before any array is allocated
    if cold_cache and target != "cpu":
        raise ValueError("cold_cache: caches are flushed between calls on the cpu target "
                         "only")
    if choice_order != "default":
        space_def(target, kernel).reordered(choice_order)  # a bad order fails before any work
    if reassociate:
        if stop is not None:
            raise ValueError("reassociate shares budget and evaluations among the orders of "
                             "the sum; a stop condition cannot be shared: give budget or "
                             "evaluations instead")
        import partita
        from partita.variants import tune_reassociated

        return tune_reassociated(
            kernel, tune, lambda kv: model or target_model(kv, target), budget=budget,
            evaluations=evaluations,
            space_of=lambda kv: partita.space(kv, target, choice_order=choice_order),
            continue_=continue_, target=target, search=search, seed=seed, db=db,
            batch=batch, model=model, reference=reference, on_evaluation=on_evaluation,
            transfer=transfer, sketches=sketches, cold_cache=cold_cache,
            choice_order=choice_order, **search_options)
    gpu = target == "gpu"
    stored = records_target(target, cold_cache)
    device: Any = None
    if gpu:
        from partita.gpu.cuda import tuning_device

        device = tuning_device()
    import partita

    params = _params_of(kernel)
    compiler = Compiler(timeout_s=COMPILE_LIMIT_S)
    with Records(db) as rec:
        kid = rec.kernel_id(kernel, params)
        mid = rec.machine_id(host_fingerprint(compiler_version(compiler.cc)))
        best = rec.best(kid, mid, stored)
        if best is not None and not continue_:
            return _from_record(kernel, best, len(rec.evaluations(kid, mid)), target)
        space: Space = partita.space(kernel, target, choice_order=choice_order)
        model = model or target_model(kernel, target)
        stop = stop or budget_stop(budget, evaluations)
        options = {"search": search, "batch": batch, "stop": str(stop), **search_options}
        if cold_cache:
            options["cold_cache"] = True
        if choice_order != "default":
            options["choice_order"] = list(space.sdef.choice_order)
        run = rec.start_run(kid, mid, stored, search, options, seed)
        known = best["time_s"] if best else math.inf
        seen = rec.seen_decisions(kid, mid, stored)
        programs: dict[str, Program] = {}
        result: TuneResult | None = None
        state = SearchState(best_time=known)
        timing = TimingOptions(flush_cache=cold_cache)
        status = "interrupted"
        slowed_best: dict[str, Any] = {}
        try:
            refs = {kernel.name: reference} if reference is not None else None
            ev: Any
            if gpu:
                from partita.codegen.gpu import print_cuda
                from partita.gpu.cuda import CudaRunner

                # A candidate nvcc builds for minutes (seen: 161 s) is as hopeless as one
                # gcc does, and the batch would wait for it.
                ev = CudaRunner(device, seed=seed, timing=timing, references=refs,
                                compile_timeout_s=COMPILE_LIMIT_S)
                printer, flags = print_cuda, ev.flags_text
            else:
                ev = Evaluator(seed=seed, timing=timing, compiler=compiler, references=refs)
                printer, flags = print_c, compiler.flags_text
            with ev:
                root = space.root()
                root_bound = model.bound(root).time_s if isinstance(root, Candidate) else 0.0

                def evaluate(progs: list[Program]) -> list[Any]:
                    programs.update((p.digest, p) for p in progs)
                    limit = batch_limit(state.best_time, root_bound)
                    if gpu:
                        return ev.evaluate(progs, timeout_s=limit)
                    return ev.evaluate(progs, timeout_s=limit,
                                       abandon_s=batch_abandon(state.best_time),
                                       until=state.deadline if math.isfinite(state.deadline)
                                       else None)

                def record(e: Evaluation) -> None:
                    eid = rec.add_evaluation(run, e.to_json(), flags)
                    prog = programs.pop(e.source_digest, None)
                    if (prog is not None and e.ok and e.slowed and e.median_s is not None
                            and e.median_s < slowed_best.get("time_s", math.inf)):
                        slowed_best.update(eid=eid, time_s=e.median_s, prog=prog,
                                           decisions=json.dumps(e.decisions))
                    # The search has already taken a new best time into its state: only a
                    # new best's source goes to the records (never a slowed timing's).
                    if (prog is not None and e.ok and not e.slowed and e.median_s is not None
                            and e.median_s <= state.best_time):
                        rec.offer_best(kid, mid, stored, eid, e.median_s, json.dumps(e.decisions),
                                       prog.source, prog.entry, flags)
                    if on_evaluation is not None:
                        on_evaluation(e, state)

                initial = transferred(rec, space, kernel, params, kid, mid, stored, seed,
                                      seen) if transfer and best is None else []
                if gpu and best is None:
                    initial += gpu_first_batch(space, model, device, seed, batch)
                if sketches and not gpu:
                    # A recorded best is better than random completions: none then.
                    seeds, completions = sketched(space, model, seed,
                                                  SKETCH_COMPLETIONS if best is None else 0)
                    initial += completions
                    if search == "mcts" and seeds:
                        search_options = {"seeds": seeds, **search_options}
                result = tune_space(space, model, evaluate, stop, strategy=search, seed=seed,
                                    batch=batch, known_best=known, on_evaluation=record,
                                    skip=seen, state=state, prepare=ev.prepare,
                                    printer=printer, initial=initial, **search_options)
            status = "finished"
        finally:
            stopped = result.stopped_by if result is not None else "interrupted"
            rec.finish_run(run, stopped, status=status)
        best = rec.best(kid, mid, stored)
        if best is None and slowed_best:
            best = _slowed_stand_in(rec, (kid, mid, stored), slowed_best, flags, kernel.name)
        total = len(rec.evaluations(kid, mid))
    assert result is not None
    if best is None:
        failures = {e.status for e in result.evaluations}
        raise RuntimeError(f"no implementation of {kernel.name} was verified in "
                           f"{len(result.evaluations)} evaluations (statuses: "
                           f"{', '.join(sorted(failures)) or 'none'})")
    tuned = _from_record(kernel, best, total, target)
    tuned.result = result
    tuned.reference = reference_kind(kernel, reference)
    return tuned


def _slowed_stand_in(rec: Records, where: tuple[int, int, str], slowed: dict[str, Any],
                     flags: str, name: str) -> dict[str, Any] | None:
    """Where every verified time of a tune was taken on a slowed machine, the fastest stands
    in as the best, with a warning, until a quiet run times one."""
    prog = slowed["prog"]
    rec.offer_best(*where, slowed["eid"], slowed["time_s"], slowed["decisions"], prog.source,
                   prog.entry, flags)
    warnings.warn(f"{name}: every implementation was timed while the machine ran slowed "
                  "(another process or guest sharing a core), even after retiming; the best "
                  "time recorded is too high: tune again with --continue on a quiet machine",
                  stacklevel=3)
    return rec.best(*where)


class StaleRecord(LookupError):
    """Recorded decisions that no longer replay to an implementation of the kernel."""


def rebuild_program(kernel: Kernel, best: dict[str, Any], target: str = "cpu"
                    ) -> tuple[Any, bool]:
    """The program of a recorded best, printed again from its decisions (records are data:
    their stored source is never compiled, so a records file from elsewhere runs no code of
    its author's), and whether it is the very source that was measured (its digest)."""
    decisions = best["decisions"]
    if isinstance(decisions, str):
        decisions = json.loads(decisions)
    try:
        cand = Space(space_def(target, kernel), kernel).replay(decisions)
    except (ValueError, TypeError, KeyError) as exc:
        raise StaleRecord(f"the recorded decisions of {kernel.name} do not replay: {exc}; "
                          "tune it again") from exc
    if isinstance(cand, DeadEnd) or not cand.is_implementation:
        why = cand.reason if isinstance(cand, DeadEnd) else "choices are left open"
        raise StaleRecord(f"the recorded decisions of {kernel.name} are no implementation of "
                          f"this build's space ({why}): tune it again")
    if target == "gpu":
        from partita.codegen.gpu import print_cuda

        program: Any = print_cuda(cand, best["entry"])
    else:
        program = print_c(cand, best["entry"])
    measured = hashlib.sha256(str(best.get("source", "")).encode()).hexdigest()[:16]
    return program, program.digest == measured


def _from_record(kernel: Kernel, best: dict[str, Any], evaluations: int,
                 target: str = "cpu") -> Tuned:
    program, same = rebuild_program(kernel, best, target)
    if not same:
        warnings.warn(f"{kernel.name}: the code printed again from the recorded decisions "
                      "differs from the code that was measured (another build of partita, or "
                      "an edited records file); the recorded time may not hold",
                      stacklevel=3)
    tuned = Tuned(kernel, program.source, program.entry, list(best["decisions"]),
                  best["time_s"], signature(kernel), best.get("flags", ""), evaluations)
    tuned.code_path = write_code(kernel, program.source, ".cu" if target == "gpu" else ".c")
    tuned.reference = reference_kind(kernel)
    return tuned


def load(kernel: Kernel, *, target: str = "cpu", db: str | Path | None = None,
         cold_cache: bool = False) -> Tuned:
    """The best implementation recorded for ``kernel`` on this machine, without tuning (with
    ``cold_cache``, the best timed from cold caches)."""
    with Records(db) as rec:
        kid = rec.kernel_id(kernel, _params_of(kernel))
        mid = rec.machine_id(host_fingerprint(compiler_version(Compiler().cc)))
        best = rec.best(kid, mid, records_target(target, cold_cache))
        total = len(rec.evaluations(kid, mid))
    if best is None:
        timed = " timed from cold caches" if cold_cache else ""
        raise LookupError(f"no implementation of {kernel.name}{timed} is recorded on this "
                          f"machine ({rec.path}): tune it first")
    return _from_record(kernel, best, total, target)


# -- the numpy comparison ------------------------------------------------------------------------


def numpy_time(kernel: Kernel, seed: int = 0, reps: int = 7,
               min_s: float = 0.5, flush_bytes: int = 0) -> float | None:
    """Median time of the kernel's numpy reference on the same inputs (library kernels):
    at least ``reps`` calls and ``min_s`` seconds of them (timed calls only). OpenBLAS runs
    even small products on every core, so while anything else runs a call waits for a
    scheduler slice (a 256x256x32 product measured 12 ms instead of 0.08 ms over 7 calls);
    over half a second of calls, a short disturbance stays a minority and the median ignores
    it. With ``flush_bytes``, a buffer of that size is written before every call, outside the
    timed interval, so every call starts from cold caches (as the harness's ``flush_cache``
    does for generated code)."""
    name = library_name(kernel)
    reference = library_reference(kernel)
    if name is None or reference is None or not get_spec(name).baseline:
        return None
    params = signature(kernel)
    values = generate_inputs(params, seed, exact_inputs(kernel))
    args = []
    for p in params:
        if p.kind == "scalar":
            args.append(values[p.name])
        elif p.kind == "array" and p.role in ("in", "inout"):
            args.append(view(values[p.name], p))
    flush = np.empty(flush_bytes, dtype=np.uint8) if flush_bytes > 0 else None
    reference(*args)  # warm-up (threads, caches)
    times: list[float] = []
    while len(times) < reps or sum(times) < min_s:
        if flush is not None:
            flush.fill(len(times) & 0xFF)
        t0 = time.perf_counter()
        reference(*args)
        times.append(time.perf_counter() - t0)
    note_blas_call()  # a kernel timed next waits for OpenBLAS's threads to fall asleep
    return float(np.median(times))


def kernel_rates(kernel: Kernel, t: float) -> tuple[float | None, float | None]:
    """(GFLOP/s, GB/s) of a library kernel run in ``t`` seconds."""
    name = library_name(kernel)
    if name is None or not t:
        return None, None
    spec = get_spec(name)
    params = spec.resolve({k: v for k, v in _params_of(kernel).items()
                           if k in {p.name for p in spec.params}})
    return spec.flops(**params) / t / 1e9, spec.bytes(**params) / t / 1e9
