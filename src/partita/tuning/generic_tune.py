"""Tuning a size-generic kernel, and reading one back from the records.

:func:`tune_generic` tunes the static kernel at each training size, keeps the distinct
winners as versions over dynamic sizes (:mod:`~partita.tuning.generic`), checks and times
each at every training size, tunes the dispatcher's thresholds
(:func:`~partita.tuning.thresholds.tune_thresholds`) and records the result; a later tune of
the same kernel reuses what the records hold (:mod:`~partita.tuning.generic_store`).
:func:`load_generic` prints a recorded kernel again from its decisions.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, overload

from partita.codegen.expr import CodegenError
from partita.codegen.program import Program, signature
from partita.db import GenericRow, Records
from partita.ir.kernel import Kernel
from partita.kernels.registry import get_spec
from partita.kernels.registry import kernel as library_kernel
from partita.runtime.compile import Compiler
from partita.search.stop import parse_duration
from partita.space.candidate import Candidate, DeadEnd, Decision
from partita.space.decl import SpaceError
from partita.targets import get as get_target
from partita.tuning.chain import (
    Chain,
    Property,
    candidate_properties,
    choose_chain,
    property_value,
)
from partita.tuning.dispatch import (
    Dataset,
    declaration,
    dispatcher_source,
    load_function,
    per_call,
    work_names,
)
from partita.tuning.generic import (
    GenericTuned,
    Sizes,
    TrainingRun,
    Version,
    compile_versions,
    dynamic_kernel,
    kernel_sizes,
    parse_train,
    replay_version,
    sizes_text,
    static_sizes,
)
from partita.tuning.generic_store import (
    Recorded,
    RecordedReplay,
    Timings,
    Winner,
    decisions_key,
    versions_key,
)
from partita.tuning.generic_tiles import fastest_right, tile_mappings
from partita.tuning.pipeline import tune
from partita.tuning.thresholds import (
    INFINITY,
    Interval,
    Run,
    ThresholdResult,
    tune_thresholds,
)
from partita.tuning.tuned import StaleRecord, host_machine, kernel_params, records_target


class Datasets(Sequence[Dataset]):
    """The training datasets, each made (inputs, expected outputs) only when first needed:
    a tune that reuses every timing of a size never computes its reference."""

    def __init__(self, dyn: Kernel, name: str, fixed: dict[str, Any], sizes: list[Sizes],
                 seed: int) -> None:
        self.dyn, self.name, self.fixed, self.seed = dyn, name, fixed, seed
        self.sizes = sizes
        self.made: dict[int, Dataset] = {}

    def full(self, sizes: Sizes) -> Sizes:
        """The kernel's sizes at the parameters ``sizes`` (derived sizes included)."""
        return kernel_sizes(self.name, self.fixed, sizes)

    def __len__(self) -> int:
        return len(self.sizes)

    @overload
    def __getitem__(self, index: int) -> Dataset: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Dataset]: ...

    def __getitem__(self, index: int | slice) -> Dataset | Sequence[Dataset]:
        if isinstance(index, slice):
            return [self[i] for i in range(len(self))[index]]
        if index not in self.made:
            s = self.sizes[index]
            static = library_kernel(self.name, **self.fixed, **s)
            self.made[index] = Dataset.make(self.dyn, static, self.full(s), self.seed)
        return self.made[index]

    def __iter__(self) -> Iterator[Dataset]:
        return (self[i] for i in range(len(self)))


def data_sizes(data: Sequence[Dataset]) -> list[Sizes]:
    """The sizes of the datasets, without making those not yet made."""
    return list(data.sizes) if isinstance(data, Datasets) else [d.sizes for d in data]


def data_kernel_sizes(data: Sequence[Dataset]) -> list[Sizes]:
    """The kernel's sizes of the datasets (derived sizes included), without making them."""
    if isinstance(data, Datasets):
        return [data.full(s) for s in data.sizes]
    return [d.sizes for d in data]


