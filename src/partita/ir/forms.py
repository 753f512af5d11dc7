"""Linear forms over a kernel's dynamic sizes, and the least value one takes.

Proving an index inside an array over dynamic sizes (when a kernel is built, and when the
printers drop the test of a padded load) compares linear forms: the index's greatest value
against the extent. Sizes are at least 1 where an iteration runs, and the kernel's size
relations (:class:`~partita.ir.kernel.SizeRelation`, such as a convolution's output height
against its image's) bound differences of sizes that nothing else relates.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from partita.ir.kernel import SizeRelation

Form = dict[str | None, int]
"""A linear form over sizes: coefficient by size name, the constant under None."""


def size_form(size: int | str | None, static: Mapping[str, int | None]) -> Form:
    """A size as a form: its value where it is static (``static`` gives each size
    parameter's value, None when dynamic), else its name."""
    if isinstance(size, int):
        return {None: size}
    value = static.get(str(size))
    return {None: value} if value is not None else {str(size): 1}


def add(a: Form, b: Form, scale: int = 1) -> Form:
    """``a + scale * b``."""
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + scale * v
    return out


def least(form: Form, running: Iterable[str] = (),
          relations: Iterable[SizeRelation] = ()) -> float:
    """The least value of ``form`` where the sizes in ``running`` are at least 1 (an
    iteration over them runs), the others at least 0, and each of ``relations`` holds: a
    size with a negative coefficient is taken away with a multiple of a relation that leaves
    every coefficient at least 0 (minus infinity where none does)."""
    running = set(running)
    if all(v >= 0 for k, v in form.items() if k is not None):
        return sum(v for k, v in form.items() if k is None or k in running)
    best = float("-inf")
    for rel in relations:
        coeffs = dict(rel.terms)
        scales = {Fraction(v, coeffs[k]) for k, v in form.items()
                  if k is not None and v < 0 and coeffs.get(k, 0) < 0}
        for scale in scales:
            rest = {k: v - scale * coeffs.get(k, 0) for k, v in form.items() if k is not None}
            rest.update({k: -scale * c for k, c in coeffs.items() if k not in form})
            if all(v >= 0 for v in rest.values()):
                # form = scale * relation + rest, and the relation is at least 0.
                const = form.get(None, 0) - scale * rel.constant
                best = max(best, float(const + sum(v for k, v in rest.items()
                                                   if k in running)))
    return best
