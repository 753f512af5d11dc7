"""The summary at the top of BENCHMARKS.md: one table of every case that has a reference or a
target, and a plot of partita beside its references, both made from ``bench/results/*.json``.

Run with ``python bench/summary.py --write BENCHMARKS.md`` (each benchmark script runs it at
the end of its ``--write``). The plot goes to ``bench/summary.png`` (matplotlib's Agg backend:
no display needed) and is embedded right under the table.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: a benchmark host has no display
import matplotlib.pyplot as plt
from matplotlib.ticker import NullFormatter

from results import RESULTS_DIR, Record, load_results, machine_line
from sections import replace_section

PLOT = RESULTS_DIR.parent / "summary.png"
"""The plot's default path (committed beside the results)."""

HEAD = ("| benchmark | case | partita | reference | partita ÷ reference | target | met "
        "| machine, date (build) |\n|---|---|---|---|---|---|---|---|\n")


def figure(value: float | None, unit: str) -> str:
    """A figure in its unit, times in ms or us."""
    if value is None or value != value:
        return "-"
    if unit == "s":
        return f"{value * 1e6:.4g} us" if value < 1e-3 else f"{value * 1e3:.4g} ms"
    if unit == "fraction":
        return f"{100 * value:.1f}%"
    if unit == "x":
        return f"{value:.3g}x"
    if unit == "descents/s":
        return f"{value:.1f}/s"
    return f"{value:.3g} {unit}"


def target_text(rec: Record) -> str:
    tgt = rec["target"]
    if tgt is None:
        return "-"
    op = "≤" if tgt["op"] == "<=" else "≥"
    if tgt["applies_to"] == "ratio":
        return f"{op} {tgt['value']:g}"
    return f"{op} {figure(tgt['value'], rec['unit'])}"


def met_text(met: bool | None) -> str:
    return "-" if met is None else "met" if met else "**not met**"


def in_summary(rec: Record) -> bool:
    """A case is summed up where it is compared with something: a reference or a target."""
    return rec["reference"] is not None or rec["target"] is not None


def machine_keys(sections: list[tuple[str, list[Record]]]) -> dict[str, str]:
    """A letter per distinct machine description, in order of first appearance."""
    keys: dict[str, str] = {}
    for _, records in sections:
        for rec in records:
            line = machine_line(rec["machine"])
            if in_summary(rec) and line not in keys:
                keys[line] = chr(ord("A") + len(keys))
    return keys


def row(title: str, rec: Record, key: str) -> str:
    ref = rec["reference"]
    reference = "-" if ref is None else \
        f"{ref['name']}: {figure(ref['value'], rec['unit'])}" if ref["value"] is not None \
        else ref["name"]
    ratio = "-" if rec["ratio"] is None else f"{rec['ratio']:.2f}"
    commit = f" ({rec['commit']})" if rec.get("commit") else ""
    return (f"| {title} | {rec['case']} | {figure(rec['partita'], rec['unit'])} | {reference} "
            f"| {ratio} | {target_text(rec)} | {met_text(rec['met'])} "
            f"| {key}, {rec['date']}{commit} |")


def table(sections: list[tuple[str, list[Record]]]) -> str:
    """The summary table, then the machines its last column names."""
    keys = machine_keys(sections)
    lines = [row(title, rec, keys[machine_line(rec["machine"])])
             for title, records in sections for rec in records if in_summary(rec)]
    met = [rec["met"] for _, records in sections for rec in records
           if in_summary(rec) and rec["met"] is not None]
    legend = "\n".join(f"- **{key}**: {line}" for line, key in keys.items())
    return (HEAD + "\n".join(lines) + f"\n\nTargets met: {sum(met)} of {len(met)}. Machines "
            "(as `partita machine` described a CPU; each section\nbelow gives the command "
            "that reproduces its figures):\n\n" + legend + "\n")


def normalised_time(rec: Record) -> float | None:
    """partita's time for the case with the reference's taken as 1: the ratio of times, or
    the inverse ratio of bandwidths (the time to move the same bytes)."""
    ratio = rec["ratio"]
    if rec["reference"] is None or ratio is None or ratio != ratio or ratio <= 0:
        return None
    if rec["unit"] == "s":
        return float(ratio)
    if rec["unit"] == "GB/s":
        return 1.0 / float(ratio)
    return None


