"""Every target declares the values of its enum decisions as named constants: the values a
space declares are exactly the members of the class it declares them with, and every
condition, preference and quotient of the space names them by those members. A value spelt
as a bare string (or misspelt) anywhere in a declaration is caught here."""

from __future__ import annotations

from dataclasses import replace
from enum import StrEnum
from typing import Any

import pytest

import partita
from partita.ir.kernel import Kernel
from partita.space.decl import Is, SpaceDef, Var, values
from partita.space.nest import CommonKind, Order
from partita.space.temporaries import CommonPlace
from partita.targets import AVX512_REFERENCE, TARGETS, get
from partita.targets.cpu.space import DimKind as CpuKind
from partita.targets.cpu.space import MemSpace as CpuPlace
from partita.targets.gpu.space import DimKind as GpuKind
from partita.targets.gpu.space import MemSpace as GpuPlace


def matmul(dtype: str) -> Kernel:
    return partita.kernel("matmul", m=64, n=64, k=16, dtype=dtype)


def spaces() -> list[tuple[str, SpaceDef]]:
    return [(f"{t}-{dtype}", get(t).space_def(matmul(dtype), AVX512_REFERENCE))
            for t in TARGETS for dtype in ("float32", "float64")]


def conditions(sdef: SpaceDef) -> list[tuple[str, Is]]:
    """Every ``Is`` condition of the space, with where it is."""
    out = [(f"constraint {r.name!r}", c) for r in sdef.constraints for c in r.any_of]
    out += [(f"counter {c.name!r}", w) for c in sdef.counters.values() for w in c.when]
    out += [(f"trigger {t.name!r}", w) for t in sdef.triggers for w in t.when]
    return [(where, c) for where, c in out if isinstance(c, Is)]


def misnamed(sdef: SpaceDef) -> list[str]:
    """The places where the space names a value of an enum decision by something other than
    a member of the decision's declared class."""
    out = []
    for decl in sdef.enums.values():
        cls = decl.constants
        if cls is None or not issubclass(cls, StrEnum):
            out.append(f"{decl.name}: no class of named constants")
            continue
        if decl.values != tuple(cls):
            out.append(f"{decl.name}: values {decl.values} are not the members of {cls}")
        named: list[tuple[str, Any]] = [(f"{decl.name} requires", v) for v, _ in decl.requires]
        named += [(f"{decl.name} swaps", v) for pair in decl.antisymmetric or () for v in pair]
        out += [f"{where}: {v!r}" for where, v in named if not isinstance(v, cls)]
    checks: list[tuple[str, str, Any]] = [
        (where, c.choice, v) for where, c in conditions(sdef) for v in c.values]
    checks += [(f"quotient {q.name!r}", q.choice, q.value) for q in sdef.quotients.values()]
    checks += [(f"preference on {p.choice!r}", p.choice, v)
               for p in sdef.preferences.values() for v in p.values]
    for where, choice, v in checks:
        decl = sdef.enums.get(choice)
        if decl is not None and decl.constants is not None \
                and not isinstance(v, decl.constants):
            out.append(f"{where}: {choice} value {v!r} is not a {decl.constants.__name__}")
    return out


@pytest.mark.parametrize(("name", "sdef"), spaces(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_enum_value_is_a_declared_constant(name: str, sdef: SpaceDef) -> None:
    assert sdef.enums, name
    assert conditions(sdef), name
    assert misnamed(sdef) == [], name


def test_a_value_named_by_a_string_is_caught() -> None:
    """The check above fails on a space whose constraint names a value by a string, even
    a correctly spelt one, and on one that names it by another decision's constant."""
    sdef = get("cpu").space_def(matmul("float32"), AVX512_REFERENCE)
    assert misnamed(sdef) == []
    x = Var("x", "Dims")
    for value in ("VECTOR", "VECTR", Order.IN):
        bad = replace(sdef, constraints=list(sdef.constraints))
        bad.require("misnamed", [x], Is("dim_kind", ("x",), values(value)))
        assert misnamed(bad) == [f"constraint 'misnamed': dim_kind value {value!r} is not "
                                 "a DimKind"]


def test_a_space_declared_with_strings_is_caught() -> None:
    sdef = get("gpu").space_def(matmul("float32"), AVX512_REFERENCE)
    bad = replace(sdef, enums=dict(sdef.enums))
    bad.enums["cache"] = replace(bad.enums["cache"], constants=None)
    assert misnamed(bad) == ["cache: no class of named constants"]


def test_stored_values_are_the_strings_they_always_were() -> None:
    """Decisions are stored (records, JSON) as their value strings: the constants are those
    strings, so that records written before read the same."""
    assert [str(v) for v in Order] == ["BEFORE", "AFTER", "IN", "OUT", "MERGED"]
    assert [str(v) for v in CpuKind] == ["LOOP", "UNROLL", "VECTOR", "PARALLEL"]
    assert [str(v) for v in GpuKind] == ["LOOP", "UNROLL", "VECTOR", "BLOCK", "THREAD"]
    assert CpuKind.LOOP == "LOOP" and hash(CpuKind.LOOP) == hash("LOOP")
    assert f"{GpuPlace.SHARED}" == "SHARED"


@pytest.mark.parametrize(("kinds", "places"), [(CpuKind, CpuPlace), (GpuKind, GpuPlace)])
def test_shared_values_are_every_targets_values(kinds: type[StrEnum],
                                                places: type[StrEnum]) -> None:
    """Code shared by targets names the common kinds and places only: every target has
    them, under the same strings."""
    assert {str(v) for v in CommonKind} <= {str(v) for v in kinds}
    assert {str(v) for v in CommonPlace} <= {str(v) for v in places}
