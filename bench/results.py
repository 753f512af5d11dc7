"""The benchmarks' results as data: one JSON file per section in ``bench/results/``.

Each benchmark script writes its section of BENCHMARKS.md and, beside it, a file
``<section>.json`` holding one record per case: what partita reached, the reference it is
compared with, their ratio, the target and whether it is met, when and on which build it was
measured, the command that reproduces it, and the machine description it was measured with.
``bench/summary.py`` reads every file to write the summary table and plot at the top of
BENCHMARKS.md. ``prune.json`` has no script: its records (``partita stats prune`` runs) are
written by hand in the same form. A record (all keys always present, ``None`` where a figure
does not apply)::

    {"case": "sgemm 1024^3", "quantity": "time", "unit": "s",
     "partita": 0.02024, "reference": {"name": "numpy/OpenBLAS", "value": 0.01474},
     "ratio": 1.37, "target": {"applies_to": "ratio", "op": "<=", "value": 1.1},
     "met": false, "date": "2026-11-26", "commit": "f4e90bc", "command": "...",
     "machine": {...}, "details": {...}}

``commit`` is the build measured (for figures carried over from an earlier page, the commit
that published them, as their ``details.provenance`` says). ``ratio`` is partita's figure
over the reference's, in the reference's unit (a time over a time, a bandwidth over a
bandwidth); ``target.applies_to`` says whether the target bounds the ratio or partita's own
figure (descents per second, a pruning factor).
"""

from __future__ import annotations

import datetime
import json
import math
import subprocess
import textwrap
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"
"""Where the scripts write their results by default (committed with BENCHMARKS.md)."""

SECTIONS = ("tune", "call", "prune", "space")
"""The order of the sections in the summary; files of other names follow, by name."""

Record = dict[str, Any]

UNITS = ("s", "GB/s", "fraction", "descents/s", "x")
"""What a record's ``partita`` and reference figures are measured in."""


def machine(*, model: str, cores: int | None, avx512: bool | None,
            peak_gflops_fp32: float | None, stream_triad_gbs: float | None,
            source: str, root_bound_ms: float | None = None, notes: str = "",
            kind: str = "cpu") -> dict[str, Any]:
    """A machine description; ``None`` for a figure the measurement did not state. ``kind``
    is 'cpu' or 'gpu' (a GPU has no AVX-512 and no STREAM triad to state)."""
    return {"kind": kind, "model": model, "cores": cores, "avx512": avx512,
            "peak_gflops_fp32": peak_gflops_fp32, "stream_triad_gbs": stream_triad_gbs,
            "source": source, "root_bound_ms": root_bound_ms, "notes": notes}


def target(op: str, value: float, applies_to: str = "ratio") -> dict[str, Any]:
    """A target: ``op`` is '<=' or '>='; it bounds the ratio or partita's own figure."""
    if op not in ("<=", ">=") or applies_to not in ("ratio", "partita"):
        raise ValueError(f"target {applies_to} {op} {value}: op must be <= or >=, "
                         "applies_to ratio or partita")
    return {"applies_to": applies_to, "op": op, "value": value}


def is_met(tgt: dict[str, Any] | None, partita: float | None, ratio: float | None
           ) -> bool | None:
    """Whether ``tgt`` is met (``None`` without a target or without the figure it bounds)."""
    if tgt is None:
        return None
    figure = ratio if tgt["applies_to"] == "ratio" else partita
    if figure is None or figure != figure:  # NaN: nothing measured
        return None
    return figure <= tgt["value"] if tgt["op"] == "<=" else figure >= tgt["value"]


def record(case: str, *, quantity: str, unit: str, partita: float | None,
           reference_name: str | None = None, reference: float | None = None,
           tgt: dict[str, Any] | None = None, command: str, machine_desc: dict[str, Any],
           date: str | None = None, commit: str | None = None,
           details: dict[str, Any] | None = None) -> Record:
    """One case's result; the ratio and whether the target is met follow from the figures."""
    if unit not in UNITS:
        raise ValueError(f"{case}: unit {unit!r} is not one of {', '.join(UNITS)}")
    ratio = partita / reference if partita is not None and reference else None
    return {"case": case, "quantity": quantity, "unit": unit, "partita": partita,
            "reference": None if reference_name is None
            else {"name": reference_name, "value": reference},
            "ratio": ratio, "target": tgt, "met": is_met(tgt, partita, ratio),
            "date": date or datetime.date.today().isoformat(),
            "commit": commit if commit is not None else git_commit(),
            "command": command, "machine": machine_desc, "details": details or {}}