def generic_kernel(kernel_name: str, target: str, fixed: dict[str, Any],
                   example: Sizes | None = None) -> tuple[list[str], dict[str, Any], Kernel]:
    """(the dynamic sizes, the fixed parameters resolved, the kernel over dynamic sizes) of
    the library kernel ``kernel_name`` with the parameters ``fixed``."""
    if get_target(target).languages[0] != "c":
        raise ValueError(f"size-generic kernels are C called in process; the {target} target "
                         f"prints {get_target(target).languages[0]}")
    spec = get_spec(kernel_name)
    dynamic = [p.name for p in spec.params if p.kind == "size" and p.name not in fixed]
    kept = [p for p in spec.params if p.name in dynamic and p.name in spec.generic_static]
    if kept:
        raise ValueError(f"kernel {kernel_name!r}: {kept[0].name} cannot be dynamic (a "
                         f"size-generic {kernel_name} keeps it static): give it, e.g. "
                         f"{kept[0].name}={kept[0].default}")
    if not dynamic:
        raise ValueError(f"kernel {kernel_name!r}: every size is fixed; nothing is dynamic")
    if example is None:
        example = {p.name: int(p.default) for p in spec.params if p.name in dynamic}
    fixed = {k: v for k, v in spec.resolve({**fixed, **example}).items() if k in fixed}
    return dynamic, fixed, dynamic_kernel(kernel_name, dynamic, fixed, example)


STATIC_SHARE = 0.8
"""The share of a size-generic tune's budget that its static tunes split. The versions'
replays, checks, timings and thresholds come after them: 75 s after 240 s of static tunes for
a conv2d trained on six layer shapes, which put the whole tune over a quarter of the time of
ten shapes tuned alone for 120 s each."""


def tune_generic(kernel_name: str, train: Sequence[Any], budget: float | str = 60.0, *,
                 evaluations: int | None = None, db: str | Path | None = None, seed: int = 0,
                 measure_s: float = 0.05, tune_options: dict[str, Any] | None = None,
                 target: str = "cpu", **fixed: Any) -> GenericTuned:
    """Tune the library kernel ``kernel_name`` for any size of its dynamic sizes (those of
    its size parameters not given in ``fixed``).

    ``train`` lists the training sizes: dicts of the dynamic sizes, or tuples of them in the
    kernel's parameter order. The static kernel is tuned at each (:data:`STATIC_SHARE` of
    ``budget`` split evenly, ``evaluations`` each if given; with the records in ``db``, as
    :func:`~partita.tuning.tune`, which returns a recorded best at once; ``tune_options``
    go to it too, e.g. ``search`` or ``model``); the distinct winners become versions over
    dynamic sizes, joined by a C dispatcher whose thresholds on the work are tuned on the
    training sizes (each run timed in process for ``measure_s`` seconds, warm-up first).
    ``fixed`` gives the kernel's other parameters (a size given there is static). The
    versions and the dispatcher are C called in process: ``target`` must print C.

    The result is recorded in ``db``. A kernel recorded before is refined: its training
    sizes join ``train`` (the result lists them all), a recorded size is not tuned again
    (the static share is split among the new ones), the new winners join the versions, the
    thresholds are tuned again over every size, and every timing the records hold for the
    same versions is reused (:mod:`~partita.tuning.generic_store`)."""
    spec_dynamic = [p.name for p in get_spec(kernel_name).params
                    if p.kind == "size" and p.name not in fixed]
    sizes = parse_train(train, spec_dynamic) if spec_dynamic else []
    dynamic, fixed, dyn = generic_kernel(kernel_name, target, fixed,
                                         sizes[0] if sizes else None)
    total = parse_duration(budget)
    stored = records_target(target)
    with Records(db) as rec:
        ids = (rec.kernel_id(dyn, kernel_params(dyn)), rec.machine_id(host_machine()))
        recorded = Recorded(rec.generic(*ids, stored))
        for s in recorded.sizes:  # a static tune continued since: its new best is the winner
            static = library_kernel(kernel_name, **fixed, **s)
            best = rec.best(rec.kernel_id(static, kernel_params(static)), ids[1], stored)
            if best is not None:
                recorded.update_winner(Winner(s, list(best.decisions), best.time_s))
    every = recorded.sizes + [s for s in sizes if s not in recorded.sizes]
    new = [s for s in every if recorded.winner(s) is None]
    winners = []
    for s in every:
        w = recorded.winner(s)
        if w is None:
            t = tune(library_kernel(kernel_name, **fixed, **s),
                     budget=total * STATIC_SHARE / len(new),
                     target=target, evaluations=evaluations, db=db, seed=seed,
                     **(tune_options or {}))
            w = Winner(s, list(t.decisions), t.time)
        winners.append(w)
    data = Datasets(dyn, kernel_name, fixed, every, seed)
    timings = Timings()
    versions, failures = build_versions(dyn, kernel_name, winners,
                                        [s.name for s in dyn.sizes], seed, target, data.full,
                                        lambda s: data[every.index(s)], measure_s,
                                        recorded)
    versions, times = check_versions(dyn, versions, data, failures, measure_s, recorded,
                                     timings)
    built = {v.entry: decisions_key(v.decisions) for v in versions}
    versions, times, chain = order_versions(dyn, kernel_name, versions, times, data, target)
    now = {decisions_key(v.decisions): v.entry for v in versions}
    timings.rename({old: now[key] for old, key in built.items()})
    generic = dispatch(dyn, kernel_name, versions, data, measure_s, recorded, timings,
                       chain.properties, chain.cuts)
    generic.fixed, generic.dynamic, generic.tuned_sizes = dict(fixed), dynamic, new
    generic.failures = failures + generic.failures
    key = versions_key([v.decisions for v in versions], chain.properties)
    training_runs(generic, winners, data, times, measure_s, recorded, key)
    with Records(db) as rec:
        rec.save_generic(*ids, stored, generic_record(generic, key))
    return generic


