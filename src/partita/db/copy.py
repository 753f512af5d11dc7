"""Copying the records of one database into another (a SQLite file into a shared PostgreSQL
server, or back), so that measurements taken alone can be shared, and shared ones kept.

Ids are the destination's: every row's references are remapped through the rows copied
before it (kernels and machines, then runs, evaluations, best implementations, size-generic
kernels and the hosts that timed evaluations). A row the destination already holds is
skipped, found by what identifies it there:

=================  ===========================================================================
kernels            the structural hash
machines           the machine key
runs               kernel, machine, target, strategy, host, process and start time
evaluations        run, index, decisions and the time it was recorded
best               kernel, machine and target: the faster of the two is kept
generic kernels    kernel, machine and target (with their versions and training runs)
hosts              machine and host name
=================  ===========================================================================

so that copying twice adds nothing the second time. Each table is copied in one transaction
of the destination.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from partita.db.records import TABLE_KEYS, Records

TABLES = tuple(TABLE_KEYS)
"""The tables copied, every one of the schema, in the order their references need."""

RUN_KEY = ("kernel_id", "machine_id", "target", "strategy", "host", "pid", "started_at")
EVALUATION_KEY = ("run_id", "idx", "decisions_hash", "created_at")
HOST_KEY = ("machine_id", "name")


def _insert_sql(table: str, columns: Sequence[str]) -> str:
    return (f"INSERT INTO {table}({', '.join(columns)}) "
            f"VALUES ({', '.join('?' for _ in columns)})")


class _Copy:
    """One copy from ``src`` to ``dst``: the id maps built table by table, and the counts."""

    def __init__(self, src: Records, dst: Records) -> None:
        self.src, self.dst = src, dst
        self.ids: dict[str, dict[int, int]] = {t: {} for t in TABLES}
        self.counts: dict[str, int] = dict.fromkeys(TABLES, 0)

    def by_unique(self, table: str, key: str) -> None:
        """Kernels and machines: matched by their unique column, inserted where missing."""
        rows = self.src.rows(table)
        have = {r[key]: int(r["id"]) for r in self.dst.rows(table)}
        ids = self.ids[table]

        def write(conn: Any) -> int:
            added = 0
            for row in rows:
                if row[key] in have:
                    ids[int(row["id"])] = have[row[key]]
                    continue
                columns = [c for c in row if c != "id"]
                new = self.dst.insert_id(conn, _insert_sql(table, columns),
                                         [row[c] for c in columns])
                ids[int(row["id"])] = new
                added += 1
            return added

        self.counts[table] = self.transaction(f"copying {table}", write, ids)

    def by_key(self, table: str, key: Sequence[str], refs: dict[str, str]) -> None:
        """Runs and evaluations: references remapped (``refs``: column to the table it names),
        matched by ``key`` (after remapping), inserted where missing."""
        have = {tuple(r[c] for c in key): int(r["id"]) for r in self.dst.rows(table)}
        ids = self.ids[table]
        rows = [self.remapped(r, refs) for r in self.src.rows(table)]

        def write(conn: Any) -> int:
            added = 0
            for old, row in rows:
                found = have.get(tuple(row[c] for c in key))
                if found is None:
                    found = self.dst.insert_id(conn, _insert_sql(table, list(row)),
                                               list(row.values()))
                    added += 1
                ids[old] = found
            return added

        self.counts[table] = self.transaction(f"copying {table}", write, ids)

    def remapped(self, row: dict[str, Any], refs: dict[str, str]) -> tuple[int, dict[str, Any]]:
        """(the row's id in the source, the row without its id and with references mapped)."""
        out = {c: v for c, v in row.items() if c != "id"}
        for column, table in refs.items():
            if out[column] is not None:
                out[column] = self.ids[table].get(int(out[column]))
        return int(row["id"]), out

    def best(self) -> None:
        """Best implementations: inserted, or kept as the faster of the two (as
        :meth:`Records.offer_best` does); a tie leaves the destination's."""
        rows = [self.remapped({"id": 0, **r}, {"kernel_id": "kernels", "machine_id": "machines",
                                                "evaluation_id": "evaluations"})[1]
                for r in self.src.rows("best")]

        def write(conn: Any) -> int:
            changed = 0
            for row in rows:
                columns = list(row)
                cur = conn.execute(
                    _insert_sql("best", columns) + " ON CONFLICT(kernel_id, machine_id, target) "
                    "DO UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in columns[3:])
                    + " WHERE excluded.time_s < best.time_s", [row[c] for c in columns])
                changed += max(cur.rowcount, 0)
            return changed

        self.counts["best"] = self.transaction("copying best implementations", write)

    def generic(self) -> None:
        """Size-generic kernels the destination lacks, with their versions and training."""
        have = {(r["kernel_id"], r["machine_id"], r["target"])
                for r in self.dst.rows("generic_kernels")}
        refs = {"kernel_id": "kernels", "machine_id": "machines"}
        heads = [self.remapped(r, refs) for r in self.src.rows("generic_kernels")]
        children = {t: self.src.rows(t) for t in ("generic_versions", "generic_training")}
        ids = self.ids["generic_kernels"]

        def write(conn: Any) -> int:
            added = 0
            for old, row in heads:
                if (row["kernel_id"], row["machine_id"], row["target"]) in have:
                    continue
                ids[old] = self.dst.insert_id(conn, _insert_sql("generic_kernels", list(row)),
                                              list(row.values()))
                added += 1
                for table, rows in children.items():
                    for child in rows:
                        if child["generic_id"] == old:
                            values = {**child, "generic_id": ids[old]}
                            conn.execute(_insert_sql(table, list(values)),
                                         list(values.values()))
                            self.counts[table] += 1
            return added

        self.counts["generic_kernels"] = self.transaction("copying size-generic kernels",
                                                          write, ids)

    def transaction(self, doing: str, write: Callable[[Any], int],
                    ids: dict[int, int] | None = None) -> int:
        # A retried transaction starts over: forget what the failed try mapped or counted.
        saved_ids = dict(ids) if ids is not None else None
        saved_counts = dict(self.counts)

        def attempt(conn: Any) -> int:
            if ids is not None and saved_ids is not None:
                ids.clear()
                ids.update(saved_ids)
            self.counts.update(saved_counts)
            return write(conn)

        return self.dst.write(doing, attempt)


def copy_records(src: Records, dst: Records) -> dict[str, int]:
    """Copy every record of ``src`` that ``dst`` lacks into ``dst``; the number of rows added
    per table (for ``best``: rows added or replaced by a faster one)."""
    job = _Copy(src, dst)
    job.by_unique("kernels", "structural_hash")
    job.by_unique("machines", "key")
    job.by_key("runs", RUN_KEY, {"kernel_id": "kernels", "machine_id": "machines"})
    job.by_key("evaluations", EVALUATION_KEY, {"run_id": "runs", "kernel_id": "kernels",
                                                "machine_id": "machines"})
    job.best()
    job.generic()
    job.by_key("hosts", HOST_KEY, {"machine_id": "machines"})
    return job.counts
