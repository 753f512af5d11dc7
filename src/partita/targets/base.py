"""What a target gives the tuning pipeline and the command line: one object per target.

A :class:`Target` answers every question whose answer depends on the hardware a kernel is
tuned for: its decision space, the rates of its lower-bound model, the printer of its code,
the runner that builds, checks and times programs, what can be checked before any work, and
the first batch of a search. The pipeline (:mod:`partita.tuning`) and the command line ask
the target and never name one; a new target is a folder under ``targets/`` with a module
that subclasses :class:`Target`, registered in :mod:`partita.targets` (see
``docs/targets.md``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Protocol

from partita.codegen.program import Program
from partita.ir.kernel import Kernel
from partita.model.bound import Model
from partita.runtime.data import Reference
from partita.runtime.evaluate import Checked, Measurement
from partita.runtime.harness import TimingOptions
from partita.space.candidate import Candidate, Space
from partita.space.decl import SpaceDef
from partita.targets.cpu.machine import CpuCapabilities

Printer = Callable[[Candidate, "str | None"], Program]
"""A printer: a fully decided candidate (and an entry name, or the default) to a program."""

BatchLimit = Callable[[Sequence[Measurement]], float]
"""A limit that depends on the measurements of a batch so far (see
:func:`partita.tuning.limits.batch_limit`)."""


class TargetUnavailable(RuntimeError):
    """What a target needs to run code is missing here; the message says what, in one line."""


class UnsupportedKernel(ValueError):
    """No implementation of the kernel can be printed for this target: the message names the
    kernel and why, in one line, before any work (rather than every candidate failing)."""


class Runner(Protocol):
    """What the pipeline needs of a target's runner (the CPU's
    :class:`~partita.runtime.Evaluator`, the GPU's
    :class:`~partita.targets.gpu.cuda.CudaRunner`): a context manager that builds programs
    ahead (``prepare``) and checks and times them."""

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: object) -> Any: ...

    def prepare(self, programs: Sequence[Any]) -> None: ...


@dataclass
class FirstBatch:
    """What a target adds to the start of a search: candidates evaluated first, and partial
    candidates that MCTS keeps completing (``seeds``, empty where the target has none)."""

    candidates: list[Candidate] = field(default_factory=list)
    seeds: list[Candidate] = field(default_factory=list)


@dataclass(frozen=True)
class Sampling:
    """How ``partita sample`` runs random implementations on a target: ``evaluate`` checks
    (and, where the target can, times) a list of programs printed by ``printer``; ``where``
    is said after the target's name in the summary line."""

    evaluate: Callable[[list[Program]], Sequence[Checked]]
    printer: Printer
    where: str = ""


class Target(ABC):
    """A target, as tuning and the command line see it. Subclasses set the class attributes
    and implement the abstract methods; none keeps state between tunes."""

    name: ClassVar[str]
    """How users and records name the target (``cpu``, ``gpu``)."""
    code_suffix: ClassVar[str]
    """The file suffix of its printed code (``.c``, ``.cu``)."""
    cold_cache: ClassVar[bool] = False
    """Whether caches can be flushed before every timed call (``cold_cache=True``)."""
    cluster_runs: ClassVar[bool] = False
    """Whether its programs can be compiled and timed on a Dask cluster's workers
    (:mod:`partita.runtime.cluster`), keyed by this host's records fingerprint."""
    printers: ClassVar[Mapping[str, Printer]]
    """Its printers by language, the one tuning builds and times first."""
    added_choices: ClassVar[Mapping[str, str]] = MappingProxyType({})
    """Choices its space gained after records were made, each with the value that prints
    the code those records measured: a recorded best that leaves them open replays with
    that value (:func:`partita.tuning.tuned.rebuild_program`)."""

    @abstractmethod
    def space_def(self, kernel: Kernel, cpu: CpuCapabilities | None = None) -> SpaceDef:
        """The target's decision space for ``kernel``'s element types (``cpu``: the CPU
        to plan for, on targets that run on one; others ignore it)."""

    def space(self, kernel: Kernel, choice_order: str | Sequence[str] = "default",
              cpu: CpuCapabilities | None = None) -> Space:
        """The decision space of ``kernel``, its decisions taken in ``choice_order`` (see
        :meth:`~partita.space.decl.SpaceDef.reordered`; a bad order raises SpaceError)."""
        return Space(self.space_def(kernel, cpu).reordered(choice_order), kernel)

    @abstractmethod
    def model(self, kernel: Kernel, measure: bool = True) -> Model:
        """The lower-bound model with this target's rates for ``kernel``'s element type
        (``measure``: micro-benchmarks may run where no rates are cached)."""

    @property
    def languages(self) -> tuple[str, ...]:
        """The languages it prints, the one tuning builds and times first."""
        return tuple(self.printers)

    def printer(self, language: str | None = None) -> Printer:
        """The printer of ``language`` (None: the one tuning times); a ValueError naming the
        languages it prints for any other."""
        name = language or self.languages[0]
        if name not in self.printers:
            raise ValueError(f"the {self.name} target prints {', '.join(self.languages)}, "
                             f"not {name!r}")
        return self.printers[name]

    def print_program(self, candidate: Candidate, entry: str | None = None) -> Program:
        """The program tuning builds and times for a fully decided ``candidate``."""
        return self.printer()(candidate, entry)

    @abstractmethod
    def check(self, kernel: Kernel) -> None:
        """Raise, before any work, what would make tuning ``kernel`` here fail for certain
        (arrays larger than memory; no device to run on), each in one line."""

    @abstractmethod
    def evaluator(self, *, seed: int, timing: TimingOptions,
                  references: Mapping[str, Reference] | None,
                  compile_timeout_s: float) -> Runner:
        """A runner that checks programs against the references (the library's where
        ``references`` is None) on inputs drawn from ``seed`` and times them with ``timing``;
        a build that takes longer than ``compile_timeout_s`` fails."""

    def host_describer(self) -> Callable[[], dict[str, Any]] | None:
        """A module-level function (sent by reference to a cluster's measuring workers) that
        returns a JSON summary of the machine it runs on, as its records keep it; None on
        targets that do not run on a cluster."""
        return None

    @abstractmethod
    def flags_text(self, runner: Any) -> str:
        """The build command's flags of ``runner``'s programs, as the records keep them."""

    @abstractmethod
    def evaluate(self, runner: Any, programs: list[Program], *, timeout_s: BatchLimit,
                 abandon_s: BatchLimit, until: float | None) -> list[Measurement]:
        """A measurement per program (fewer past ``until``, a ``time.monotonic()`` deadline,
        where the runner honours one): each call is limited to ``timeout_s``, and timing a
        program stops past ``abandon_s`` where the runner can stop it."""

    @abstractmethod
    def initial(self, space: Space, model: Model, runner: Any, *, seed: int, batch: int,
                recorded: bool, sketches: bool) -> FirstBatch:
        """The first batch of a search of ``space`` (``recorded``: a best is already
        recorded; ``sketches``: completions of the kernel's sketches are wanted)."""

    @abstractmethod
    def sampling(self, kernel: Kernel, *, seed: int,
                 timeout_s: float) -> AbstractContextManager[Sampling]:
        """How ``partita sample`` runs random implementations of ``kernel`` here."""


def printers_text(targets: Iterable[Target]) -> str:
    """``cpu: c; gpu: cuda, opencl``: the languages of each target, for error messages."""
    return "; ".join(f"{t.name}: {', '.join(t.languages)}" for t in targets)
