"""Records are data: the code of a recorded best is printed again from its decisions, never
compiled from the source stored beside them."""

from __future__ import annotations

import sqlite3
import warnings
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import partita
from partita.cli import main

# One worker runs this module, so its module fixtures (a tune each) are built once.
pytestmark = pytest.mark.xdist_group("test_records_as_data")


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, partita.Tuned]:
    db = tmp_path_factory.mktemp("records") / "records.sqlite"
    tuned = partita.tune(partita.kernel("axpy", n=4096), evaluations=4, db=db)
    return db, tuned


def test_a_recorded_best_is_printed_again_identically(records: tuple[Path, partita.Tuned]
                                                      ) -> None:
    db, tuned = records
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = partita.load(partita.kernel("axpy", n=4096), db=db)
    assert again.source == tuned.source and again.decisions == tuned.decisions


def test_a_stored_source_is_never_run(records: tuple[Path, partita.Tuned], tmp_path: Path
                                      ) -> None:
    db, tuned = records
    edited = tmp_path / "edited.sqlite"
    edited.write_bytes(db.read_bytes())
    with sqlite3.connect(edited) as con:
        con.execute("UPDATE best SET source = 'void partita_axpy(void) { abort(); }'")
    with pytest.warns(UserWarning, match="differs from the code that was measured"):
        loaded = partita.load(partita.kernel("axpy", n=4096), db=edited)
    assert loaded.source == tuned.source
    x = np.ones(4096, np.float32)
    np.testing.assert_array_equal(loaded(2.0, x, x), 3.0)
    out = tmp_path / "lib"
    result = CliRunner().invoke(main, ["export", "axpy", "n=4096", "--db", str(edited),
                                       "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "abort" not in (out / "partita_axpy.c").read_text()


def test_decisions_that_no_longer_replay_are_a_clear_error(
        records: tuple[Path, partita.Tuned], tmp_path: Path) -> None:
    db, _ = records
    edited = tmp_path / "stale.sqlite"
    edited.write_bytes(db.read_bytes())
    with sqlite3.connect(edited) as con:
        con.execute("""UPDATE best SET decisions = '[["size", ["i.1"], 3]]'""")
    with pytest.raises(LookupError, match="tune it again"):
        partita.load(partita.kernel("axpy", n=4096), db=edited)
