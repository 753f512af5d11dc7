"""Size relations: facts about dynamic sizes that a kernel's callers guarantee, with which
indices are proven inside arrays (when the kernel is built, and by the printers)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from partita import KernelBuilder
from partita.ir.forms import least
from partita.ir.kernel import SizeRelation
from partita.ir.types import KernelError
from partita.tuning.generic import bind_sizes, input_params, output_params
from partita.tuning.generic_tune import generic_kernel

WIDTH = SizeRelation((("n_w", 1), ("n_q", -2)), 1)
"""A stride-2 conv's columns: ``n_w - 2 n_q + 1 >= 0``."""


def test_a_relation_bounds_a_difference_of_sizes_nothing_else_bounds() -> None:
    """``n_w - 2 n_q + 3`` is at least 2 where the relation holds, and has no least value
    without it; the least agrees with brute force over small sizes."""
    form = {"n_w": 1, "n_q": -2, None: 3}
    assert least(form, {"n_w", "n_q"}) == float("-inf")
    bound = least(form, {"n_w", "n_q"}, [WIDTH])
    assert bound == 2
    values = [form[None] + w - 2 * q for w, q in itertools.product(range(1, 40), repeat=2)
              if WIDTH.holds({"n_w": w, "n_q": q})]
    assert min(values) == bound
    # A relation that bounds the other way proves nothing; a multiple of one works.
    assert least(form, {"n_w", "n_q"}, [SizeRelation((("n_w", -1), ("n_q", 2)), 0)]) == \
        float("-inf")
    assert least({"n_w": 3, "n_q": -6}, {"n_w", "n_q"}, [WIDTH]) == -3
    assert str(WIDTH) == "n_w - 2*n_q + 1 >= 0"


def test_relations_name_dynamic_sizes() -> None:
    def kernel(terms: dict[str, int], constant: int = 0) -> None:
        b = KernelBuilder("rel", "float32")
        n = b.size("n", None)
        b.size("m", 8)
        x = b.array("x", None, [n])
        y = b.array("y", None, [n], role="out")
        i = b.dim("i", n)
        b.store(y, [i], b.load(x, [i]))
        b.relate(terms, constant)
        b.build()

    kernel({"n": 1}, -1)
    with pytest.raises(KernelError, match="'m' is not a dynamic size"):
        kernel({"m": 1})
    with pytest.raises(KernelError, match="'k' is not a dynamic size"):
        kernel({"k": 1})
    with pytest.raises(KernelError, match="coefficient of n must be a nonzero integer"):
        kernel({"n": 0})


def test_an_unpadded_conv_over_dynamic_sizes_is_proven_inside_its_image() -> None:
    """Without the relation of the output's extents to the image's, ``p + r`` against
    ``n_h`` could not be proven: an unpadded or 1x1 conv had no size-generic kernel."""
    for fixed in ({"r": 3, "s": 3, "pad": 0}, {"r": 1, "s": 1, "pad": 0},
                  {"r": 3, "s": 3, "pad": 0, "stride": 3}):
        _, _, dyn = generic_kernel("conv2d", "cpu", dict(fixed))
        assert len(dyn.size_relations) == 2, fixed
        assert f"sizes: {dyn.size_relations[0]}" in dyn.describe()  # what a report shows


def test_sizes_that_break_a_relation_are_refused() -> None:
    """The printed code relies on the relations: an output too wide for its image is named,
    where no derivation of the output's extents from the inputs' checks it."""
    _, _, dyn = generic_kernel("conv2d", "cpu", {"r": 3, "s": 3, "pad": 1})
    image = np.zeros((1, 6, 6, 4), np.float32)
    filters = np.zeros((8, 3, 3, 4), np.float32)
    given = list(zip(input_params(dyn), [image, filters], strict=True))
    right = bind_sizes(dyn, [*given, (output_params(dyn)[0], np.zeros((1, 6, 6, 8)))])
    assert (right["n_p"], right["n_q"]) == (6, 6)
    with pytest.raises(ValueError, match=r"relation n_w - n_q >= 0: n_w = 6 .*n_q = 7"):
        bind_sizes(dyn, [*given, (output_params(dyn)[0], np.zeros((1, 6, 7, 8)))])
