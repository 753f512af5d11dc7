"""Size-generic kernels: versions tuned at training sizes, one entry point over any size.

:func:`tune_generic` tunes the static kernel at each training size (most of the budget,
split evenly, every evaluation in the records as with :func:`~partita.tuning.tune`), keeps
the distinct winners, prints each over dynamic sizes, joins them in a C dispatcher
(:mod:`~partita.tuning.dispatch`) and tunes its thresholds on the training sizes with
:func:`~partita.tuning.thresholds.tune_thresholds` (Munksgaard's thesis, "Futhark", ch. 7).

A winner's decisions were taken on the space of the static kernel; replayed on the space of
the kernel with dynamic sizes, most of them apply: tile sizes, loop kinds, loop order, where
temporaries live. Some do not: a decision that only the static size allowed (vectorising a
copy whose extent is now unknown, registers for a tile that may be partial) empties a domain,
and a decision on an object the dynamic space never adds names nothing. Those are dropped
(the replay is lenient) and the choices they leave open are completed by the first
implementation in the space's order (a depth-first descent taking each domain's first value:
the plain loop, the default layout). The decisions that make a version fast (its tiles and
parallel loops) survive; what is dropped is what the printer could only do because the size
was known. Each version's dropped and completed decisions are reported.
"""

from __future__ import annotations

import random
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from partita.codegen.program import Param, Program, prototype, signature
from partita.ir.kernel import Kernel
from partita.ir.types import DType, KernelError
from partita.kernels.registry import get_spec
from partita.report.export import build_flags
from partita.runtime.call import check_array, new_array
from partita.runtime.compile import Compiler
from partita.search.sampling import NoImplementation, random_implementation
from partita.space.candidate import Candidate, DeadEnd, Decision, Space
from partita.tuning.chain import Property, property_text, property_value
from partita.tuning.dispatch import (
    declaration,
    load_function,
    work_names,
)
from partita.tuning.generic_store import Timings
from partita.tuning.thresholds import (
    INFINITY,
    ThresholdResult,
    choose_version,
)
from partita.tuning.tuned import code_dir

Sizes = dict[str, int]


@dataclass
class Version:
    """One version of a size-generic kernel: a static winner replayed over dynamic sizes."""

    entry: str
    source: str
    decisions: list[Any]
    """The version's decisions on the dynamic kernel's space (JSON)."""
    won_at: list[Sizes]
    """The training sizes whose static tune it won."""
    dropped: list[str] = field(default_factory=list)
    """The winner's decisions that do not replay on the dynamic space (a tile size mapped to
    a neighbour the space offers reads ``size(p.2) = 14 -> 8``)."""
    completed: list[str] = field(default_factory=list)
    """The decisions the first completion added for the choices left open."""


@dataclass
class TrainingRun:
    """One training size: the static tune's best time, every version's time over dynamic
    sizes, and the dispatcher's choice and time with the tuned thresholds."""

    sizes: Sizes
    static_time: float | None
    version_times: list[float | None]
    chosen: int
    dispatcher_time: float | None
    static_decisions: list[Any] = field(default_factory=list)
    """The static tune's best decisions (what a refining tune reuses)."""


def parse_train(train: Sequence[Any], names: Sequence[str]) -> list[Sizes]:
    """Training sizes as dicts: each a dict with exactly the dynamic sizes ``names``, or a
    tuple of their values in that order; every value an integer >= 1."""
    if not train:
        raise ValueError("no training size: give at least one")
    out: list[Sizes] = []
    for item in train:
        if isinstance(item, dict):
            given = dict(item)
        else:
            values = tuple(item)
            if len(values) != len(names):
                raise ValueError(f"training size {values}: {len(values)} values for the "
                                 f"{len(names)} dynamic sizes ({', '.join(names)})")
            given = dict(zip(names, values, strict=True))
        if set(given) != set(names):
            raise ValueError(f"training size {given}: give exactly the dynamic sizes "
                             f"{', '.join(names)}")
        for key, v in given.items():
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
                raise ValueError(f"training size {given}: {key} must be an integer >= 1")
        sizes = {n: int(given[n]) for n in names}
        if sizes not in out:
            out.append(sizes)
    return out


