"""Declarations of a decision space, in the spirit of Beaugnon's thesis, chapter 3.

A :class:`SpaceDef` lists, independently of any kernel:

- **sets** of backbone objects (``Statements``, ``Dims``, parametric ``AccessedArrays(inst)``);
- **choices**: enums over tuples of distinct objects (with per-value requirements, symmetric
  and antisymmetric pairs stored once), integers (a universe per object), and counters (sum or
  product of a value when conditions hold, kept as an interval ``[lo, hi]``);
- **constraints**: ``forall vars: cond_1 or ... or cond_n`` where each condition mentions at
  most two choices, or one choice and a constant;
- **quotients**: one representative per class of an equivalence (merged dimensions);
- **triggers**: lowerings that only add objects to the backbone when a condition holds.

A space is compiled once per kernel by :mod:`partita.space.compiler` into propagators. Objects
are referred to by name; every callable receives the kernel first, then the objects.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from partita.ir.kernel import Kernel


class SpaceError(ValueError):
    """A decision space declaration is inconsistent (unknown set, choice or value)."""


@dataclass(frozen=True)
class SetDecl:
    """A set of backbone objects; ``param`` names the set of the parameter of a parametric set."""

    name: str
    items: Callable[..., Sequence[str]]
    param: str | None = None
    doc: str = ""


@dataclass(frozen=True)
class Var:
    """A quantified variable over a set; ``of`` binds the parameter of a parametric set."""

    name: str
    set: str
    of: str | None = None


@dataclass(frozen=True)
class EnumDecl:
    """``choice enum name(params)``. ``requires[v]`` is a static predicate for value ``v``.

    ``antisymmetric`` pairs values that swap when the two arguments swap (BEFORE <-> AFTER);
    values not listed map to themselves. ``symmetric`` choices have the same value both ways.
    ``constants`` is the class of named constants the values are members of, when the space
    declares one (every target's space does: code names a value by its constant, so that a
    misspelt value is an error where it is written, not a condition that never holds).
    """

    name: str
    params: tuple[str, ...]
    values: tuple[str, ...]
    requires: tuple[tuple[str, Callable[..., bool]], ...] = ()
    antisymmetric: tuple[tuple[str, str], ...] | None = None
    symmetric: bool = False
    doc: str = ""
    constants: type[StrEnum] | None = None

    @property
    def is_pair(self) -> bool:
        return self.antisymmetric is not None or self.symmetric

    def swapped(self, value: str) -> str:
        for a, b in self.antisymmetric or ():
            if value == a:
                return b
            if value == b:
                return a
        return value


@dataclass(frozen=True)
class IntegerDecl:
    """``choice integer name(params)`` whose values are ``universe(kernel, *objs)``."""

    name: str
    params: tuple[str, ...]
    universe: Callable[..., Sequence[int]]
    doc: str = ""


@dataclass(frozen=True)
class Is:
    """The choice instance ``choice(args)`` takes one of ``values``."""

    choice: str
    args: tuple[str, ...]
    values: frozenset[Any]


@dataclass(frozen=True)
class Related:
    """``(choice_a(args_a), choice_b(args_b))`` is in a relation over values.

    ``relation`` is ``"eq"``, ``"ne"``, or a callable on two values; equality over two enums
    compares value names.
    """

    choice_a: str
    args_a: tuple[str, ...]
    choice_b: str
    args_b: tuple[str, ...]
    relation: str | Callable[[Any, Any], bool] = "eq"


@dataclass(frozen=True)
class Compare:
    """``choice(args) op bound``: an integer choice or a counter against a constant expression.

    ``bound`` is an int or ``f(kernel, *objs_of_bound_args)``. ``op`` is one of
    ``<=, >=, ==, <, >`` or ``in`` (``bound`` then gives a collection of allowed values).
    """

    choice: str
    args: tuple[str, ...]
    op: str
    bound: Any
    bound_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Static:
    """A property of the objects alone, known when the space is compiled (at most 2 args)."""

    predicate: Callable[..., bool]
    args: tuple[str, ...]
    label: str = ""


Condition = Is | Related | Compare | Static


@dataclass(frozen=True)
class Require:
    """``require forall vars: any_of[0] or any_of[1] or ...``."""

    name: str
    forall: tuple[Var, ...]
    any_of: tuple[Condition, ...]
    doc: str = ""


@dataclass(frozen=True)
class CounterDecl:
    """``choice counter name(params) = sum|mul over var of value when all(when)``.

    ``value`` is an int, a callable ``f(kernel, obj)``, or the name of an integer choice
    applied to the quantified object; ``default`` (int or callable) is the value of objects
    without an instance of that choice. ``half`` counters keep only a lower bound.
    ``quotient`` counts a term only once per class of the named quotient; the conditions and
    the value of a term must then be the same for every member of a class (fused dims are one
    loop: same kind, same nesting, same size), which propagation relies on.
    """

    name: str
    params: tuple[str, ...]
    kind: str
    over: Var
    param_vars: tuple[str, ...] = ()
    value: Any = 1
    when: tuple[Is, ...] = ()
    half: bool = False
    quotient: str | None = None
    default: Any = 1
    doc: str = ""


@dataclass(frozen=True)
class QuotientDecl:
    """One representative per class of ``set`` under the choice value ``choice == value``.

    The representative of a class is its first member in set order. ``x`` is certainly a
    representative when no earlier member can be merged with it, possibly one when no earlier
    member is certainly merged with it.
    """

    name: str
    set: str
    choice: str
    value: str
    doc: str = ""


@dataclass(frozen=True)
class TriggerDecl:
    """When every condition of ``when`` holds for some objects, apply ``lower``.

    ``lower(kernel, *objs) -> Kernel`` may only add objects. Fired triggers are applied in a
    canonical order from the original backbone, so they commute.
    """

    name: str
    forall: tuple[Var, ...]
    when: tuple[Is | Static, ...]
    lower: Callable[..., Kernel]
    doc: str = ""


@dataclass(frozen=True)
class PreferDecl:
    """Values of a choice that searches draw more often than the others (a rollout prior).

    A preference never removes a value: it only says where good implementations usually are,
    so that random completions of a partial candidate land there more often."""

    choice: str
    values: frozenset[Any]
    doc: str = ""


@dataclass
class SpaceDef:
    """A kernel-independent decision space. Build it with the methods below, then compile."""

    name: str
    sets: dict[str, SetDecl] = field(default_factory=dict)
    enums: dict[str, EnumDecl] = field(default_factory=dict)
    integers: dict[str, IntegerDecl] = field(default_factory=dict)
    counters: dict[str, CounterDecl] = field(default_factory=dict)
    quotients: dict[str, QuotientDecl] = field(default_factory=dict)
    constraints: list[Require] = field(default_factory=list)
    triggers: list[TriggerDecl] = field(default_factory=list)
    preferences: dict[str, PreferDecl] = field(default_factory=dict)
    choice_order: tuple[str, ...] = ()
    sealed: bool = field(default=False, init=False, compare=False)
    """Built and shared: the target's constructors return one definition per machine and
    element size, and the spaces of one definition and kernel share their compiled layouts
    (:mod:`partita.space.layouts`), so a sealed definition takes no new declaration. A copy
    (``dataclasses.replace``) is not sealed; a reordered one is if its original is."""
    _orders: dict[tuple[str, ...], SpaceDef] = field(default_factory=dict, init=False,
                                                     repr=False, compare=False)
    """The reordered copies made so far, one per order (each shares its spaces' layouts)."""

    def seal(self) -> SpaceDef:
        """This definition, closed to new declarations (see :attr:`sealed`)."""
        self.sealed = True
        return self

    def _writable(self, what: str) -> None:
        if self.sealed:
            raise SpaceError(f"space {self.name!r} is sealed (built and shared): {what} cannot "
                             "be declared on it; declare it on a space of your own")

    def set(self, name: str, items: Callable[..., Sequence[str]], *, param: str | None = None,
            doc: str = "") -> str:
        self._writable(f"set {name!r}")
        if param is not None and param not in self.sets:
            raise SpaceError(f"set {name!r}: unknown parameter set {param!r}")
        self.sets[name] = SetDecl(name, items, param, doc)
        return name

    def enum(self, name: str, params: Sequence[str], values: Sequence[str] | type[StrEnum], *,
             requires: dict[str, Callable[..., bool]] | None = None,
             antisymmetric: dict[str, str] | None = None, symmetric: bool = False,
             doc: str = "") -> str:
        """``values`` is a class of named constants (its members are the values, in
        declaration order) or, for spaces without one, the value strings."""
        self._writable(f"enum {name!r}")
        self._check_params(name, params)
        constants = values if isinstance(values, type) else None
        values = tuple(values)
        if (antisymmetric is not None or symmetric) and len(params) != 2:
            raise SpaceError(f"choice {name!r}: only pairs can be (anti)symmetric")
        for v in (requires or {}):
            if v not in values:
                raise SpaceError(f"choice {name!r}: requirement on unknown value {v!r}")
        anti = None if antisymmetric is None else tuple(antisymmetric.items())
        self.enums[name] = EnumDecl(name, tuple(params), values,
                                    tuple((requires or {}).items()), anti, symmetric, doc,
                                    constants)
        return name

    def integer(self, name: str, params: Sequence[str], universe: Callable[..., Sequence[int]],
                *, doc: str = "") -> str:
        self._writable(f"integer {name!r}")
        self._check_params(name, params)
        self.integers[name] = IntegerDecl(name, tuple(params), universe, doc)
        return name

    def counter(self, name: str, params: Sequence[Var | str], kind: str, over: Var, *,
                value: Any = 1, when: Sequence[Is] = (), half: bool = False,
                quotient: str | None = None, default: Any = 1, doc: str = "") -> str:
        """Params are Vars (or set names, then the variable has the set's name)."""
        self._writable(f"counter {name!r}")
        pvars = [p if isinstance(p, Var) else Var(p, p) for p in params]
        self._check_params(name, [p.set for p in pvars])
        if kind not in ("sum", "mul"):
            raise SpaceError(f"counter {name!r}: kind must be 'sum' or 'mul', got {kind!r}")
        self.counters[name] = CounterDecl(name, tuple(p.set for p in pvars), kind, over,
                                          tuple(p.name for p in pvars), value, tuple(when),
                                          half, quotient, default, doc)
        return name

    def quotient(self, name: str, set_name: str, choice: str, value: str, *,
                 doc: str = "") -> str:
        self._writable(f"quotient {name!r}")
        self.quotients[name] = QuotientDecl(name, set_name, choice, value, doc)
        return name

    def require(self, name: str, forall: Sequence[Var], *any_of: Condition,
                doc: str = "") -> None:
        self._writable(f"require {name!r}")
        self.constraints.append(Require(name, tuple(forall), tuple(any_of), doc))

    def trigger(self, name: str, forall: Sequence[Var], when: Sequence[Is | Static],
                lower: Callable[..., Kernel], *, doc: str = "") -> None:
        self._writable(f"trigger {name!r}")
        self.triggers.append(TriggerDecl(name, tuple(forall), tuple(when), lower, doc))

    def prefer(self, choice: str, preferred: frozenset[Any], *, doc: str = "") -> None:
        """Values of a choice that searches favour (see :class:`PreferDecl`)."""
        self._writable(f"prefer {choice!r}")
        if choice not in self.enums and choice not in self.integers:
            raise SpaceError(f"preference on {choice!r}: not a choice of {self.name!r}")
        if choice in self.enums:
            unknown = set(preferred) - set(self.enums[choice].values)
            if unknown:
                raise SpaceError(f"preference on {choice!r}: unknown values {sorted(unknown)}")
        self.preferences[choice] = PreferDecl(choice, frozenset(preferred), doc)

    def _check_params(self, name: str, params: Sequence[str]) -> None:
        for p in params:
            if p not in self.sets:
                raise SpaceError(f"choice {name!r}: unknown set {p!r}")
        if name in self.enums or name in self.integers or name in self.counters:
            raise SpaceError(f"choice {name!r} is declared twice")

    def decision_choices(self) -> tuple[str, ...]:
        """The choices decisions are taken on, in the space's choice order: those
        ``choice_order`` names, then the others in declaration order."""
        declared = [*self.enums, *self.integers]
        listed = [c for c in self.choice_order if c in declared]
        return (*listed, *(c for c in declared if c not in listed))

    def reordered(self, order: str | Sequence[str]) -> SpaceDef:
        """This space with another choice order (the order in which searches and random
        descents take decisions; the implementations are the same, decisions commute).

        ``order`` is ``"default"``, ``"reverse"`` (the default order backwards), or choice
        names (a sequence, or one string separated by commas) that go first, in that order;
        the choices not named follow in their default order. One order gives one copy (its
        spaces share their layouts).
        """
        choices = self._order_for(order)
        if choices is None:
            return self
        found = self._orders.get(choices)
        if found is None:
            found = self._orders[choices] = replace(self, choice_order=choices)
            found.sealed = self.sealed
        return found

    def _order_for(self, order: str | Sequence[str]) -> tuple[str, ...] | None:
        """The choice order ``order`` names (None: the default)."""
        current = self.decision_choices()
        if isinstance(order, str):
            if order == "default":
                return None
            if order == "reverse":
                return tuple(reversed(current))
            order = [c.strip() for c in order.split(",") if c.strip()]
        names = list(order)
        unknown = [c for c in names if c not in current]
        if unknown:
            raise SpaceError(f"choice order: {', '.join(map(repr, unknown))} "
                             f"{'is not a choice' if len(unknown) == 1 else 'are not choices'}"
                             f" of the {self.name} space (choices: {', '.join(current)}; or "
                             "'default', 'reverse')")
        twice = sorted({c for c in names if names.count(c) > 1})
        if twice:
            raise SpaceError(f"choice order: {', '.join(map(repr, twice))} named twice")
        if not names:
            raise SpaceError("choice order: no choice named")
        return (*names, *(c for c in current if c not in names))

    def kind_of(self, choice: str) -> str:
        for kind, table in (("enum", self.enums), ("integer", self.integers),
                            ("counter", self.counters)):
            if choice in table:
                return kind
        raise SpaceError(f"space {self.name!r} has no choice {choice!r}")


def values(*names: Any) -> frozenset[Any]:
    """Shorthand for the value set of an :class:`Is` condition."""
    return frozenset(names)
