"""A static winner's tiles that the space over dynamic sizes lacks: mapped to the nearest
tiles it offers, every replay checked and timed at the winner's size, the fastest right one
kept (:mod:`partita.tuning.generic_tiles`)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from partita.codegen.program import signature
from partita.kernels.registry import kernel as library_kernel
from partita.search.sampling import random_implementation
from partita.space.candidate import Candidate
from partita.targets import get as get_target
from partita.tuning.dispatch import declaration, load_function
from partita.tuning.generic import Version, compile_versions
from partita.tuning.generic_store import Winner
from partita.tuning.generic_tiles import fastest_right, missing_tiles, tile_mappings
from partita.tuning.generic_tune import Datasets, generic_kernel, replayed_winner

FIXED = {"n": 1, "c": 4, "k": 8, "r": 3, "s": 3, "pad": 1}
SIZES = {"h": 12, "w": 12}
"""A 12x12 image: a static tune may tile its columns by 12, which the dynamic space lacks
(it offers powers of two and the register divisors 3, 5, 6 and 7)."""


@pytest.fixture(scope="module")
def dynamic() -> tuple[dict[str, object], object, object]:
    _, fixed, dyn = generic_kernel("conv2d", "cpu", dict(FIXED))
    return fixed, dyn, get_target("cpu").space(dyn)


def root_of(space: object) -> Candidate:
    root = space.root()  # type: ignore[attr-defined]
    assert isinstance(root, Candidate)
    return root


def test_a_missing_tile_maps_to_the_nearest_offered_below_and_above(dynamic: tuple) -> None:
    _, _, space = dynamic
    root = root_of(space)
    offered = root.domain("size", "q.2")
    assert 12 not in offered and {3, 5, 6, 7, 8, 16} <= set(offered)
    kept = ["size", ["p.2"], [4]]
    winner = [["size", ["q.2"], [12]], kept, ["dim_kind", ["q.2"], ["UNROLL"]]]
    assert [(i, d.args) for i, d, _ in missing_tiles(root, winner)] == [(0, ("q.2",))]
    below, above = tile_mappings(root, winner)
    assert below.decisions == [["size", ["q.2"], [8]], kept, winner[2]]
    assert above.decisions == [["size", ["q.2"], [16]], kept, winner[2]]
    assert below.mapped == ["size(q.2) = 12 -> 8"] and above.mapped == ["size(q.2) = 12 -> 16"]
    # A set of sizes maps each of its own, and keeps agreeing with the final size.
    kept_open = [["size", ["q.2"], [8, 12]], ["size", ["q.2"], [12]]]
    below, above = tile_mappings(root, kept_open)
    assert below.decisions == [["size", ["q.2"], [8]], ["size", ["q.2"], [8]]]
    assert above.decisions == [["size", ["q.2"], [8, 16]], ["size", ["q.2"], [16]]]
    assert above.mapped == ["size(q.2) = 8|12 -> 8|16", "size(q.2) = 12 -> 16"]
    # Every tile offered: nothing to map. Past the largest tile: only the one below.
    assert tile_mappings(root, [kept]) == []
    beyond = tile_mappings(root, [["size", ["q.2"], [max(offered) + 1]]])
    assert [m.decisions for m in beyond] == [[["size", ["q.2"], [max(offered)]]]]


def test_the_fastest_right_program_is_kept(dynamic: tuple) -> None:
    """A program that writes nothing is wrong; the right one slowed by a busy loop loses
    to itself without it."""
    fixed, dyn, space = dynamic
    plug = get_target("cpu")
    leaf = random_implementation(root_of(space), random.Random(0))
    data = Datasets(dyn, "conv2d", fixed, [SIZES], 0)

    def program(entry: str, slow: bool = False) -> str:
        source = plug.print_program(leaf, entry).source
        if slow:  # a busy loop first in the entry's body
            body = source.index("{", source.index(f"void {entry}(")) + 1
            source = (source[:body] + "\n    for (volatile long spin = 0; spin < 20000000; "
                      "++spin) {}" + source[body:])
        return source

    nothing = "#include <stdint.h>\n" + declaration("conv2d_alt0", signature(dyn)) + " {}\n"
    programs = [("conv2d_alt0", nothing), ("conv2d_alt1", program("conv2d_alt1", slow=True)),
                ("conv2d_alt2", program("conv2d_alt2"))]
    best, times = fastest_right(dyn, programs, data[0], 0.01)
    assert times[0] is None and times[1] is not None and times[2] is not None
    assert best == 2 and times[2] < times[1]


@pytest.mark.slow
def test_a_winner_with_a_missing_tile_becomes_a_right_replay(dynamic: tuple) -> None:
    """A static winner with its columns tiled by 12 (the whole 12x12 image): its
    replay over dynamic sizes, tiles mapped or not, computes the right output at its own
    size and at sizes it was not trained at."""
    fixed, dyn, space = dynamic
    plug = get_target("cpu")
    static = library_kernel("conv2d", **fixed, **SIZES)
    root = get_target("cpu").space(static).root()
    assert isinstance(root, Candidate)
    root = root.restrict("size", ["q.2"], [12])
    assert isinstance(root, Candidate)
    winner = Winner(dict(SIZES), [d.to_json() for d in random_implementation(
        root, random.Random(3)).decisions], None)
    assert missing_tiles(root_of(space), winner.decisions)
    other = [{"h": 9, "w": 7}, {"h": 3, "w": 13}]
    data = Datasets(dyn, "conv2d", fixed, [SIZES, *other], 0)
    leaf, _, dropped, _ = replayed_winner(dyn, plug, space, winner, 0, lambda s: data[0],
                                          0.005)
    assert any(d.startswith("size(q.2) = 12") for d in dropped)
    version = Version("conv2d_alt", plug.print_program(leaf, "conv2d_alt").source, [], [])
    library = compile_versions(dyn, [version])
    ffi, fn = load_function(library, "conv2d_alt", declaration("conv2d_alt", signature(dyn)))
    for d in data:
        d.reset()
        fn(*d.arguments(ffi, dyn))
        assert d.errors() == [], d.sizes
    assert np.isfinite(data[0].buffers["O"]).all()