def kernel_sizes(name: str, fixed: dict[str, Any], sizes: Sizes) -> Sizes:
    """The sizes of the kernel over dynamic sizes at the dynamic parameters ``sizes``: each
    parameter under its size's name, with the sizes derived from them (a convolution's output
    rows and columns). A ValueError where they derive none (an image smaller than the
    filter)."""
    spec = get_spec(name)
    renamed = dict(spec.size_names)
    out = {renamed.get(k, k): int(v) for k, v in sizes.items()}
    if spec.derived_sizes is not None:
        try:
            out.update(spec.derived_sizes(spec.resolve({**fixed, **sizes})))
        except KernelError as exc:
            raise ValueError(str(exc)) from exc
    return out


def parameter_sizes(name: str, dynamic: Sequence[str], bound: Sizes) -> Sizes:
    """The dynamic parameters of the kernel sizes ``bound`` (the inverse of
    :func:`kernel_sizes` on the parameters)."""
    renamed = dict(get_spec(name).size_names)
    return {x: bound[renamed.get(x, x)] for x in dynamic if renamed.get(x, x) in bound}


def dynamic_kernel(name: str, dynamic: Sequence[str], fixed: dict[str, Any],
                   example: Sizes) -> Kernel:
    """The library kernel ``name`` with the sizes ``dynamic`` known only at call time."""
    spec = get_spec(name)
    resolved = spec.resolve({**fixed, **example})
    for n in dynamic:
        resolved[n] = None
    try:
        return spec.build(**resolved)
    except (TypeError, ValueError, KernelError, ZeroDivisionError) as exc:
        raise ValueError(f"kernel {name!r} cannot be built with dynamic sizes "
                         f"({', '.join(dynamic)}): {exc}") from exc


def first_completion(cand: Candidate, limit: int = 20000) -> Candidate | None:
    """The first implementation below ``cand`` in the space's order (depth first, each
    domain's values in order), or None when ``limit`` candidates lead to none."""
    stack: list[Candidate] = [cand]
    seen = 0
    while stack and seen < limit:
        node = stack.pop()
        seen += 1
        slot = node.first_open_slot()
        if slot is None:
            return node
        children = [c for _, c in node.children(slot) if isinstance(c, Candidate)]
        stack.extend(reversed(children))
    return None


def replay_version(space: Space, decisions: list[Any], seed: int = 0
                   ) -> tuple[Candidate, list[str], list[str]]:
    """A static winner's ``decisions`` on the dynamic ``space``: the implementation, the
    decisions dropped and the decisions added to complete it."""
    wanted = [Decision.from_json(d) if not isinstance(d, Decision) else d for d in decisions]
    replayed = space.replay(wanted, lenient=True)
    if isinstance(replayed, DeadEnd):  # nothing replays: complete from the root
        root = space.root()
        if isinstance(root, DeadEnd):
            raise ValueError(f"the dynamic space has no implementation: {root.reason}")
        replayed = root
    kept = set(replayed.decisions)
    dropped = [str(d) for d in wanted if d not in kept]
    leaf = first_completion(replayed)
    if leaf is None:
        try:
            leaf = random_implementation(replayed, random.Random(seed))
        except NoImplementation as exc:
            raise ValueError(f"the replayed decisions lead to no implementation: {exc}") from exc
    completed = [str(d) for d in leaf.decisions[len(replayed.decisions):]]
    return leaf, dropped, completed


