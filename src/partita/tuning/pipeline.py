"""Tuning a kernel end to end, with records: what ``partita.tune`` and ``partita tune`` run.

kernel -> space -> search (model bounds) -> print -> runner (check, time) -> records, each
step asked of the kernel's :class:`~partita.targets.base.Target`. The records make tuning
incremental: a kernel already tuned on this machine is returned at once (unless asked to
continue), a continued or interrupted run skips what was evaluated and prunes with the best
time known, and every evaluation is stored as it completes.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from partita.codegen.program import Program
from partita.config import host_name
from partita.db import BestRow, Records
from partita.db.hosts import evaluation_host, record_host
from partita.ir.kernel import Kernel
from partita.model import Model
from partita.runtime.cluster import ClusterEvaluator
from partita.runtime.data import Reference, reference_kind
from partita.runtime.evaluate import Measurement
from partita.runtime.harness import TimingOptions
from partita.search.stop import GapReached, Stop, parse_duration, parse_gap
from partita.search.strategies import SearchState
from partita.search.tuner import Evaluation, TuneResult, tune_space
from partita.space.candidate import Candidate, Space
from partita.targets import REGISTRY, Target
from partita.targets import get as get_target
from partita.tuning.limits import COMPILE_LIMIT_S, batch_abandon, batch_limit, budget_stop
from partita.tuning.transfer import transferred
from partita.tuning.tuned import (
    Tuned,
    from_record,
    host_machine,
    kernel_params,
    records_target,
)
from partita.variants import tune_reassociated

OnEvaluation = Callable[[Evaluation, SearchState], None]
"""What ``tune`` calls after each evaluation is recorded."""


def target_model(kernel: Kernel, target: str, measure: bool = True) -> Model:
    """The model ``tune`` bounds with: ``target``'s rates for ``kernel`` (on the CPU, this
    machine's, measured first if none are cached and ``measure``; the H100's on the GPU)."""
    return get_target(target).model(kernel, measure)


# -- validation ---------------------------------------------------------------------------------


def check_request(kernel: Kernel, *, target: str, budget: float | str | None,
                  evaluations: int | None, seed: int, cold_cache: bool,
                  choice_order: str | Sequence[str], reassociate: bool,
                  stop: Stop | None, cluster: Any = None) -> tuple[Target, float | None]:
    """(the target, the budget in seconds) of a tune, or the ValueError (or the target's
    :class:`~partita.targets.base.TargetUnavailable`) that a bad request raises before any
    work, in one line: the one place that checks what ``tune`` and ``partita tune`` take."""
    plug = get_target(target)
    budget_s = parse_duration(budget) if budget is not None else None
    if evaluations is not None and (isinstance(evaluations, bool) or not isinstance(
            evaluations, int) or evaluations < 1):
        raise ValueError(f"evaluations must be a positive integer, got {evaluations!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if cold_cache and not plug.cold_cache:
        flushed = ", ".join(t.name for t in REGISTRY.values() if t.cold_cache)
        raise ValueError(f"cold_cache: caches are flushed between calls on the {flushed} "
                         "target only")
    if choice_order != "default":
        plug.space_def(kernel).reordered(choice_order)  # a bad order fails before any work
    if reassociate and stop is not None:
        raise ValueError("reassociate shares budget and evaluations among the orders of "
                         "the sum; a stop condition cannot be shared: give budget or "
                         "evaluations instead")
    if cluster is not None and not plug.cluster_runs:
        raise ValueError(f"cluster: the {plug.name} target is tuned on this machine only")
    plug.check(kernel)  # arrays too large for memory, no device: before any work
    return plug, budget_s


# -- the request and what records it ------------------------------------------------------------


@dataclass
class Request:
    """What a tune of one kernel (one order of its sum) was asked to do, checked."""

    kernel: Kernel
    plug: Target
    budget_s: float | None
    evaluations: int | None
    stop: Stop | None
    search: str
    seed: int
    batch: int
    continue_: bool
    model: Model | None
    reference: Reference | None
    on_evaluation: OnEvaluation | None
    transfer: bool
    sketches: bool
    cold_cache: bool
    choice_order: str | Sequence[str]
    search_options: dict[str, Any]
    cluster: Any = None
    """A Dask scheduler's address or a ``distributed.Client`` to compile and time on."""


@dataclass(frozen=True)
class SlowedTiming:
    """A run's fastest verified timing that was not offered as its best (taken on a slowed
    machine, or on a cluster by another host than the best's): its evaluation id, time,
    decisions (JSON text) and program."""

    eid: int
    time_s: float
    decisions: str
    prog: Program
    slowed: bool = True