def build_versions(dyn: Kernel, name: str, winners: Sequence[Winner], names: Sequence[str],
                   seed: int, target: str = "cpu",
                   full: Callable[[Sizes], Sizes] | None = None,
                   dataset: Callable[[Sizes], Dataset] | None = None, measure_s: float = 0.05,
                   recorded: Recorded | None = None) -> tuple[list[Version], list[str]]:
    """The distinct winners replayed over dynamic sizes and printed, ordered by the largest
    work each won at (largest first: the first branch of the chain); failures named.
    ``full`` gives the kernel's sizes at a winner's (default: the same). With ``dataset``
    (a winner's training size to its dataset), a winner with tile sizes the dynamic space
    lacks is also replayed with them mapped to their neighbours, and the fastest right
    replay at its own size is kept (:mod:`~partita.tuning.generic_tiles`), unless
    ``recorded`` holds the replay chosen for the same winner before."""
    plug = get_target(target)
    space = plug.space(dyn)
    by_source: dict[str, tuple[Version, Candidate]] = {}
    failures: list[str] = []
    names = [n for n in names if n in work_names(dyn)]

    def size_work(w: Winner) -> int:
        return property_value(tuple(names), {**static_sizes(dyn), **(full or dict)(w.sizes)})

    for w in sorted(winners, key=lambda w: -size_work(w)):
        try:
            known = recorded.replay(w) if recorded is not None else None
            leaf, decisions, dropped, completed = replayed_winner(
                dyn, plug, space, w, seed, dataset, measure_s, known)
        except Exception as exc:  # any failure drops this winner; it is reported
            failures.append(f"the winner at {sizes_text(w.sizes)} gives no version over "
                            f"dynamic sizes: {exc}")
            continue
        source = plug.print_program(leaf, f"{name}_generic").source
        if source in by_source:
            by_source[source][0].won_at.append(w.sizes)
            continue
        version = Version("", "", decisions, [w.sizes], dropped, completed)
        by_source[source] = (version, leaf)
    versions = []
    for i, (v, leaf) in enumerate(by_source.values()):  # entries numbered in branch order
        v.entry = f"{name}_generic_v{i + 1}"
        v.source = plug.print_program(leaf, v.entry).source
        versions.append(v)
    if not versions:
        raise RuntimeError(f"{name}: no winner replays over dynamic sizes: "
                           + "; ".join(failures))
    return versions, failures