@dataclass
class GenericTuned:
    """A size-generic kernel: versions over dynamic sizes behind one C dispatcher, callable
    on arrays of any consistent shape.

    Call it like :class:`~partita.tuning.Tuned` (scalars, then ``in`` and ``inout`` arrays;
    ``out=`` an array or a dict by name): the dynamic sizes are read from the arrays' shapes,
    which must agree with one another (a ValueError names the array and dimension that does
    not), and the dispatcher calls the version its thresholds choose for that work."""

    name: str
    kernel: Kernel
    """The kernel with dynamic sizes."""
    fixed: dict[str, Any]
    dynamic: list[str]
    versions: list[Version]
    thresholds: list[float]
    """``thresholds[i]`` guards version ``i``: it runs when its branch's property is at least
    that."""
    entry: str
    source: str
    """The dispatcher's C source, thresholds as constants."""
    library: Path | None
    """The shared object of the versions and the dispatcher (None: built at the first call)."""
    result: ThresholdResult | None = None
    """The threshold tuner's result (None with a single version, or read from the records)."""
    training: list[TrainingRun] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    """Winners that gave no version (no implementation over dynamic sizes, wrong results),
    and the threshold tuner's failed runs."""
    warnings: list[str] = field(default_factory=list)
    """The threshold tuner's warnings (the datasets disagree: monotonicity fails)."""
    timings: Timings = field(default_factory=Timings)
    """What this tune measured and what it reused from the records."""
    tuned_sizes: list[Sizes] = field(default_factory=list)
    """The training sizes whose static kernel this tune searched (the others were
    recorded)."""
    properties: list[Property] = field(default_factory=list)
    """``properties[i]``: the sizes whose product branch ``i`` compares with its threshold
    (:mod:`partita.tuning.chain`); empty: the work at every branch."""
    _calls: dict[tuple[Any, ...], tuple[Any, Any, tuple[Param, ...]]] = field(
        default_factory=dict, repr=False)
    """Per (entry, sizes): the loaded function and the signature at those sizes."""

    # -- calling -----------------------------------------------------------------------------

    @property
    def size_names(self) -> list[str]:
        """The sizes whose product is the work, in order."""
        return work_names(self.kernel)

    def work(self, sizes: Sizes) -> int:
        """The work at the dynamic parameters ``sizes``."""
        full = {**static_sizes(self.kernel), **kernel_sizes(self.name, self.fixed, sizes)}
        return property_value(tuple(self.size_names), full)

    def derived(self, bound: Sizes) -> Sizes:
        """The kernel's sizes that no input's shape gives, derived from those that do."""
        dynamic = {s.name for s in self.kernel.sizes if not s.is_static}
        params = parameter_sizes(self.name, self.dynamic, bound)
        if len(params) < len(self.dynamic):
            return {}
        return {k: v for k, v in kernel_sizes(self.name, self.fixed, params).items()
                if k in dynamic and k not in bound}

    def sizes_of(self, args: Sequence[Any], out: Any = None) -> Sizes:
        """The kernel's dynamic sizes read from the arrays' shapes (and derived from them),
        or the ValueError naming the array and dimension that disagrees."""
        inputs = input_params(self.kernel)
        if len(args) != len(inputs):
            names = ", ".join(p.name for p in inputs)
            raise TypeError(f"{self.name} takes {len(inputs)} arguments ({names}), "
                            f"got {len(args)}")
        given = list(zip(inputs, args, strict=True))
        if out is not None:
            outs = out if isinstance(out, dict) else {output_params(self.kernel)[0].name: out}
            given += [(p, outs[p.name]) for p in output_params(self.kernel) if p.name in outs]
        return bind_sizes(self.kernel, given, self.derived)

    def branch_properties(self) -> list[Property]:
        """Each branch's property (the work where none was chosen)."""
        return ([tuple(p) for p in self.properties] if self.properties
                else [tuple(self.size_names)] * len(self.thresholds))

    def version_for(self, sizes: Sizes) -> int:
        """The version (0-based) the dispatcher calls at the dynamic parameters ``sizes``."""
        full = {**static_sizes(self.kernel), **kernel_sizes(self.name, self.fixed, sizes)}
        values = [property_value(p, full) for p in self.branch_properties()]
        return choose_version(values, self.thresholds)

    def __call__(self, *args: Any, out: Any = None) -> Any:
        return self._invoke(self.entry, args, out)

    def call_version(self, index: int, *args: Any, out: Any = None) -> Any:
        """Version ``index`` called directly, whatever the thresholds say (for checks)."""
        return self._invoke(self.versions[index].entry, args, out)

    def _invoke(self, entry: str, args: Sequence[Any], out: Any) -> Any:
        sizes = self.sizes_of(args, out)
        key = (entry, *sizes.values())
        found = self._calls.get(key)
        if found is None:  # the signature at these sizes, and the function, once per shape
            if len(self._calls) >= 256:
                self._calls.clear()
            ffi, fn = load_function(self.loaded_library(), entry,
                                    declaration(entry, signature(self.kernel)))
            found = self._calls[key] = (ffi, fn, signature(self.kernel, sizes))
        ffi, fn, params = found
        return call_checked(ffi, fn, params, sizes, args, out)

    def loaded_library(self) -> Path:
        """The shared object of the versions and the dispatcher, compiled at the first call
        of a kernel read from the records."""
        if self.library is None:
            dispatcher = Program(self.kernel, self.entry, self.source, signature(self.kernel))
            self.library = compile_versions(self.kernel, self.versions, dispatcher)
        return self.library

    def write(self, directory: str | Path | None = None) -> Path:
        """A directory a user builds without partita (default: ``code/<kernel>_generic_<hash>``
        in partita's cache), returned: one C file per version, one for the dispatcher, its
        header ``<entry>.h`` and a Makefile whose ``make`` builds ``lib<entry>.so`` with the
        flags the versions were timed with."""
        if directory is None:
            directory = code_dir() / f"{self.entry}_{self.kernel.structural_hash}"
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        files = [f"{v.entry}.c" for v in self.versions] + [f"{self.entry}.c"]
        for name, source in zip(files, [v.source for v in self.versions] + [self.source],
                                strict=True):
            (out / name).write_text(source)
        (out / f"{self.entry}.h").write_text(generic_header(self))
        flags = " ".join(shlex.quote(f) for f in build_flags(Compiler().flags))
        (out / "Makefile").write_text("\n".join([
            f"# lib{self.entry}: {self.name} for any {', '.join(self.dynamic)}; `make` builds "
            "the shared library.",
            "# CFLAGS are the flags the versions were timed with.", "",
            "CC = gcc", f"CFLAGS = {flags.replace('$', '$$')}",
            f"SOURCES = {' '.join(files)}", "",
            f"lib{self.entry}.so: $(SOURCES) {self.entry}.h",
            "\t$(CC) $(CFLAGS) -shared -o $@ $(SOURCES) -lm", "",
            "clean:", f"\trm -f lib{self.entry}.so", "", ".PHONY: clean", ""]))
        return out

    # -- reporting ---------------------------------------------------------------------------

    def report(self) -> str:
        """The versions (what they won, what their replay dropped), the thresholds and the
        chain they make, the training runs, and the tuner's warnings and failures."""
        dyn = ", ".join(self.dynamic)
        lines = [f"{self.name} over dynamic sizes {dyn}: {len(self.versions)} versions, "
                 f"chosen by thresholds on products of the sizes (work = "
                 f"{' * '.join(self.size_names)})"]
        for i, v in enumerate(self.versions):
            won = "; ".join(sizes_text(s) for s in v.won_at)
            lines.append(f"  V{i + 1} {v.entry}: won at {won}; {len(v.dropped)} decisions "
                         f"dropped, {len(v.completed)} completed")
            lines += [f"      dropped: {d}" for d in v.dropped]
        lines.append("  dispatch: " + self.chain())
        if self.result is not None:
            for name, iv in self.result.intervals.items():
                lines.append(f"  {name}: best interval {iv}, {self.result.runs} runs in all")
        for t in self.training:
            times = ", ".join(f"V{i + 1} {_us(x)}" for i, x in enumerate(t.version_times))
            lines.append(f"  at {sizes_text(t.sizes)}: static tune {_us(t.static_time)}; "
                         f"{times}; dispatcher -> V{t.chosen + 1} {_us(t.dispatcher_time)}")
        lines += [f"  warning: {w}" for w in self.warnings]
        lines += [f"  failure: {f}" for f in self.failures]
        return "\n".join(lines)

    def chain(self) -> str:
        """The dispatch chain as text: ``if work >= T1: V1 elif m*n >= T2: V2 ... else Vn``
        (``work``: the product of every size; another property written as its product)."""
        if not self.thresholds:
            return "V1 always"
        props = [property_text(p, self.size_names) for p in self.branch_properties()]
        parts = [f"{'if' if i == 0 else 'elif'} {p} >= {_threshold_text(t)}: V{i + 1}"
                 for i, (p, t) in enumerate(zip(props, self.thresholds, strict=True))]
        return " ".join(parts) + f" else: V{len(self.versions)}"