def target_time(rec: Record) -> float | None:
    """The target as a normalised time (where it bounds the ratio)."""
    tgt = rec["target"]
    if tgt is None or tgt["applies_to"] != "ratio":
        return None
    return float(tgt["value"]) if rec["unit"] == "s" else 1.0 / float(tgt["value"])


def plot(sections: list[tuple[str, list[Record]]], path: Path) -> int:
    """Horizontal bars per case: the reference (1) and partita, as times normalised to the
    reference's, on a log scale; a tick marks the target. Returns the cases plotted."""
    cases: list[tuple[str, float, float | None, str]] = []
    for _, records in sections:
        for rec in records:
            value = normalised_time(rec)
            if value is not None:
                cases.append((rec["case"], value, target_time(rec), rec["reference"]["name"]))
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.42 * max(1, len(cases))))
    ys = list(range(len(cases)))[::-1]
    height = 0.38
    ax.barh([y + height / 2 for y in ys], [1.0] * len(cases), height, color="#9e9e9e",
            label="reference = 1 (named on each row)")
    ax.barh([y - height / 2 for y in ys], [c[1] for c in cases], height, color="#1f77b4",
            label="partita")
    for y, (_, _, tgt, _) in zip(ys, cases, strict=True):
        if tgt is not None:
            ax.plot([tgt, tgt], [y - height, y + height], color="#d62728", lw=2)
    ax.plot([], [], color="#d62728", lw=2, label="target")
    ax.set_yticks(ys, [f"{c[0].replace('`', '')} (vs {c[3]})" for c in cases], fontsize=8)
    ax.set_xscale("log")
    values = [c[1] for c in cases] + [c[2] for c in cases if c[2] is not None] + [1.0]
    low, high = min(values) / 1.5, max(values) * 1.5
    ax.set_xlim(low, high)
    ticks = [t for t in (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0) if low <= t <= high]
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("time, normalised to the reference's (lower is faster; log scale)")
    ax.axvline(1.0, color="black", lw=0.6)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, fontsize=8, frameon=False)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return len(cases)


def section_text(sections: list[tuple[str, list[Record]]], markdown: Path, png: Path) -> str:
    link = os.path.relpath(png.resolve(), markdown.resolve().parent)
    return ("## Summary\n\nEvery case compared with a reference or a target, from\n"
            "`bench/results/*.json` (`python bench/summary.py --write BENCHMARKS.md`). The ratio\n"
            "is partita's time or bandwidth over the reference's; the last column names the\n"
            "machine description and the build each figure was measured with.\n\n"
            + table(sections)
            + f"\n![partita beside its references, times normalised to the reference's]"
              f"({Path(link).as_posix()})\n")


def update(markdown: str | Path, results: Path = RESULTS_DIR, png: Path | None = None
           ) -> str:
    """Rewrite the summary section of ``markdown`` and its plot from ``results``."""
    png = Path(png) if png is not None else Path(results).parent / "summary.png"
    sections = load_results(Path(results))
    plot(sections, png)
    text = section_text(sections, Path(markdown), png)
    put_first(Path(markdown))
    replace_section(markdown, "summary", text)
    return text


def put_first(markdown: Path) -> None:
    """Make room for the summary under the title (before every section) if it has none."""
    old = markdown.read_text() if markdown.exists() else "# Benchmarks\n"
    if "<!-- summary -->" in old:
        return
    title, _, rest = old.partition("\n")
    markdown.write_text(f"{title}\n\n<!-- summary -->\n<!-- /summary -->\n{rest}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", required=True, help="rewrite the summary of this file")
    parser.add_argument("--results", type=Path, default=RESULTS_DIR,
                        help="the folder of results (default: bench/results)")
    parser.add_argument("--plot", type=Path, default=None,
                        help="where the plot goes (default: summary.png beside the results)")
    args = parser.parse_args(argv)
    print(update(args.write, args.results, args.plot))


if __name__ == "__main__":
    main()