def replayed_winner(dyn: Kernel, plug: Any, space: Any, w: Winner, seed: int,
                    dataset: Callable[[Sizes], Dataset] | None, measure_s: float,
                    known: RecordedReplay | None = None
                    ) -> tuple[Candidate, list[Any], list[str], list[str]]:
    """Winner ``w`` replayed over dynamic sizes: (implementation, its decisions as JSON,
    dropped, completed). Its decisions as they are, and, with ``dataset``, with its missing
    tile sizes mapped to their neighbours (each mapping named in the dropped decisions): the
    fastest of those that compute the right outputs at its training size. ``known``: the
    version recorded for this winner, replayed as it is where it still replays whole (its
    decisions kept in their recorded order, which keys its recorded timings)."""
    entry = f"{dyn.name}_alt"
    if known is not None:
        leaf, dropped, completed, _ = printable_version(plug, space, known.decisions, seed,
                                                        entry)
        if not dropped and not completed:
            return leaf, list(known.decisions), known.dropped, known.completed
    leaf, dropped, completed, source = printable_version(plug, space, w.decisions, seed,
                                                         f"{entry}0")
    root = space.root()
    if dataset is None or isinstance(root, DeadEnd):
        return leaf, [d.to_json() for d in leaf.decisions], dropped, completed
    replays = [(leaf, dropped, completed, source)]
    for m in tile_mappings(root, w.decisions):
        try:
            alt = printable_version(plug, space, m.decisions, seed, f"{entry}{len(replays)}")
        except CodegenError:
            continue
        replays.append((alt[0], m.mapped + alt[1], alt[2], alt[3]))
    if len(replays) > 1:
        best, _ = fastest_right(dyn, [(f"{entry}{i}", r[3]) for i, r in enumerate(replays)],
                                dataset(w.sizes), measure_s)
        leaf, dropped, completed, _ = replays[best or 0]
    return leaf, [d.to_json() for d in leaf.decisions], dropped, completed


def printable_version(plug: Any, space: Any, decisions: list[Any], seed: int, entry: str
                      ) -> tuple[Candidate, list[str], list[str], str]:
    """A winner replayed over dynamic sizes and printed: (implementation, dropped, completed,
    source). Where the printer refuses the replay (a vector access to a temporary whose
    stride became dynamic: a layout that put the vector dimension outside a dimension of
    unknown extent), the decisions naming the object it refuses are dropped, then the vector
    loops too, and the rest replayed again."""
    wanted = list(decisions)
    for attempt in range(3):
        leaf, dropped, completed = replay_version(space, wanted, seed)
        try:
            source = plug.print_program(leaf, entry).source
        except CodegenError as exc:
            if attempt == 2:
                raise
            culprit = str(exc).split(":")[0]
            texts = [decision_text(d) for d in wanted]
            keep = [culprit not in t and (attempt == 0 or "= VECTOR" not in t) for t in texts]
            wanted = [d for d, k in zip(wanted, keep, strict=True) if k]
            continue
        gone = [decision_text(d) for d in decisions if d not in wanted]
        return leaf, gone + dropped, completed, source
    raise AssertionError("unreachable")


def decision_text(d: Any) -> str:
    return str(d if isinstance(d, Decision) else Decision.from_json(d))


def check_versions(dyn: Kernel, versions: list[Version], data: Sequence[Dataset],
                   failures: list[str], measure_s: float, recorded: Recorded | None = None,
                   timings: Timings | None = None
                   ) -> tuple[list[Version], list[list[float | None]]]:
    """The versions that compute the right outputs at every training size (the others
    dropped, named in ``failures``), and each one's time per training size: the time
    ``recorded`` for the same decisions at that size where there is one (it was checked
    then), else checked and timed now."""
    recorded, timings = recorded or Recorded(None), timings if timings is not None else Timings()
    params, sizes = signature(dyn), data_sizes(data)
    library: Path | None = None
    good: list[Version] = []
    rows: list[list[float | None]] = [[] for _ in sizes]
    fresh: list[list[tuple[int, Any, list[float]]]] = [[] for _ in sizes]
    for v in versions:
        fn: Any = None
        times: list[float | None] = []
        timed: list[tuple[int, Any, list[float]]] = []
        for i, s in enumerate(sizes):
            known = recorded.version_time(v.decisions, s)
            if known is not None:
                timings.reused += 1
                times.append(known)
                continue
            if fn is None:
                library = library or compile_versions(dyn, versions)
                ffi, fn = load_function(library, v.entry, declaration(v.entry, params))
            wrong, took = data[i].run_checked(fn, data[i].arguments(ffi, dyn), measure_s)
            if wrong:
                failures.append(f"{v.entry} is wrong at {sizes_text(s)}: {wrong[0]}; dropped")
                break
            assert took is not None  # run_checked times what it finds right
            times.append(took)
            timed.append((i, (fn, data[i].arguments(ffi, dyn)), [took]))
            timings.fresh.append((v.entry, s))
        else:
            good.append(v)
            for row, t in zip(rows, times, strict=True):
                row.append(t)
            for i, call, ts in timed:
                fresh[i].append((len(good) - 1, call, ts))
    for i, calls in enumerate(fresh):
        alternate_timings(calls, measure_s)
        for position, _, ts in calls:
            rows[i][position] = statistics.median(ts)
    if not good:
        raise RuntimeError(f"{dyn.name}: no version over dynamic sizes computes the right "
                           "outputs: " + "; ".join(failures))
    return good, rows