def generic_header(g: GenericTuned) -> str:
    """The header of a written size-generic kernel: the dispatcher's prototypes."""
    guard = f"{g.entry.upper()}_H"
    params = signature(g.kernel)
    return "\n".join([
        f"#ifndef {guard}", f"#define {guard}", "#include <stdint.h>", "",
        f"/* {g.name} for any {', '.join(g.dynamic)} (partita, size-generic): "
        f"{len(g.versions)} versions, {g.chain()}; work = {' * '.join(g.size_names)}. */",
        *([f"/* The sizes passed must satisfy: "
           f"{'; '.join(str(r) for r in g.kernel.size_relations)} (the code relies on it). */"]
          if g.kernel.size_relations else []),
        prototype(g.entry, params) + ";", f"void {g.entry}_packed(void **args);", "",
        f"#endif /* {guard} */", ""])


def _threshold_text(t: float) -> str:
    return "inf" if t == INFINITY else f"{int(t)}"


def sizes_text(sizes: Sizes) -> str:
    return " ".join(f"{k}={v}" for k, v in sizes.items())


def _us(t: float | None) -> str:
    return "failed" if t is None else f"{t * 1e6:.1f} us"


def input_params(kernel: Kernel) -> list[Param]:
    return [p for p in signature(kernel) if p.kind == "scalar"
            or (p.kind == "array" and p.role in ("in", "inout"))]


