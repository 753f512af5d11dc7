"""The hosts that timed evaluations, and the description of each one's machine.

On a cluster, candidates are timed by the measuring workers of several hosts of one machine
kind (same CPU and compiler: one records key). Such hosts can still differ (clock, memory
channels, a neighbour sharing the socket), so each measuring worker sends the description of
its machine as ``partita machine`` measures it with its results, and the tuner keeps it here
once per host: the ``hosts`` table, one row per (machine, host name), holding the latest
description received and when the host was first and last seen.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from partita.db.records import Records
from partita.db.values import dumps

SUMMARY_KEYS = ("peak_gflops", "peak_gflops_fp64", "triad_gbs", "source", "model", "cores",
                "frequency_ghz", "caches", "notes")
"""What ``partita show --json`` gives of each host's description (None where unknown)."""


def record_host(rec: Records, machine_id: int, name: str,
                description: Mapping[str, Any]) -> None:
    """Record that host ``name`` (of machine ``machine_id``) timed evaluations now, with the
    description its measuring worker sent (kept as the host's latest; an empty one keeps
    what was known)."""
    if not name:
        raise ValueError("a host needs a name")
    text = dumps(dict(description), "host description", sort_keys=True)
    now = time.time()
    rec.write("recording a host", lambda conn: conn.execute(
        "INSERT INTO hosts(machine_id, name, description, first_seen, last_seen) "
        "VALUES (?, ?, ?, ?, ?) ON CONFLICT(machine_id, name) DO UPDATE SET "
        "description = CASE WHEN excluded.description = '{}' THEN hosts.description "
        "ELSE excluded.description END, last_seen = excluded.last_seen",
        (machine_id, name, text, now, now)))


def host_descriptions(rec: Records, machine_id: int) -> dict[str, dict[str, Any]]:
    """The hosts recorded for machine ``machine_id``: by name, the description (decoded)
    with ``first_seen`` and ``last_seen``."""
    rows = rec.query("reading the hosts", "SELECT name, description, first_seen, last_seen "
                     "FROM hosts WHERE machine_id = ? ORDER BY name", (machine_id,))
    return {str(r["name"]): {**json.loads(r["description"] or "{}"),
                             "first_seen": r["first_seen"], "last_seen": r["last_seen"]}
            for r in rows}


def host_summaries(rec: Records, kernel_id: int, machine_id: int) -> list[dict[str, Any]]:
    """Per host that timed evaluations of kernel ``kernel_id`` on machine ``machine_id``
    (the measuring host on a cluster, else the run's own host), by name: ``host``,
    ``evaluations`` and the summary of its recorded description (:data:`SUMMARY_KEYS`, None
    where no description was received, as for a local tune)."""
    # GROUP BY 1: the output column, where PostgreSQL would read a bare 'host' as r.host.
    counts = rec.query(
        "counting the evaluations of each host",
        "SELECT CASE WHEN e.measured_on != '' THEN e.measured_on ELSE r.host END AS host, "
        "count(*) AS evaluations FROM evaluations e JOIN runs r ON r.id = e.run_id "
        "WHERE e.kernel_id = ? AND e.machine_id = ? GROUP BY 1 ORDER BY 1",
        (kernel_id, machine_id))
    described = host_descriptions(rec, machine_id)
    out = []
    for row in counts:
        desc = described.get(str(row["host"]), {})
        out.append({"host": str(row["host"]), "evaluations": int(row["evaluations"]),
                    **{k: desc.get(k) for k in SUMMARY_KEYS}})
    return out


def evaluation_host(rec: Records, evaluation_id: int | None) -> str:
    """The host that timed evaluation ``evaluation_id`` (its measuring host on a cluster,
    else its run's host); '' where there is no such evaluation."""
    if evaluation_id is None:
        return ""
    rows = rec.query("reading the host of an evaluation",
                     "SELECT e.measured_on, r.host FROM evaluations e "
                     "JOIN runs r ON r.id = e.run_id WHERE e.id = ?", (evaluation_id,))
    return str(rows[0]["measured_on"] or rows[0]["host"]) if rows else ""