TIMING_ROUNDS = 3
"""Rounds in which the versions timed at a training size are timed again, one after the
other, before the chain is chosen from their medians (with the first timing). Timed one
version after another, each once, the choice followed the host: on a 2-core virtual
machine the same code ran 2.8 ms in one process and 4.4 ms in the next, minutes apart, and
a size-generic conv2d took the same version at every training size."""


def alternate_timings(calls: list[tuple[int, Any, list[float]]], measure_s: float) -> None:
    """Each call (position, (function, arguments), times) timed :data:`TIMING_ROUNDS` more
    times, the calls alternating, its times appended."""
    if len(calls) < 2:
        return
    for _ in range(TIMING_ROUNDS):
        for _, (fn, args), ts in calls:
            ts.append(per_call(fn, args, measure_s))


def reduction_sizes(kernel: Kernel) -> list[str]:
    """The sizes of the kernel's reduction dimensions (``k`` for a matmul)."""
    red = kernel.reduction_dims
    return [str(ld.size) for ld in kernel.logical_dims
            if isinstance(ld.size, str) and any(d in red for d in kernel.dims_of(ld.name))]


def order_versions(dyn: Kernel, name: str, versions: list[Version],
                   times: list[list[float | None]], data: Sequence[Dataset],
                   target: str = "cpu") -> tuple[list[Version], list[list[float | None]], Chain]:
    """The versions in the order of the chain built from their training ``times``
    (:func:`~partita.tuning.chain.choose_chain`), renamed and printed again in that order
    where it changed, their times in the same order, and the chain over the new order:
    each branch's property and cut, and after the branches the chain needs, the versions
    it does not, at an infinite cut (never chosen) before the ``else``, kept so that the
    records keep their times for a later refinement."""
    if len(versions) == 1:
        return versions, times, Chain([0], [], [list(range(len(times)))], [])
    work_of = tuple(work_names(dyn))
    candidates = candidate_properties(work_of, reduction_sizes(dyn))
    values = [{p: property_value(p, {**static_sizes(dyn), **f}) for p in candidates}
              for f in data_kernel_sizes(data)]
    chain = choose_chain(times, values, candidates)
    unused = [i for i in range(len(versions)) if i not in chain.order]
    order = chain.order[:-1] + unused + chain.order[-1:]
    placed = Chain(list(range(len(order))), chain.properties + [work_of] * len(unused),
                   chain.taken[:-1] + [[]] * len(unused) + chain.taken[-1:],
                   chain.cuts + [INFINITY] * len(unused))
    rows = [[row[i] for i in order] for row in times]
    plug = get_target(target)
    space = plug.space(dyn) if order != list(range(len(versions))) else None
    ordered = []
    for position, i in enumerate(order):
        v = versions[i]
        entry = f"{name}_generic_v{position + 1}"
        if space is not None and entry != v.entry:
            cand = space.replay(v.decisions)
            if isinstance(cand, DeadEnd):  # it was printed from these decisions just now
                raise AssertionError(f"{v.entry} no longer replays: {cand}")
            v = Version(entry, plug.print_program(cand, entry).source, v.decisions, v.won_at,
                        v.dropped, v.completed)
        ordered.append(v)
    return ordered, rows, placed