def output_params(kernel: Kernel) -> list[Param]:
    return [p for p in signature(kernel) if p.kind == "array" and p.role in ("out", "inout")]


def static_sizes(kernel: Kernel) -> Sizes:
    return {s.name: int(s.value) for s in kernel.sizes if s.value is not None}


def bind_sizes(kernel: Kernel, given: Sequence[tuple[Param, Any]],
               derive: Callable[[Sizes], Sizes] | None = None) -> Sizes:
    """The dynamic sizes that the arrays ``given`` (parameter, value) agree on; a ValueError
    names the first array and dimension that disagrees with an earlier one. ``derive`` gives
    the sizes derived from those the inputs bind (before any output is checked against
    them)."""
    shapes = {a.name: a.shape for a in kernel.arrays}
    dynamic = {s.name for s in kernel.sizes if not s.is_static}
    bound: dict[str, tuple[int, str]] = {}
    derived = derive is None
    for p, a in given:
        if p.kind != "array":
            continue
        if derive is not None and not derived and p.role == "out":
            derived = True
            for name, v in derive({n: b for n, (b, _) in bound.items()}).items():
                bound.setdefault(name, (v, "the inputs' shapes"))
        if not isinstance(a, np.ndarray):
            raise TypeError(f"argument {p.name!r} must be a numpy array, "
                            f"got {type(a).__name__}")
        shape = shapes[p.name]
        if a.ndim != len(shape):
            raise ValueError(f"argument {p.name!r} must have {len(shape)} dimensions "
                             f"({', '.join(map(str, shape))}), got shape {a.shape}")
        for axis, (extent, got) in enumerate(zip(shape, a.shape, strict=True)):
            if not isinstance(extent, str) or extent not in dynamic:
                continue
            if extent in bound and bound[extent][0] != got:
                value, where = bound[extent]
                raise ValueError(f"argument {p.name!r} dimension {axis} is {got}, but size "
                                 f"{extent} is {value} from {where}")
            if got < 1:
                raise ValueError(f"argument {p.name!r} dimension {axis} is {got}: size "
                                 f"{extent} must be at least 1")
            bound.setdefault(extent, (int(got), f"argument {p.name!r} dimension {axis}"))
    if not derived and derive is not None:
        for name, v in derive({n: b for n, (b, _) in bound.items()}).items():
            bound.setdefault(name, (v, "the inputs' shapes"))
    missing = sorted(dynamic - set(bound))
    if missing:
        raise ValueError(f"no argument gives size {', '.join(missing)}: pass out=")
    values = {n: v for n, (v, _) in bound.items()}
    for rel in kernel.size_relations:  # the printed code relies on them
        if not rel.holds(values):
            where = "; ".join(f"{n} = {values[n]} from {bound[n][1]}" for n, _ in rel.terms)
            raise ValueError(f"the sizes break the kernel's relation {rel}: {where}")
    return values


