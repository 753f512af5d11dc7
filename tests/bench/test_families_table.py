"""bench/families_bench.py: its section's table is made from every recorded case (a rerun of
some cases with ``--only`` keeps the others), and a rerun of a case whose label names the
variant the tuner found replaces that case's record instead of adding a second one."""

from __future__ import annotations

import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import families_bench  # noqa: E402
from families_bench import CASES, forget_variants, table_of_records  # noqa: E402
from results import machine, record, target  # noqa: E402

HOST = machine(model="AMD EPYC", cores=2, avx512=True, peak_gflops_fp32=236.0,
               stream_triad_gbs=50.0, source="measured")
PREFIX = next(c for c in CASES if c.label.startswith("prefix_sum 2^26, chunks tuned"))
CONV = CASES[0]


def details(**extra: float) -> dict[str, float]:
    return {"gflops": 1.0, "gbs": 2.0, "evaluations": 10, "failed": 1, "bound_violations": 0,
            **extra}


def records(chunks: int) -> list[dict]:
    """A time against PyTorch, and the prefix sum's variant (a bandwidth against the triad)."""
    return [
        record(CONV.label, quantity="time", unit="s", partita=0.0012,
               reference_name="PyTorch (oneDNN)", reference=0.001, tgt=target("<=", 1.1),
               command="c", machine_desc=HOST, details=details()),
        record(f"{PREFIX.label}: chunks={chunks}", quantity="bandwidth", unit="GB/s",
               partita=20.0, reference_name="STREAM triad", reference=40.0,
               tgt=target(">=", 0.8), command="c", machine_desc=HOST,
               details=details(gbs=20.0, numpy_s=0.25)),
    ]


def test_the_table_is_made_from_the_records_in_case_order() -> None:
    rows = table_of_records(list(reversed(records(8)))).splitlines()
    assert rows[0].startswith("| case |") and len(rows) == 4
    assert rows[2].startswith(f"| {CONV.label} | 1.2 ms | PyTorch (oneDNN) 1 ms | 1.20 (<= 1.1) "
                              "not met |")
    # The variant keeps its label; its time follows from the bytes the kernel moves.
    assert rows[3].startswith(f"| {PREFIX.label}: chunks=8 | ")
    assert "50% of the triad's 40.0 GB/s (>= 80%) not met" in rows[3]
    assert "| 10 (1) | 0 |" in rows[3]
    # GFLOP/s and GB/s with their shares of the recording machine's peak and triad.
    assert rows[0].count("% of") == 2
    assert rows[2].endswith("| 1 (0%) | 2 (4%) | 10 (1) | 0 |")


def test_a_rerun_variant_replaces_the_old_one(tmp_path: Path) -> None:
    path = tmp_path / "families.json"
    path.write_text(json.dumps({"section": "families", "title": "Kernel families",
                                "results": records(32)}))
    rerun = [{"case": families_bench.dataclasses.replace(PREFIX,
                                                           label=f"{PREFIX.label}: chunks=8")}]
    forget_variants(path, rerun)
    kept = [r["case"] for r in json.loads(path.read_text())["results"]]
    assert kept == [CONV.label]