@dataclass
class Recorder:
    """Where a run's evaluations go as they complete: the records (each evaluation, and the
    source of each new best), then the caller's ``on_evaluation``."""

    rec: Records
    where: tuple[int, int, str]
    """(kernel id, machine id, target as the records name it)."""
    run: int
    state: SearchState
    on_evaluation: OnEvaluation | None
    flags: str = ""
    programs: dict[str, Program] = field(default_factory=dict)
    """The programs of the batch in flight, by source digest."""
    stand_ins: dict[str, SlowedTiming] = field(default_factory=dict)
    """By host ('' locally), the fastest verified timing not offered as the best, in the
    order the hosts first timed one."""
    measured_on: dict[str, str] = field(default_factory=dict)
    """Which host timed each program measured on a cluster, by source digest."""
    on_cluster: bool = False
    """Whether the programs are timed on a cluster's measuring hosts."""
    descriptions: dict[str, dict[str, Any]] = field(default_factory=dict)
    """On a cluster, the machine description each measuring host sent, by host name."""
    best_host: str = ""
    """On a cluster, the host among whose timings the tune's best is taken ('' until the
    first verified timing chooses it)."""
    host_best_s: float = math.inf
    """The best host's fastest verified time in this tune."""
    described: set[str] = field(default_factory=set)
    """The hosts whose description this tune has recorded."""

    def record(self, e: Evaluation) -> None:
        host = self.measured_on.pop(e.source_digest, "")
        eid = self.rec.add_evaluation(
            self.run, {**e.to_json(), "measured_on": host} if host else e.to_json(), self.flags)
        if self.on_cluster and host and host not in self.described:
            record_host(self.rec, self.where[1], host, self.descriptions.get(host, {}))
            self.described.add(host)
        prog = self.programs.pop(e.source_digest, None)
        if prog is not None and e.ok and e.median_s is not None:
            # The search has already taken a new best time into its state: only a new best's
            # source goes to the records (never a slowed timing's, nor another host's).
            if not e.slowed and self.offers_best(host, e.median_s):
                self.rec.offer_best(*self.where, eid, e.median_s, json.dumps(e.decisions),
                                    prog.source, prog.entry, self.flags)
            elif e.slowed or host != self.best_host:
                kept = self.stand_ins.get(host)
                if kept is None or e.median_s < kept.time_s:
                    self.stand_ins[host] = SlowedTiming(eid, e.median_s,
                                                        json.dumps(e.decisions), prog, e.slowed)
        if self.on_evaluation is not None:
            self.on_evaluation(e, self.state)

    def offers_best(self, host: str, time_s: float) -> bool:
        """Whether a verified time taken on ``host`` ('' here) is offered as the best: the
        search's new best time locally; on a cluster, the best host's new best time, so that
        timings of different hosts never compete for one best (the search still prunes with
        the fastest of all: hosts of one machine kind time alike, within their noise)."""
        if not self.on_cluster:
            return time_s <= self.state.best_time
        if not self.best_host and host:
            self.best_host = host
        if host != self.best_host or time_s >= self.host_best_s:
            return False
        self.host_best_s = time_s
        return True

    def choose_host(self, measuring: set[str], descriptions: dict[str, dict[str, Any]],
                    best: BestRow | None, name: str) -> None:
        """On a cluster (``measuring``: its measuring hosts; ``descriptions``: what each
        sent, filled as results come): the best is taken among the timings of this host
        where it measures, else of the host that timed the recorded best where it still
        measures, else of the host of the first verified timing. A recorded best of another
        host is said."""
        self.on_cluster, self.descriptions = True, descriptions
        here = host_name()
        recorded = evaluation_host(self.rec, best.evaluation_id) if best is not None else ""
        for candidate in (here, recorded):
            if candidate and candidate in measuring:
                self.best_host = candidate
                break
        if recorded and recorded != self.best_host:
            chosen = self.best_host or "the first host to verify one"
            warnings.warn(f"{name}: the recorded best was timed on {recorded}; this tune "
                          f"takes its best among the timings of {chosen}, which replaces "
                          f"the recorded one only where faster", stacklevel=5)

    def slowed_stand_in(self, name: str) -> BestRow | None:
        """Where no timing was offered as the best, the fastest of one host stands in, with a
        warning, until a later run times one: every verified time of a tune taken on a
        slowed machine, or on a cluster, none by the best's host (the best host's stands in
        where it has one, else the first host's to time one)."""
        if not self.stand_ins:
            return None
        host = self.best_host if self.best_host in self.stand_ins else next(iter(self.stand_ins))
        kept = self.stand_ins[host]
        self.rec.offer_best(*self.where, kept.eid, kept.time_s, kept.decisions,
                            kept.prog.source, kept.prog.entry, self.flags)
        if kept.slowed:
            warnings.warn(f"{name}: every implementation was timed while the machine ran "
                          "slowed (another process or guest sharing a core), even after "
                          "retiming; the best time recorded is too high: tune again with "
                          "--continue on a quiet machine", stacklevel=4)
        else:
            warnings.warn(f"{name}: {self.best_host} verified no timing; the best is taken "
                          f"among the timings of {host}", stacklevel=4)
        return self.rec.best(*self.where)