def call_checked(ffi: Any, fn: Any, params: tuple[Param, ...], sizes: Sizes,
                 args: Sequence[Any], out: Any) -> Any:
    """Check ``args`` against the concrete signature ``params``, make or check the outputs,
    call ``fn`` (sizes first) and return the outputs (one array, or a tuple)."""
    inputs = [p for p in params if p.kind == "scalar"
              or (p.kind == "array" and p.role in ("in", "inout"))]
    outputs = [p for p in params if p.kind == "array" and p.role in ("out", "inout")]
    values: dict[str, Any] = {}
    for p, a in zip(inputs, args, strict=True):
        if p.kind == "scalar":
            if isinstance(a, bool) or not isinstance(a, int | float | np.number):
                raise TypeError(f"argument {p.name!r} must be a number, got {type(a).__name__}")
            values[p.name] = a
        else:
            values[p.name] = check_array(p, a)
    outs = out if isinstance(out, dict) or out is None else {outputs[0].name: out}
    written = []
    for p in outputs:
        given = values.get(p.name) if p.role == "inout" else None
        if outs is not None and p.name in outs:
            arr = check_array(p, outs[p.name])
            if given is not None and arr is not given:
                arr[...] = given
        else:
            arr = new_array(p, given)
        values[p.name] = arr
        written.append(arr)
    for p in inputs:  # an input that shares memory with an output is read from a copy
        if p.kind == "array" and p.role == "in" and any(
                np.may_share_memory(values[p.name], w) for w in written):
            values[p.name] = new_array(p, values[p.name])
    c_args: list[Any] = [sizes[p.name] for p in params if p.kind == "size"]
    for p in params:
        if p.kind == "scalar":
            kind = np.dtype(p.dtype).kind
            c_args.append(int(values[p.name]) if kind == "i" else float(values[p.name]))
        elif p.kind == "array":
            c_args.append(ffi.cast(f"{DType.parse(p.dtype).c_type} *",
                                   values[p.name].ctypes.data))
    fn(*c_args)
    return written[0] if len(written) == 1 else tuple(written)


def compile_versions(dyn: Kernel, versions: Sequence[Version],
                     *extra: Program) -> Path:
    """One shared object with every version and the ``extra`` programs (dispatchers), each
    compiled once: a tune builds the versions alone, then beside each dispatcher."""
    programs = [Program(dyn, v.entry, v.source, signature(dyn)) for v in versions]
    return Compiler().build_linked([*programs, *extra]).path
