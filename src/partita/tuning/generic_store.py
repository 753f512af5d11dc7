"""What the records keep of a size-generic kernel, and what a new tune of it reuses.

A size-generic kernel is recorded under the kernel over dynamic sizes (its structural hash
names the fixed parameters too), per machine and target (:meth:`partita.db.Records.
save_generic`): its versions (decisions, the training sizes each won at), its thresholds and
chain, and per training size the static winner, each version's time, the version chosen and
the dispatcher's time, with every threshold run taken (thresholds given, time).

A new tune of the same kernel with more training sizes *refines* it (Munksgaard's thesis,
"Futhark", ch. 7, tunes thresholds on datasets that can be added to): what is recorded is
reused wherever it still holds, and only what is new is measured.

- a training size already recorded is not tuned again: its winner is the static best the
  records hold for it now (the one recorded with the kernel, or a better one a continued
  static tune found since);
- a version's time at a training size is reused when the version (its decisions over
  dynamic sizes) was timed there before: the same decisions print the same code, which was
  checked against the reference there already;
- a threshold run is reused when the versions are the very ones the run was taken with (the
  same decisions in the same branch order: :func:`versions_key`) and the thresholds are the
  same: the dispatcher then runs the same version on the same inputs;
- a dispatcher's time at a training size is reused on the same versions when it chooses the
  same version there.

Everything else (a new version at every size, every threshold run once the versions changed)
is measured afresh.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from partita.db.rows import GenericRow

Sizes = dict[str, int]


@dataclass
class Winner:
    """The static tune at one training size: its best decisions and time."""

    sizes: Sizes
    decisions: list[Any]
    time: float | None


@dataclass
class RecordedReplay:
    """A recorded version's decisions over dynamic sizes, and the winner's decisions its
    replay dropped (or mapped) and completed."""

    decisions: list[Any]
    dropped: list[str]
    completed: list[str]


def sizes_key(sizes: Sizes) -> str:
    """A training size as a dictionary key (the order of the names does not matter)."""
    return json.dumps(sizes, sort_keys=True)


def decisions_key(decisions: Sequence[Any]) -> str:
    return json.dumps(list(decisions), sort_keys=True)


def versions_key(decisions: Sequence[Sequence[Any]],
                 properties: Sequence[Sequence[str]] = ()) -> str:
    """The key of the versions in branch order and of the properties their branches compare
    (none given: the work at every branch): threshold runs hold only for the same."""
    content: Any = [list(d) for d in decisions]
    if properties:
        content = {"versions": content, "properties": [list(p) for p in properties]}
    text = json.dumps(content, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def threshold_key(sizes: Sizes, thresholds: Sequence[float | None]) -> tuple[str, str]:
    return sizes_key(sizes), json.dumps([None if t is None else float(t) for t in thresholds])


@dataclass
class Timings:
    """What one tune measured, and what it took from the records instead."""

    fresh: list[tuple[str, Sizes]] = field(default_factory=list)
    """(what was timed: a version's entry, or ``dispatcher``; at which training size)."""
    reused: int = 0
    """Timings taken from the records instead of measured."""
    threshold_runs: list[dict[str, Any]] = field(default_factory=list)
    """Every threshold run of this tune, taken or reused (as the records keep them)."""

    def rename(self, entries: dict[str, str]) -> None:
        """The versions timed so far called by their new entries (the chain renumbers
        them in its order)."""
        self.fresh = [(entries.get(what, what), sizes) for what, sizes in self.fresh]


class Recorded:
    """A recorded size-generic kernel (or none), as lookups for a new tune to reuse."""

    def __init__(self, row: GenericRow | None) -> None:
        self.row = row
        self.winners: dict[str, Winner] = {}
        self.times: dict[tuple[str, str], float] = {}
        self.runs: dict[tuple[str, str], float | None] = {}
        self.chosen: dict[str, tuple[int, float]] = {}
        self.replays: dict[str, tuple[str, RecordedReplay]] = {}
        """Per training size: (its winner's decisions, the version that winner became)."""
        if row is None:
            return
        version_keys = [decisions_key(v.decisions) for v in row.versions]
        for t in row.training:
            key = sizes_key(t.sizes)
            self.winners[key] = Winner(dict(t.sizes), list(t.static_decisions), t.static_time_s)
            for v in row.versions:
                if key in (sizes_key(s) for s in v.won_at):
                    self.replays[key] = (decisions_key(t.static_decisions), RecordedReplay(
                        list(v.decisions), list(v.dropped), list(v.completed)))
            for vk, time in zip(version_keys, t.version_times, strict=False):
                if time is not None:
                    self.times[(vk, key)] = time
            if t.dispatcher_time_s is not None:
                self.chosen[key] = (t.chosen, t.dispatcher_time_s)
        for r in row.threshold_runs:
            self.runs[threshold_key(r["sizes"], r["thresholds"])] = r["time_s"]

    @property
    def sizes(self) -> list[Sizes]:
        """The training sizes recorded, in their order."""
        return [dict(w.sizes) for w in self.winners.values()]

    def winner(self, sizes: Sizes) -> Winner | None:
        return self.winners.get(sizes_key(sizes))

    def update_winner(self, winner: Winner) -> None:
        """The static best recorded now at a recorded training size (a static tune continued
        since may have improved on the winner the kernel was built from)."""
        key = sizes_key(winner.sizes)
        if key in self.winners:
            self.winners[key] = winner

    def replay(self, winner: Winner) -> RecordedReplay | None:
        """The version ``winner`` became when it was recorded (the replay chosen then, its
        tiles mapped or not), or None where the winner is new or changed since."""
        found = self.replays.get(sizes_key(winner.sizes))
        if found is None or found[0] != decisions_key(winner.decisions):
            return None
        return found[1]

    def version_time(self, decisions: Sequence[Any], sizes: Sizes) -> float | None:
        """The recorded time of the version with ``decisions`` at ``sizes``, or None."""
        return self.times.get((decisions_key(decisions), sizes_key(sizes)))

    def same_versions(self, key: str) -> bool:
        return self.row is not None and self.row.versions_key == key

    def threshold_run(self, key: str, sizes: Sizes, thresholds: Sequence[float | None]
                      ) -> tuple[bool, float | None]:
        """(found, time: None for a failed run) of a threshold run on the versions ``key``."""
        if not self.same_versions(key):
            return False, None
        found = threshold_key(sizes, thresholds)
        return found in self.runs, self.runs.get(found)

    def dispatcher_time(self, key: str, sizes: Sizes, chosen: int) -> float | None:
        """The recorded dispatcher time at ``sizes`` on the versions ``key``, where it chose
        ``chosen`` then too."""
        if not self.same_versions(key):
            return None
        was = self.chosen.get(sizes_key(sizes))
        return was[1] if was is not None and was[0] == chosen else None