def tune_dispatch(dyn: Kernel, entry: str, versions: Sequence[Version],
                  data: Sequence[Dataset], measure_s: float, recorded: Recorded | None = None,
                  timings: Timings | None = None,
                  properties: Sequence[Property] | None = None,
                  cuts: Sequence[float] = ()) -> ThresholdResult:
    """The thresholds of the dispatcher, tuned on the training datasets: each run calls the
    tuning entry (thresholds as an argument) once to check its outputs, then times it. A run
    ``recorded`` on the same versions and properties with the same thresholds is reused
    instead. ``properties[i]``: what branch ``i`` compares (default: the work);
    ``cuts[i]``, where given: the threshold kept where the training sizes' runs disagree
    on it (infinite: the branch stays at infinity, untuned)."""
    recorded, timings = recorded or Recorded(None), timings if timings is not None else Timings()
    props = ([tuple(p) for p in properties] if properties
             else [tuple(work_names(dyn))] * (len(versions) - 1))
    key = versions_key([v.decisions for v in versions], list(properties or ()))
    names = [f"T{i + 1}" for i in range(len(versions) - 1)]
    tuned = [n for i, n in enumerate(names) if i >= len(cuts) or cuts[i] != INFINITY]
    sizes, full = data_sizes(data), data_kernel_sizes(data)
    loaded: list[Any] = []

    def function() -> tuple[Any, Any]:
        if not loaded:  # compiled at the first run not found in the records
            source = dispatcher_source(dyn, entry, [v.entry for v in versions],
                                       properties=props)
            tuning = Program(dyn, f"{entry}_tuning", source, signature(dyn))
            library = compile_versions(dyn, versions, tuning)
            loaded.extend(load_function(library, f"{entry}_tuning", declaration(
                f"{entry}_tuning", signature(dyn), tuning=True)))
        return loaded[0], loaded[1]

    def run(index: Any, setting: dict[str, float]) -> Run:
        s = sizes[index]
        given = [None if setting.get(n, math.inf) == math.inf else setting[n] for n in names]
        at = {**static_sizes(dyn), **full[index]}
        compared: dict[str, tuple[int, ...]] = {
            n: (property_value(p, at),) for n, p in zip(names, props, strict=True)}
        found, took = recorded.threshold_run(key, s, given)
        if found:
            timings.reused += 1
        else:
            ffi, fn = function()
            d = data[index]
            limits = ffi.new("int64_t[]", [(1 << 63) - 1 if t is None else math.ceil(t)
                                           for t in given])
            took = d.run_checked(fn, [limits, *d.arguments(ffi, dyn)], measure_s)[1]
            timings.fresh.append(("dispatcher", s))
        timings.threshold_runs.append({"sizes": s, "thresholds": given, "time_s": took})
        return Run(took, compared)

    fallback = {n: c for n, c in zip(names, cuts, strict=False) if n in tuned}
    result = (tune_thresholds(tuned, list(range(len(sizes))), run, fallback) if tuned
              else ThresholdResult({}, {}, {}, 0))
    for n in names:  # the branches held at infinity, as the tuner reports a branch never taken
        if n not in tuned:
            result.intervals[n], result.values[n] = Interval(math.inf, math.inf), math.inf
    result.intervals = {n: result.intervals[n] for n in names}
    result.values = {n: result.values[n] for n in names}
    return result


def dispatch(dyn: Kernel, name: str, versions: list[Version], data: Sequence[Dataset],
             measure_s: float, recorded: Recorded, timings: Timings,
             properties: Sequence[Property] = (), cuts: Sequence[float] = ()
             ) -> GenericTuned:
    """The size-generic kernel of ``versions`` (branch ``i`` comparing ``properties[i]``,
    the work where none are given; ``cuts``: see :func:`tune_dispatch`): thresholds tuned
    (with more than one version), the dispatcher printed with them and everything
    compiled."""
    entry = f"{name}_generic"
    result: ThresholdResult | None = None
    thresholds: list[float] = []
    if len(versions) > 1:
        result = tune_dispatch(dyn, entry, versions, data, measure_s, recorded, timings,
                               properties, cuts)
        thresholds = [result.values[f"T{i + 1}"] for i in range(len(versions) - 1)]
    props = [tuple(p) for p in properties]
    source = dispatcher_source(dyn, entry, [v.entry for v in versions], thresholds, props)
    library = compile_versions(dyn, versions, Program(dyn, entry, source, signature(dyn)))
    return GenericTuned(name, dyn, {}, [], versions, thresholds, entry, source, library,
                        result, [], list(result.failures) if result else [],
                        list(result.warnings) if result else [], timings, properties=props)


def training_runs(generic: GenericTuned, winners: Sequence[Winner], data: Sequence[Dataset],
                  times: Sequence[list[float | None]], measure_s: float, recorded: Recorded,
                  key: str) -> None:
    """The training runs of ``generic``: per size, the dispatcher's choice and time (the
    time recorded on the same versions where it chose the same version, else timed)."""
    dyn, timings = generic.kernel, generic.timings
    for i, (w, row) in enumerate(zip(winners, times, strict=True)):
        chosen = generic.version_for(w.sizes)
        took = recorded.dispatcher_time(key, w.sizes, chosen)
        if took is not None:
            timings.reused += 1
        else:
            ffi, fn = load_function(generic.loaded_library(), generic.entry,
                                    declaration(generic.entry, signature(dyn)))
            took = data[i].run_checked(fn, data[i].arguments(ffi, dyn), measure_s)[1]
            timings.fresh.append(("dispatcher", w.sizes))
        generic.training.append(TrainingRun(w.sizes, w.time, row, chosen, took,
                                            list(w.decisions)))


