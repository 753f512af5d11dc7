"""A winner's tile sizes that the dynamic space does not offer, mapped to their neighbours.

A static tune may fix a tile to a dimension's whole extent (a 14x14 image's rows unrolled
14 times). Over dynamic sizes that dimension offers other tiles (powers of two and a few
more), so replaying the winner drops the decision and the space's first completion takes
the smallest tile left, 1: a register tile of one row. On conv2d 1x14x14x256->256 that
version ran 18.8 ms at 14x14, where the static winner ran 6.2 ms. The nearest offered tiles
keep the winner's structure, but which of them is faster depends on the rest of its
decisions (8 rows: 7.0 ms; 16 rows, a partial tile at 14: 15.9 ms), and so does whether
either beats the first completion. So each alternative is printed, checked and timed at the
winner's own training size, and the fastest right one becomes the version.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from partita.codegen.program import Program, signature
from partita.ir.kernel import Kernel
from partita.runtime.compile import Compiler
from partita.space.candidate import Candidate, Decision
from partita.space.decl import SpaceError
from partita.tuning.dispatch import Dataset, declaration, load_function


@dataclass
class TileMapping:
    """One alternative: the winner's decisions with its missing tile sizes replaced."""

    decisions: list[Any]
    """The decisions (JSON) to replay."""
    mapped: list[str]
    """Each replaced tile size, as ``size(d) = 14 -> 8``."""


def missing_tiles(root: Candidate, decisions: Sequence[Any]) -> list[tuple[int, Decision,
                                                                         tuple[int, ...]]]:
    """(position, decision, the values offered) of each tile size decision among
    ``decisions`` (one size, or a set a search kept open) that names a size the dynamic
    space's ``root`` does not offer; tiles of objects the root lacks (added by lowering) are
    left to the replay."""
    out = []
    for i, item in enumerate(decisions):
        d = item if isinstance(item, Decision) else Decision.from_json(item)
        if d.choice != "size":
            continue
        try:
            offered = tuple(int(v) for v in root.domain("size", *d.args))
        except SpaceError:
            continue
        if offered and any(v not in offered for v in d.values):
            out.append((i, d, offered))
    return out


def tile_mappings(root: Candidate, decisions: Sequence[Any]) -> list[TileMapping]:
    """The winner's decisions with every missing tile size replaced by the nearest value
    offered below it, then by the nearest above it (a size with no such neighbour keeps its
    value, which the replay then drops). A set of sizes maps each of its own, so that it
    keeps the size the same tile's final decision maps to (``4|20`` and then ``20`` become
    ``4|16`` and ``16``). Empty when the space offers every tile the winner chose."""
    missing = missing_tiles(root, decisions)
    out: list[TileMapping] = []
    for below in (True, False):
        replaced, mapped = list(decisions), []
        for i, d, offered in missing:
            values = []
            for wanted in d.values:
                side = [v for v in offered if (v < wanted if below else v > wanted)]
                values.append(wanted if wanted in offered or not side
                              else max(side) if below else min(side))
            values = list(dict.fromkeys(values))
            if values == list(d.values):
                continue
            replaced[i] = Decision(d.choice, d.args, tuple(values)).to_json()
            was, now = "|".join(map(str, d.values)), "|".join(map(str, values))
            mapped.append(f"{d.choice}({', '.join(d.args)}) = {was} -> {now}")
        if mapped:
            out.append(TileMapping(replaced, mapped))
    return out


def fastest_right(dyn: Kernel, programs: Sequence[tuple[str, str]], dataset: Dataset,
                  measure_s: float) -> tuple[int | None, list[float | None]]:
    """The index of the fastest of ``programs`` ((entry, source) of the dynamic kernel,
    entries distinct) that computes the right outputs on ``dataset``, and each one's time
    there (None where wrong); None when every one is wrong."""
    params = signature(dyn)
    library = Compiler().build_linked(
        [Program(dyn, entry, source, params) for entry, source in programs]).path
    times: list[float | None] = []
    for entry, _ in programs:
        ffi, fn = load_function(library, entry, declaration(entry, params))
        times.append(dataset.run_checked(fn, dataset.arguments(ffi, dyn), measure_s)[1])
    right = [i for i, t in enumerate(times) if t is not None]
    return (min(right, key=lambda i: times[i] or 0.0) if right else None), times