# -- the run ------------------------------------------------------------------------------------


def open_runner(req: Request) -> Any:
    """What builds, checks and times the programs of ``req``: the target's runner, or with a
    cluster a :class:`ClusterEvaluator` (connected here: an unreachable cluster, or one
    without a worker for this machine, fails before a run is recorded)."""
    refs = {req.kernel.name: req.reference} if req.reference is not None else None
    timing = TimingOptions(flush_cache=req.cold_cache)
    if req.cluster is not None:
        return ClusterEvaluator(req.cluster, key=host_machine()["key"], seed=req.seed,
                                timing=timing, references=refs,
                                compile_timeout_s=COMPILE_LIMIT_S,
                                describe=req.plug.host_describer())
    return req.plug.evaluator(seed=req.seed, timing=timing, references=refs,
                              compile_timeout_s=COMPILE_LIMIT_S)


def run_search(req: Request, space: Space, model: Model, stop: Stop, recorder: Recorder,
               best: BestRow | None, params: dict[str, Any],
               seen: set[str], runner: Any = None) -> TuneResult:
    """Search ``space`` with ``runner`` (default: the target's, made here) until ``stop``,
    starting from the implementations transferred from related kernels and the target's
    first batch; the runner is closed at the end."""
    plug, state, options = req.plug, recorder.state, dict(req.search_options)
    runner = runner if runner is not None else open_runner(req)
    if isinstance(runner, ClusterEvaluator):
        recorder.measured_on = runner.measured_on
        recorder.choose_host(runner.measuring_hosts, runner.descriptions, best,
                             req.kernel.name)
    with runner:
        recorder.flags = plug.flags_text(runner)
        root = space.root()
        root_bound = model.bound(root).time_s if isinstance(root, Candidate) else 0.0

        def evaluate(progs: list[Program]) -> list[Measurement]:
            recorder.programs.update((p.digest, p) for p in progs)
            until = state.deadline if math.isfinite(state.deadline) else None
            limit, abandon = batch_limit(state.best_time, root_bound), batch_abandon(
                state.best_time)
            if isinstance(runner, ClusterEvaluator):
                return runner.evaluate(progs, timeout_s=limit, abandon_s=abandon, until=until)
            return plug.evaluate(runner, progs, timeout_s=limit, abandon_s=abandon,
                                 until=until)

        kid, mid, stored = recorder.where
        initial = transferred(recorder.rec, space, req.kernel, params, kid, mid, stored,
                              req.seed, seen) if req.transfer and best is None else []
        first = plug.initial(space, model, runner, seed=req.seed, batch=req.batch,
                             recorded=best is not None, sketches=req.sketches)
        if req.search == "mcts" and first.seeds:
            options = {"seeds": first.seeds, **options}
        return tune_space(space, model, evaluate, stop, strategy=req.search, seed=req.seed,
                          batch=req.batch, known_best=state.best_time,
                          on_evaluation=recorder.record, skip=seen, state=state,
                          prepare=runner.prepare, printer=plug.print_program,
                          initial=initial + first.candidates, **options)


def run_options(req: Request, space: Space, stop: Stop) -> dict[str, Any]:
    """The options a run records: strategy, batch, stop condition, and what differs from the
    defaults."""
    options = {"search": req.search, "batch": req.batch, "stop": str(stop),
               **req.search_options}
    if req.cold_cache:
        options["cold_cache"] = True
    if req.choice_order != "default":
        options["choice_order"] = list(space.sdef.choice_order)
    return options