def git_commit() -> str | None:
    """The short hash of the checked-out build (``None`` outside a git checkout)."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True, cwd=Path(__file__).resolve().parent)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip() or None


def write_results(section: str, title: str, records: list[Record],
                  directory: Path = RESULTS_DIR, keep_other_cases: bool = False) -> Path:
    """Write ``directory/<section>.json``. With ``keep_other_cases`` (a rerun of some cases),
    the records already there for other cases stay, in their order, the new ones replacing
    theirs by case."""
    path = Path(directory) / f"{section}.json"
    if keep_other_cases and path.exists():
        fresh = {r["case"]: r for r in records}
        old = json.loads(path.read_text())["results"]
        merged = [fresh.pop(r["case"], r) for r in old]
        records = merged + list(fresh.values())
    path.parent.mkdir(parents=True, exist_ok=True)
    data = plain({"section": section, "title": title, "results": records})
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False, allow_nan=False) + "\n")
    return path


def plain(value: Any) -> Any:
    """``value`` as strict JSON: a figure not measured (NaN, infinite) becomes ``None``,
    tuples lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def load_results(directory: Path = RESULTS_DIR) -> list[tuple[str, list[Record]]]:
    """Every section's title and records, in :data:`SECTIONS` order, then the others."""
    files = sorted(Path(directory).glob("*.json"),
                   key=lambda p: (SECTIONS.index(p.stem) if p.stem in SECTIONS
                                  else len(SECTIONS), p.stem))
    loaded = []
    for path in files:
        data = json.loads(path.read_text())
        loaded.append((str(data["title"]), list(data["results"])))
    return loaded


def machine_line(desc: dict[str, Any]) -> str:
    """The description in words, e.g. 'AMD EPYC, 2 cores, without AVX-512, peak 200 GFLOP/s
    fp32, STREAM triad 28.7 GB/s'; a figure the measurement did not state says so."""
    cpu = desc.get("kind", "cpu") == "cpu"
    parts = [desc["model"]]
    if desc.get("cores"):
        parts.append(f"{desc['cores']} cores")
    avx = desc.get("avx512")
    if cpu:
        parts.append("AVX-512 not stated" if avx is None
                     else "with AVX-512" if avx else "without AVX-512")
    peak, stream = desc.get("peak_gflops_fp32"), desc.get("stream_triad_gbs")
    parts.append("peak not stated" if peak is None else f"peak {peak / 1000:g} TFLOP/s fp32"
                 if peak >= 10000 else f"peak {peak:g} GFLOP/s fp32")
    if cpu or stream is not None:
        parts.append("STREAM triad not stated" if stream is None
                     else f"STREAM triad {stream:g} GB/s")
    if desc.get("root_bound_ms") is not None:
        parts.append(f"root bound {desc['root_bound_ms']:g} ms")
    text = ", ".join(parts)
    if desc.get("source") == "nominal":
        text += " (a nominal estimate: `partita machine` had not measured this host)"
    if desc.get("notes"):
        text += f"; {desc['notes']}"
    return text


def provenance(command: str, rec: Record, how: str = "") -> str:
    """The paragraph that opens a section: the command that reproduces its figures (``how``
    adds to it, e.g. ', seed 0'), when and on which build they were measured, and the machine
    description, wrapped as the rest of the page."""
    # The command is kept on one line, so that a search for its options finds them.
    text = (f"Measured with `{command.replace(' ', NBSP)}` (part of `make bench`){how} on "
            f"{rec['date']}, build {rec['commit'] or 'unknown'}. Machine, as `partita machine` "
            f"describes it: {machine_line(rec['machine'])}.")
    return textwrap.fill(text, width=96, break_long_words=False,
                         break_on_hyphens=False).replace(NBSP, " ")


NBSP = "\u00a0"
"""Joins the words of a command while a paragraph is wrapped."""
