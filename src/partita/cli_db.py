"""``partita db``: the records databases themselves (``copy`` between a file and a server)."""

from __future__ import annotations

import json
import sys

import click

from partita.db import Records, RecordsError, location, records_exist
from partita.db.copy import copy_records


@click.group("db")
def db_cmd() -> None:
    """The tuning records databases: SQLite files and PostgreSQL servers
    (postgresql://USER@HOST:PORT/DBNAME)."""


@db_cmd.command("copy")
@click.argument("src")
@click.argument("dst")
@click.option("--json", "as_json", is_flag=True, help="Print the counts as one JSON object.")
def copy_cmd(src: str, dst: str, as_json: bool) -> None:
    """Copy every record of SRC that DST lacks into DST (files or URLs, either way); ids are
    renumbered, and what DST already holds is skipped, so copying twice adds nothing."""
    if not records_exist(src):
        click.echo(f"error: no tuning records at {location(src)}", err=True)
        sys.exit(2)
    try:
        with Records(src) as source, Records(dst) as target:
            if source.path == target.path:
                raise click.UsageError("SRC and DST are the same records")
            counts = copy_records(source, target)
    except RecordsError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    if as_json:
        click.echo(json.dumps(counts))
        return
    click.echo(f"copied {source.path} into {target.path}:")
    for table, count in counts.items():
        click.echo(f"  {table:<18} {count} added")
