"""Pruning statistics (`partita stats prune`): Knuth's counts of the nodes at a depth,
before and after the cut, against the tree enumerated."""

from __future__ import annotations

import json
import random

import pytest
from click.testing import CliRunner

import partita
from partita.cli import main
from partita.model import Model
from partita.search.pruning import prune_stats
from partita.space.candidate import Candidate
from partita.tuning import target_model
from tests.search.test_strategies import RATES, small_space


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