def generic_record(g: GenericTuned, key: str) -> dict[str, Any]:
    """What :meth:`partita.db.Records.save_generic` keeps of ``g`` (``key``: its versions'
    :func:`~partita.tuning.generic_store.versions_key`)."""
    return {
        "dynamic": g.dynamic, "fixed": g.fixed, "entry": g.entry, "chain": g.chain(),
        "thresholds": [None if t == INFINITY else t for t in g.thresholds],
        "properties": [list(p) for p in g.properties],
        "versions_key": key, "threshold_runs": g.timings.threshold_runs,
        "warnings": g.warnings, "failures": g.failures, "flags": Compiler().flags_text,
        "versions": [{"entry": v.entry, "decisions": v.decisions, "won_at": v.won_at,
                      "dropped": v.dropped, "completed": v.completed,
                      "source_digest": Program(g.kernel, v.entry, v.source, ()).digest}
                     for v in g.versions],
        "training": [{"sizes": t.sizes, "static_decisions": t.static_decisions,
                      "static_time_s": t.static_time, "version_times": t.version_times,
                      "chosen": t.chosen, "dispatcher_time_s": t.dispatcher_time}
                     for t in g.training],
    }


def load_generic(kernel_name: str, *, db: str | Path | None = None, target: str = "cpu",
                 **fixed: Any) -> tuple[GenericTuned, list[str]]:
    """The size-generic kernel recorded for ``kernel_name`` with the parameters ``fixed``
    (its other sizes dynamic) on this machine, each version printed again from its recorded
    decisions (a records file is data: no stored code is compiled), and the entries of the
    versions whose code differs from the code that was timed. A LookupError where nothing is
    recorded; :class:`~partita.tuning.StaleRecord` where the decisions no longer replay."""
    _, _, dyn = generic_kernel(kernel_name, target, fixed)
    with Records(db) as rec:
        row = rec.generic(rec.kernel_id(dyn, kernel_params(dyn)),
                          rec.machine_id(host_machine()), records_target(target))
    if row is None:
        raise LookupError(f"no size-generic {kernel_name} over these dynamic sizes is "
                          "recorded on this machine: tune it first (sizes given as ?, "
                          "--train)")
    return from_row(kernel_name, dyn, row, target)


def from_row(name: str, dyn: Kernel, row: GenericRow, target: str = "cpu"
             ) -> tuple[GenericTuned, list[str]]:
    """The kernel of a record (see :func:`load_generic`)."""
    plug = get_target(target)
    space = plug.space(dyn)
    versions, changed = [], []
    for v in row.versions:
        try:
            cand = space.replay(v.decisions)
        except (ValueError, TypeError, KeyError, SpaceError) as exc:
            raise StaleRecord(f"the recorded decisions of {v.entry} do not replay: {exc}; "
                              "tune it again") from exc
        if isinstance(cand, DeadEnd) or not cand.is_implementation:
            raise StaleRecord(f"the recorded decisions of {v.entry} are no implementation of "
                              "this build's space: tune it again")
        program = plug.print_program(cand, v.entry)
        if program.digest != v.source_digest:
            changed.append(v.entry)
        versions.append(Version(v.entry, program.source, list(v.decisions),
                                [dict(s) for s in v.won_at], list(v.dropped),
                                list(v.completed)))
    thresholds = [INFINITY if t is None else float(t) for t in row.thresholds]
    properties = [tuple(p) for p in row.properties]
    source = dispatcher_source(dyn, row.entry, [v.entry for v in versions], thresholds,
                               properties)
    training = [TrainingRun(dict(t.sizes), t.static_time_s, list(t.version_times), t.chosen,
                            t.dispatcher_time_s, list(t.static_decisions)) for t in row.training]
    g = GenericTuned(name, dyn, dict(row.fixed), list(row.dynamic), versions, thresholds,
                     row.entry, source, None, None, training, list(row.failures),
                     list(row.warnings), properties=properties)
    return g, changed