def tune_recorded(req: Request, db: str | Path | None) -> Tuned:
    """The best implementation of ``req.kernel``: the recorded one unless asked to continue,
    else the best after a search whose every evaluation is recorded as it completes."""
    kernel, target = req.kernel, req.plug.name
    params = kernel_params(kernel)
    stored = records_target(target, req.cold_cache)
    with Records(db) as rec:
        kid = rec.kernel_id(kernel, params)
        mid = rec.machine_id(host_machine())
        best = rec.best(kid, mid, stored)
        if best is not None and not req.continue_:
            return from_record(kernel, best, len(rec.evaluations(kid, mid)), target,
                               stacklevel=4)
        space = req.plug.space(kernel, req.choice_order)
        model = req.model or req.plug.model(kernel)
        stop = req.stop or budget_stop(req.budget_s, req.evaluations)
        runner = open_runner(req) if req.cluster is not None else None
        try:
            run = rec.start_run(kid, mid, stored, req.search, run_options(req, space, stop),
                                req.seed)
        except BaseException:
            if runner is not None:
                runner.close()
            raise
        state = SearchState(best_time=best.time_s if best else math.inf)
        recorder = Recorder(rec, (kid, mid, stored), run, state, req.on_evaluation)
        result: TuneResult | None = None
        status = "interrupted"
        try:
            result = run_search(req, space, model, stop, recorder, best, params,
                                rec.seen_decisions(kid, mid, stored), runner)
            status = "finished"
        finally:
            rec.finish_run(run, result.stopped_by if result is not None else "interrupted",
                           status=status,
                           space_lower_bound_s=result.space_lower_bound_s if result else None,
                           lower_bound_history=result.lower_bound_history if result else ())
        best = rec.best(kid, mid, stored) or recorder.slowed_stand_in(kernel.name)
        total = len(rec.evaluations(kid, mid))
    return final_result(req, best, total, result)


def final_result(req: Request, best: BestRow | None, total: int,
                 result: TuneResult | None) -> Tuned:
    """The :class:`Tuned` of the best recorded after a run, or a RuntimeError naming what
    the evaluations ended as where none was verified."""
    kernel = req.kernel
    assert result is not None
    if best is None:
        failures = {e.status for e in result.evaluations}
        raise RuntimeError(f"no implementation of {kernel.name} was verified in "
                           f"{len(result.evaluations)} evaluations (statuses: "
                           f"{', '.join(sorted(failures)) or 'none'})")
    tuned = from_record(kernel, best, total, req.plug.name, stacklevel=5)
    tuned.result = result
    tuned.reference = reference_kind(kernel, req.reference)
    return tuned


# -- the entry point ----------------------------------------------------------------------------


def tune(kernel: Kernel, *, budget: float | str | None = 60.0,
         evaluations: int | None = None,
         stop: Stop | None = None, target: str = "cpu", search: str = "mcts", seed: int = 0,
         db: str | Path | None = None, continue_: bool = False, batch: int = 4,
         model: Model | None = None, reference: Callable[..., dict[str, Any]] | None = None,
         on_evaluation: Callable[[Evaluation, SearchState], None] | None = None,
         transfer: bool = True, sketches: bool = True, reassociate: bool = False,
         cold_cache: bool = False, choice_order: str | Sequence[str] = "default",
         gap: float | str | None = None, cluster: Any = None,
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
    and timed on the CUDA device (:mod:`partita.targets.gpu.cuda`), and bounded by the GPU
    model (the H100's figures); without a usable device it raises
    :class:`~partita.targets.gpu.cuda.CudaUnavailable` (a RuntimeError) saying why. The
    returned object's source is then CUDA (``code_path`` ends in ``.cu``); it cannot be called.
    What depends on the target is asked of it (:class:`partita.targets.base.Target`).

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

    ``gap`` (a factor of at least 1) stops the search as soon as the best time is within that
    factor of the optimality certificate (``result.space_lower_bound_s``: no implementation
    left in the space runs faster), or at the budget, whichever comes first; ``gap=1`` with
    ``search="bnb"`` runs until the best found is proven the best of the space.

    ``cluster`` (a Dask scheduler's address or ``distributed.Client``): candidates are built
    and timed on its workers for this machine (:mod:`partita.runtime.cluster`), each record
    names the host that timed it, and one the cluster lost has status ``lost``.
    """
    plug, budget_s = check_request(
        kernel, target=target, budget=budget, evaluations=evaluations, seed=seed,
        cold_cache=cold_cache, choice_order=choice_order, reassociate=reassociate, stop=stop,
        cluster=cluster)
    if gap is not None:
        if reassociate:
            raise ValueError("gap stops one search, and reassociate runs one per order of the "
                             "sum: give one or the other")
        stop = (stop or budget_stop(budget_s, evaluations)) | GapReached(parse_gap(gap))
    if reassociate:
        return tune_reassociated(
            kernel, tune, lambda kv: model or plug.model(kv), budget=budget_s,
            evaluations=evaluations, space_of=lambda kv: plug.space(kv, choice_order),
            continue_=continue_, target=target, search=search, seed=seed, db=db,
            batch=batch, model=model, reference=reference, on_evaluation=on_evaluation,
            transfer=transfer, sketches=sketches, cold_cache=cold_cache,
            choice_order=choice_order, cluster=cluster, **search_options)
    return tune_recorded(Request(
        kernel, plug, budget_s, evaluations, stop, search, seed, batch, continue_, model,
        reference, on_evaluation, transfer, sketches, cold_cache, choice_order,
        search_options, cluster), db)
