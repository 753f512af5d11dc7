"""Pruning statistics (`partita stats prune`): Knuth's counts of the nodes at a depth,
before and after the cut, against the tree enumerated."""

from __future__ import annotations

import json
import random
import zlib

import pytest
from click.testing import CliRunner

import partita
from partita.cli import main
from partita.model import Model
from partita.model.bound import Bound
from partita.search.pruning import prune_stats
from partita.space.candidate import Candidate
from partita.tuning import target_model
from tests.search.test_strategies import RATES, all_implementations, small_space


def nodes_at(root: Candidate, depth: int, reverse: bool = False) -> list[Candidate]:
    """Every candidate at ``depth`` of the tree (first open choice first, or last)."""
    level = [root]
    for _ in range(depth):
        nxt = []
        for c in level:
            if c.is_implementation:
                continue
            slots = c.open_slots()
            nxt.extend(k for _, k in c.children(slots[-1] if reverse else slots[0])
                       if isinstance(k, Candidate))
        level = nxt
    return level


@pytest.mark.slow
@pytest.mark.parametrize("reverse", [False, True])
def test_node_counts_match_the_enumerated_tree(reverse: bool) -> None:
    space = small_space()
    model = Model(RATES)
    root = space.root()
    assert isinstance(root, Candidate)
    nodes = nodes_at(root, 3, reverse)
    bounds = sorted(model.bound(c).time_s for c in nodes)
    cut = bounds[len(bounds) // 2]  # about half the nodes are at or above it
    # A node is cut when its bound, or one of its ancestors', reaches the cut; bounds only
    # grow down the tree, so the node's own decides.
    kept = sum(b < cut for b in bounds)
    assert 0 < kept < len(nodes)
    stats = prune_stats(space, model, 3, cut, 3000, random.Random(0), reverse=reverse)
    assert stats["nodes_before"] == pytest.approx(len(nodes), rel=0.1)
    assert stats["nodes_after"] == pytest.approx(kept, rel=0.1)
    assert stats["pruned_factor"] == pytest.approx(len(nodes) / kept, rel=0.2)


def test_stats_prune_runs_on_the_gpu_space() -> None:
    out = CliRunner().invoke(main, ["stats", "prune", "axpy", "n=4096", "--target", "gpu",
                                    "--depth", "3", "--samples", "20", "--cut", "1",
                                    "--json"])
    assert out.exit_code == 0, out.output
    result = json.loads(out.output)
    k = partita.kernel("axpy", n=4096)
    root = partita.space(k, "gpu").root()
    assert result["target"] == "gpu" and result["depth"] == 3
    assert result["root_bound_s"] == pytest.approx(target_model(k, "gpu").bound(root).time_s)
    assert result["nodes_after"] == pytest.approx(result["nodes_before"], rel=0.5)



class LeafPenaltyModel:
    """The bound of :class:`Model`, four times higher on about half of the implementations
    (chosen by their decisions): a model that knows more of complete implementations than of
    partial ones, so that some nodes kept by their bound hold nothing below the cut.

    A bound is a function of the candidate's decisions: each is computed once and kept, for
    the test's two runs of ``prune_stats`` draw the same candidates (the second checks just
    that) and the enumerations below revisit the same leaves."""

    def __init__(self) -> None:
        self.model = Model(RATES)
        self.bounds: dict[str, Bound] = {}

    def bound(self, cand: Candidate) -> Bound:
        key = cand.decisions_json()
        if key not in self.bounds:
            b = self.model.bound(cand)
            if cand.is_implementation and zlib.crc32(key.encode()) % 2:
                b = Bound(4 * b.time_s, b.terms)
            self.bounds[key] = b
        return self.bounds[key]


@pytest.mark.slow
def test_witnesses_match_the_enumerated_tree() -> None:
    """The nodes kept that hold an implementation bounded below the cut, against the tree
    enumerated; and the ceiling is at least the pruning the bound achieves."""
    space = small_space()
    model = LeafPenaltyModel()
    root = space.root()
    assert isinstance(root, Candidate)
    leaf_bounds = sorted(model.bound(c).time_s for c in all_implementations(root))
    cut = leaf_bounds[len(leaf_bounds) // 2]
    nodes = [c for c in nodes_at(root, 3) if model.bound(c).time_s < cut]
    witnessed = sum(any(model.bound(leaf).time_s < cut for leaf in all_implementations(c))
                    for c in nodes)
    # Some nodes are kept by their bound and yet hold nothing below the cut.
    assert 0 < witnessed < len(nodes)
    stats = prune_stats(space, model, 3, cut, 3000, random.Random(0),
                        witness_dives=50)
    assert stats["nodes_after"] == pytest.approx(len(nodes), rel=0.1)
    assert stats["nodes_with_witness"] == pytest.approx(witnessed, rel=0.1)
    assert stats["nodes_with_witness"] <= stats["nodes_after"]
    assert stats["ceiling_factor"] >= stats["pruned_factor"]
    without = prune_stats(space, model, 3, cut, 3000, random.Random(0))
    assert "ceiling_factor" not in without
    # The dives draw from their own generator: the other estimates are the same.
    assert without["nodes_after"] == stats["nodes_after"]
    assert without["size_after"] == stats["size_after"]


def test_stats_prune_reports_witnesses() -> None:
    args = ["stats", "prune", "axpy", "n=4096", "--depth", "3", "--samples", "20", "--cut",
            "1e-6"]
    out = CliRunner().invoke(main, [*args, "--witnesses", "3", "--json"])
    assert out.exit_code == 0, out.output
    result = json.loads(out.output)
    assert result["witness_dives"] == 3
    assert 0 < result["nodes_with_witness"] <= result["nodes_after"]
    assert result["ceiling_factor"] >= result["pruned_factor"]
    text = CliRunner().invoke(main, [*args, "--witnesses", "3"])
    assert text.exit_code == 0 and "no bound from this model prunes more" in text.output
    bad = CliRunner().invoke(main, [*args, "--witnesses", "-1"])
    assert bad.exit_code != 0 and "--witnesses" in bad.output
