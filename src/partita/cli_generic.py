"""``partita show``, ``export`` and ``report`` of a size-generic kernel (sizes given as ``?``):
what the records keep of it (:meth:`partita.db.Records.generic`), listed, written as the
dispatching library, or summarised as an HTML page."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from partita.cli_output import generic_json
from partita.db import GenericRow, Records, RecordsError, location, records_exist
from partita.ir.kernel import Kernel
from partita.ir.types import KernelError
from partita.kernels import get_spec
from partita.report import write_generic_report
from partita.tuning import GenericTuned, host_machine, kernel_params, load_generic, records_target
from partita.tuning.generic_tune import generic_kernel


def fail(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


def generic_fixed(kernel: str, given: dict[str, str]) -> dict[str, Any]:
    """The fixed parameters of a size-generic request: the sizes not given as ``?`` (at
    their defaults where not given at all) and every other parameter given."""
    spec = get_spec(kernel)
    dynamic = [key for key, value in given.items() if value == "?"]
    kinds = {p.name: p.kind for p in spec.params}
    for key in dynamic:
        if kinds.get(key, "size") != "size":
            raise ValueError(f"kernel {kernel!r}: {key} cannot be dynamic (only sizes can be "
                             "given as ?)")
    fixed: dict[str, Any] = {p.name: p.default for p in spec.params
                             if p.kind == "size" and p.name not in dynamic}
    return fixed | {key: value for key, value in given.items() if value != "?"}


def _records(db: str | None) -> Path | str:
    path = location(db)
    if not records_exist(db):
        fail(f"no tuning records at {path}: run `partita tune` first, or give --db")
    return path


def _loaded(kernel: str, given: dict[str, str], target: str, db: str | None
            ) -> tuple[GenericTuned, list[str]]:
    _records(db)
    try:
        return load_generic(kernel, db=db, target=target, **generic_fixed(kernel, given))
    except (LookupError, ValueError, KernelError, RecordsError) as exc:  # LookupError: none
        fail(str(exc))                                        # recorded, or stale decisions


def show_generic(kernel: str, given: dict[str, str], target: str, db: str | None,
                 as_json: bool) -> None:
    """``partita show KERNEL m=? ...``: the recorded versions, thresholds, chain and
    training runs."""
    generic, changed = _loaded(kernel, given, target, db)
    if as_json:
        click.echo(json.dumps({**generic_json(kernel, generic), "changed": changed}))
        return
    click.echo(f"{kernel} ({generic.kernel.structural_hash}) in {_records(db)}")
    click.echo(generic.report())
    for entry in changed:
        click.echo(f"  note: {entry} printed again from its decisions differs from the code "
                   "that was timed; its recorded times may not hold")


def export_generic(kernel: str, given: dict[str, str], out_dir: str, target: str,
                   db: str | None) -> None:
    """``partita export KERNEL m=? ... --out DIR``: the dispatching library, printed again
    from the recorded decisions."""
    generic, changed = _loaded(kernel, given, target, db)
    if changed:
        click.echo(f"note: the code printed again from the recorded decisions of "
                   f"{', '.join(changed)} differs from the code that was timed; the recorded "
                   "times may not hold", err=True)
    try:
        out = generic.write(out_dir)
    except OSError as exc:
        fail(f"cannot write {out_dir}: {exc}")
    for f in sorted(out.iterdir()):
        click.echo(str(f))


def generic_row(kernel: str, given: dict[str, str], target: str, db: str | None
                ) -> tuple[Kernel, GenericRow, dict[str, Any]]:
    """(the kernel over dynamic sizes, its record, this machine's fingerprint)."""
    _records(db)
    try:
        _, _, dyn = generic_kernel(kernel, target, generic_fixed(kernel, given))
        fp = host_machine()
        with Records(db) as rec:
            row = rec.generic(rec.kernel_id(dyn, kernel_params(dyn)), rec.machine_id(fp),
                              records_target(target))
    except (ValueError, KernelError, RecordsError) as exc:
        fail(str(exc))
    if row is None:
        fail(f"no size-generic {kernel} over these dynamic sizes is recorded on this "
             "machine: tune it first (sizes given as ?, --train)")
    return dyn, row, fp


def report_generic(kernel: str, params: tuple[str, ...], given: dict[str, str], out_dir: str,
                   target: str, db: str | None) -> None:
    """``partita report KERNEL m=? ... --out DIR``: the page of a size-generic kernel."""
    dyn, row, fp = generic_row(kernel, given, target, db)
    try:
        path = write_generic_report(out_dir, title=f"{kernel} {' '.join(params)}",
                                    kernel_desc=dyn.describe(), generic=row, machine=fp)
    except OSError as exc:
        fail(f"cannot write {out_dir}: {exc}")
    click.echo(str(path))

