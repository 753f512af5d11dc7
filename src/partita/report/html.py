"""A tuning run as one HTML page: what was tried, how fast it got, and where the model erred.

The page answers the questions a tuning run leaves: did the search converge (best time
against evaluations), is the performance model a true lower bound (model bound against
measured time: a point above the y = x line is an implementation measured faster than its
bound, a model bug), how spread out are the implementations (histogram of measured times),
what is the best implementation (its decisions), and what failed and why.

The page is a directory: ``index.html`` plus the plots as PNG files next to it, referenced
by relative paths, so it can be copied, archived or served as it is. All text from the
records (reasons, decisions, machine names) is HTML-escaped. The plots are drawn with
matplotlib's Agg renderer on figures that belong to no pyplot state, so writing a report
needs no display and never disturbs a caller's own figures.
"""

from __future__ import annotations

import html
import json
import math
import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from partita.db.rows import BestRow, EvaluationRow, GenericRow, RunRow
from partita.runtime.harness import TimingOptions

# The tuner's tolerance, so that the report and the tuner agree on what a model bug is.
from partita.search.tuner import NOISE, exceeds_measurement

SLOW_LIMIT = TimingOptions().slow_limit
"""Timings whose recorded slowdown exceeds this were taken while a core ran slowed (the
default limit: a database does not keep the options a run timed with)."""

MAX_FAILURES = 50
"""Failures listed in the table; a run with thousands of them would make the page useless."""

MAX_REASON = 400
"""Characters of a failure's reason shown (a compiler error can run for pages)."""

PLOTS = {
    "best": "best_time.png",
    "bound": "bound_vs_time.png",
    "histogram": "time_histogram.png",
    "gap": "optimality_gap.png",
}
"""The image files a report writes next to ``index.html`` (when it has the data)."""

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px;
       color: #222; padding: 0 1em; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 1.8em; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left;
         vertical-align: top; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.reason { white-space: pre-wrap; font-family: monospace; font-size: 0.9em; }
pre { background: #f7f7f7; padding: 0.8em; overflow-x: auto; font-size: 0.85em; }
img { max-width: 100%; height: auto; display: block; margin: 0.5em 0; }
.warn { color: #b00020; font-weight: bold; }
.note { color: #666; }
"""


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def format_time(time_s: float | None) -> str:
    """A duration with a unit that keeps the number readable (``12.3 us``, ``4.56 ms``)."""
    if time_s is None or not math.isfinite(time_s):
        return "n/a"
    if time_s == 0:
        return "0 s"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(time_s) >= scale:
            return f"{time_s / scale:.4g} {unit}"
    return f"{time_s / 1e-9:.4g} ns"


def _number(value: Any) -> float | None:
    """A finite float, or None (missing, non-numeric or non-finite values are not plotted)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _measured(ev: EvaluationRow) -> float | None:
    """The time an evaluation counts for: its median, for a successful evaluation only."""
    if not ev.ok:
        return None
    t = _number(ev.median_s)
    return t if t is not None and t > 0 else None


def is_violation(ev: EvaluationRow, noise: float = NOISE) -> bool:
    """Whether the model's bound exceeds the measured time beyond noise: the bound claims
    the implementation cannot be that fast, so the model is wrong."""
    return ev.ok and exceeds_measurement(
        _number(ev.bound_s), _number(ev.min_s), _number(ev.median_s), noise)


def _table(headers: Sequence[str] | None, rows: Sequence[Sequence[Any]],
           numeric: Sequence[int] = ()) -> str:
    """An HTML table of escaped cells; ``headers`` None for a key-value table."""
    out = ["<table>"]
    if headers is not None:
        out.append("<tr>" + "".join(f"<th>{_esc(h)}</th>" for h in headers) + "</tr>")
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            cls = ' class="num"' if i in numeric else ""
            cells.append(f"<td{cls}>{_esc(cell)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


# ---------------------------------------------------------------------- plots


def _figure(width: float = 7.0, height: float = 4.2) -> Any:
    """A figure outside pyplot, rendered by Agg (no display, no global state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: Path) -> None:
    fig.tight_layout()
    # No software tag or dates: the same records give byte-identical images.
    fig.savefig(path, format="png", metadata={"Software": None})


def _plot_best(evals: Sequence[EvaluationRow], path: Path) -> bool:
    """Best time so far against the number of evaluations: how fast the search converged,
    and whether more evaluations would likely pay."""
    xs: list[int] = []
    best: list[float] = []
    current = math.inf
    for i, ev in enumerate(evals, start=1):
        t = _measured(ev)
        if t is not None and t < current:
            current = t
        if math.isfinite(current):
            xs.append(i)
            best.append(current)
    if not xs:
        return False
    if xs[-1] != len(evals):
        xs.append(len(evals))
        best.append(current)
    fig = _figure()
    ax = fig.add_subplot()
    ax.step(xs, best, where="post", color="tab:blue", label="best measured time")
    ok = [(i, t) for i, ev in enumerate(evals, start=1) if (t := _measured(ev)) is not None]
    ax.scatter([i for i, _ in ok], [t for _, t in ok], s=8, color="tab:gray", alpha=0.4,
               label="each measured implementation")
    ax.set_yscale("log")
    ax.set_xlabel("evaluations")
    ax.set_ylabel("time (s)")
    ax.set_title("Best time against evaluations")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper right", fontsize="small")
    _save(fig, path)
    return True


def _plot_gap(evals: Sequence[EvaluationRow], run: RunRow | None, path: Path) -> bool:
    """The last run's best time and optimality certificate against its elapsed time: the
    band between them holds the best implementation of the space (if the bound is valid),
    and the gap says how much a longer search could still find at most."""
    history = [(t, b) for t, b in (run.lower_bound_history if run else [])
               if _number(b) is not None]
    if run is None or not history:
        return False
    timed = sorted((ev.elapsed_s, t) for ev in evals
                   if ev.run_id == run.id and (t := _measured(ev)) is not None)
    best_x, best_y, current = [], [], math.inf
    for x, t in timed:
        current = min(current, t)
        best_x.append(x)
        best_y.append(current)
    fig = _figure()
    ax = fig.add_subplot()
    ax.step([t for t, _ in history], [b for _, b in history], where="post",
            color="tab:green", label="certificate (nothing left runs faster)")
    if best_x:
        end = max(best_x[-1], history[-1][0])
        ax.step([*best_x, end], [*best_y, best_y[-1]], where="post", color="tab:blue",
                label="best measured time")
        gap = best_y[-1] / history[-1][1]
        ax.set_title(f"Best time and certificate (run {run.id}; gap {gap:.3g}x at the end)")
    else:
        ax.set_title(f"Certificate (run {run.id}; nothing timed)")
    ax.set_yscale("log")
    ax.set_xlabel("seconds into the run")
    ax.set_ylabel("time (s)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="center right", fontsize="small")
    _save(fig, path)
    return True


def _plot_bound(evals: Sequence[EvaluationRow], path: Path, noise: float) -> bool:
    """Model bound against measured time, log-log: the bound must stay below y = x; points
    above it are model violations, drawn in red."""
    fine: list[tuple[float, float]] = []
    bad: list[tuple[float, float]] = []
    for ev in evals:
        t = _measured(ev)
        bound = _number(ev.bound_s)
        if t is None or bound is None or bound <= 0:
            continue
        (bad if is_violation(ev, noise) else fine).append((t, bound))
    points = fine + bad
    if not points:
        return False
    fig = _figure(6.0, 5.0)
    ax = fig.add_subplot()
    lo = min(min(p) for p in points) / 1.5
    hi = max(max(p) for p in points) * 1.5
    ax.plot([lo, hi], [lo, hi], color="black", linewidth=1, label="bound = measured time")
    if fine:
        ax.scatter([p[0] for p in fine], [p[1] for p in fine], s=12, color="tab:blue",
                   alpha=0.6, label="bound below measured time")
    if bad:
        ax.scatter([p[0] for p in bad], [p[1] for p in bad], s=40, color="tab:red",
                   marker="x", label=f"model violation ({len(bad)})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured time (s)")
    ax.set_ylabel("model bound (s)")
    ax.set_title("Model bound against measured time")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper left", fontsize="small")
    _save(fig, path)
    return True


def _plot_histogram(evals: Sequence[EvaluationRow], path: Path) -> bool:
    """Distribution of measured times on a log scale: how much choosing well matters (a
    wide spread) and how rare the fast implementations are."""
    import numpy as np

    times = [t for ev in evals if (t := _measured(ev)) is not None]
    if not times:
        return False
    lo, hi = min(times), max(times)
    if hi <= lo * 1.0001:
        lo, hi = lo / 1.1, hi * 1.1
    bins = np.logspace(math.log10(lo), math.log10(hi), max(5, min(40, len(times) // 2 + 1)))
    fig = _figure()
    ax = fig.add_subplot()
    ax.hist(times, bins=bins, color="tab:blue", edgecolor="white")
    ax.set_xscale("log")
    ax.set_xlabel("measured time (s)")
    ax.set_ylabel("implementations")
    ax.set_title("Distribution of measured times")
    ax.grid(True, which="both", alpha=0.3)
    _save(fig, path)
    return True


# ---------------------------------------------------------------------- page sections


def _summary(evals: Sequence[EvaluationRow], best: BestRow | None,
             flops: float | None, peak: str, noise: float) -> str:
    statuses = Counter(ev.status for ev in evals)
    measured = [t for ev in evals if (t := _measured(ev)) is not None]
    best_time = _number(best.time_s) if best else None
    if best_time is None and measured:
        best_time = min(measured)
    failures = sum(n for s, n in statuses.items() if s != "ok")
    violations = sum(1 for ev in evals if is_violation(ev, noise))
    rows: list[tuple[str, str]] = [
        ("Evaluations", str(len(evals))),
        ("Measured (ok)", str(statuses.get("ok", 0))),
        ("Failures", str(failures)),
    ]
    rows += [(f"Failures: {status or '(no status)'}", str(n))
             for status, n in sorted(statuses.items()) if status != "ok"]
    rows.append(("Best time", format_time(best_time)))
    if measured:
        rows.append(("Median measured time", format_time(sorted(measured)[len(measured) // 2])))
    if flops and best_time:
        rows.append(("Best GFLOP/s", f"{flops / best_time / 1e9:.4g}"))
    if peak:
        rows.append(("Peak", peak))
    rows.append(("Model violations", str(violations)))
    judged = [d for ev in evals if ev.ok and (d := _number(ev.slowdown)) is not None]
    if judged:
        slowed = sum(1 for d in judged if d > SLOW_LIMIT)
        rows.append((f"Timed while a core ran slowed (> {SLOW_LIMIT:g}x, of {len(judged)} "
                     "probed)", str(slowed)))
    parts = ['<h2 id="summary">Summary</h2>', _table(None, rows, numeric=(1,))]
    if violations:
        parts.append(f'<p class="warn">{violations} implementation(s) ran faster than their '
                     f"model bound (beyond {noise:.0%} noise): the model is not a lower bound "
                     "for them.</p>")
        found: list[tuple[Any, ...]] = []
        for i, ev in enumerate(evals, start=1):
            if is_violation(ev, noise) and len(found) < MAX_FAILURES:
                bound = _number(ev.bound_s) or 0.0
                fastest = _number(ev.min_s) or _number(ev.median_s) or 0.0
                found.append((i, format_time(bound), format_time(fastest),
                              f"{bound / fastest:.3g}" if fastest else "n/a"))
        parts.append(_table(("evaluation", "model bound", "fastest measured",
                             "bound / measured"), found, numeric=(0, 1, 2, 3)))
    return "\n".join(parts)


def _machine(machine: Mapping[str, Any] | None) -> str:
    if not machine:
        return ""
    rows = []
    for key, value in machine.items():
        if isinstance(value, Mapping):
            continue  # nested descriptions (the measured CPU) are too long for a table
        if isinstance(value, list | tuple):
            text = " ".join(str(v) for v in value)
            value = text if len(text) <= 200 else f"{len(value)} items"
        rows.append((key, value))
    return '<h2 id="machine">Machine</h2>\n' + _table(None, rows)


def _best(best: BestRow | None, flops: float | None) -> str:
    parts = ['<h2 id="best">Best implementation</h2>']
    if not best:
        parts.append('<p class="note">No implementation was measured successfully.</p>')
        return "\n".join(parts)
    time_s = _number(best.time_s)
    facts = [("Time", format_time(time_s))]
    if flops and time_s:
        facts.append(("GFLOP/s", f"{flops / time_s / 1e9:.4g}"))
    for label, value in (("Entry point", best.entry), ("Flags", best.flags)):
        if value:
            facts.append((label, value))
    parts.append(_table(None, facts))
    decisions = best.decisions
    parts.append(f"<h3>Decisions ({len(decisions)})</h3>")
    rows = []
    for i, d in enumerate(decisions, start=1):
        if isinstance(d, list | tuple) and len(d) == 3:
            choice, args, values = d
            args_text = ", ".join(str(a) for a in args) if isinstance(args, list) else args
            values_text = (", ".join(str(v) for v in values) if isinstance(values, list)
                           else values)
            rows.append((i, choice, args_text, values_text))
        else:
            rows.append((i, json.dumps(d), "", ""))
    parts.append(_table(("#", "choice", "of", "value"), rows, numeric=(0,)))
    if best.source:
        parts.append("<details><summary>C source</summary>"
                     f"<pre>{_esc(best.source)}</pre></details>")
    return "\n".join(parts)


def _failures(evals: Sequence[EvaluationRow]) -> str:
    failed = [(i, ev) for i, ev in enumerate(evals) if not ev.ok]
    parts = [f'<h2 id="failures">Failures ({len(failed)})</h2>']
    if not failed:
        parts.append('<p class="note">None.</p>')
        return "\n".join(parts)
    # Numbered by position, as on the convergence plot: records' own indices restart with
    # every run.
    rows = ["<table>", "<tr><th>evaluation</th><th>status</th><th>reason</th></tr>"]
    for i, ev in failed[:MAX_FAILURES]:
        index = i + 1
        reason = ev.reason
        if len(reason) > MAX_REASON:
            reason = reason[:MAX_REASON] + " ..."
        rows.append(f'<tr><td class="num">{_esc(index)}</td><td>{_esc(ev.status)}</td>'
                    f'<td class="reason">{_esc(reason)}</td></tr>')
    rows.append("</table>")
    parts.append("\n".join(rows))
    if len(failed) > MAX_FAILURES:
        parts.append(f'<p class="note">The first {MAX_FAILURES} of {len(failed)} are '
                     "listed.</p>")
    return "\n".join(parts)


def _figure_section(heading: str, anchor: str, file: str | None, alt: str, missing: str) -> str:
    body = (f'<img src="{_esc(file)}" alt="{_esc(alt)}">' if file
            else f'<p class="note">{_esc(missing)}</p>')
    return f'<h2 id="{anchor}">{_esc(heading)}</h2>\n{body}'


# ---------------------------------------------------------------------- the report


def write_report(out_dir: str | os.PathLike[str], *, title: str, kernel_desc: str,
                 evaluations: Sequence[EvaluationRow], best: BestRow | None,
                 machine: dict[str, Any] | None, peak: str = "",
                 flops: float | None = None, noise: float = NOISE,
                 runs: Sequence[RunRow] = ()) -> Path:
    """Write ``index.html`` and its plots into ``out_dir``; return the page's path.

    ``evaluations`` are records' evaluations (:meth:`partita.db.Records.evaluations`) in the
    order they were taken; ``best`` the best implementation
    (:meth:`partita.db.Records.best`), or None; ``machine`` a machine fingerprint (its
    scalar and list fields are shown); ``kernel_desc`` a description of the kernel (shown
    preformatted, e.g. ``Kernel.describe()``); ``peak`` a line about the machine's peak, to
    read the best time against. ``flops`` (floating-point operations per call) adds
    GFLOP/s. A bound above the measured time by more than ``noise`` counts as a violation.
    Of ``runs`` (:meth:`partita.db.Records.runs`), the last one's certificate is plotted.

    Plots without data (no successful evaluation, no bounds) are left out with a note; the
    page is written whatever the evaluations hold. Image files from an earlier report in
    the same directory that this one does not draw are removed, so the page never shows a
    stale plot.
    """
    try:
        import matplotlib  # noqa: F401 - fail early, with the reason
    except ImportError as exc:
        raise RuntimeError("the HTML report needs matplotlib (pip install matplotlib)") from exc
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    evals = list(evaluations)

    drawers: dict[str, Callable[[Path], bool]] = {
        "best": lambda path: _plot_best(evals, path),
        "bound": lambda path: _plot_bound(evals, path, noise),
        "histogram": lambda path: _plot_histogram(evals, path),
        "gap": lambda path: _plot_gap(evals, runs[-1] if runs else None, path),
    }
    drawn: dict[str, str | None] = {}
    for key, draw in drawers.items():
        path = out / PLOTS[key]
        ok = draw(path)
        if not ok and path.exists():
            path.unlink()
        drawn[key] = PLOTS[key] if ok else None

    sections = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_esc(title)}</title>",
        f"<style>{_CSS}</style>",
        "</head>",
        "<body>",
        f"<h1>{_esc(title)}</h1>",
        '<h2 id="kernel">Kernel</h2>',
        f"<pre>{_esc(kernel_desc)}</pre>",
        _summary(evals, best, flops, peak, noise),
        _machine(machine),
        _figure_section("Best time against evaluations", "convergence", drawn["best"],
                        "best measured time against the number of evaluations (log time)",
                        "No successful evaluation: nothing to plot."),
        _figure_section("Best time and optimality certificate", "gap", drawn["gap"],
                        "best measured time and the certificate below it against seconds "
                        "into the last run (log time)",
                        "The last run recorded no certificate: nothing to plot."),
        _figure_section("Model bound against measured time", "bound", drawn["bound"],
                        "model bound against measured time, log-log, with the line y = x",
                        "No successful evaluation with a model bound: nothing to plot."),
        _figure_section("Distribution of measured times", "distribution",
                        drawn["histogram"], "histogram of measured times (log time)",
                        "No successful evaluation: nothing to plot."),
        _best(best, flops),
        _failures(evals),
        "</body>",
        "</html>",
        "",
    ]
    page = out / "index.html"
    page.write_text("\n".join(s for s in sections if s), encoding="utf-8")
    return page


# ---------------------------------------------------------------------- size-generic kernels


def _sizes(sizes: Mapping[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in sizes.items())


def generic_section(generic: GenericRow) -> str:
    """The section of a size-generic kernel: its versions (what each won, what its replay
    dropped), the dispatch chain and its thresholds, and the training runs (per size: the
    static tune's time, each version's time, the version chosen, the dispatcher's time)."""
    parts = ['<h2 id="generic">Size-generic kernel</h2>',
             f"<p>Over dynamic sizes {_esc(', '.join(generic.dynamic))}"
             + (f" ({_esc(_sizes(generic.fixed))} fixed)" if generic.fixed else "")
             + f": {len(generic.versions)} versions behind the entry "
             f"<code>{_esc(generic.entry)}</code>, chosen on the work (the product of the "
             "sizes).</p>",
             '<h3 id="versions">Versions</h3>',
             _table(["version", "entry", "won at", "decisions", "dropped", "completed"],
                    [(f"V{v.index + 1}", v.entry, "; ".join(_sizes(s) for s in v.won_at),
                      len(v.decisions), len(v.dropped), len(v.completed))
                     for v in generic.versions], numeric=(3, 4, 5)),
             '<h3 id="dispatch">Dispatch</h3>', f"<pre>{_esc(generic.chain)}</pre>"]
    if generic.thresholds:
        parts.append(_table(["threshold", "guards", "value (work)"],
                            [(f"T{i + 1}", f"V{i + 1}", "inf" if t is None else f"{t:g}")
                             for i, t in enumerate(generic.thresholds)], numeric=(2,)))
    names = [f"V{i + 1}" for i in range(len(generic.versions))]
    rows = []
    for t in generic.training:
        times = [format_time(x) for x in t.version_times]
        times += ["n/a"] * (len(names) - len(times))
        rows.append((_sizes(t.sizes), format_time(t.static_time_s), *times,
                     f"V{t.chosen + 1}", format_time(t.dispatcher_time_s)))
    parts += ['<h3 id="training">Training runs</h3>',
              _table(["sizes", "static tune", *names, "chosen", "dispatcher"], rows,
                     numeric=(*range(1, len(names) + 2), len(names) + 3))]
    parts += [f'<p class="warn">warning: {_esc(w)}</p>' for w in generic.warnings]
    parts += [f'<p class="note">failure: {_esc(f)}</p>' for f in generic.failures]
    return "\n".join(parts)


def write_generic_report(out_dir: str | os.PathLike[str], *, title: str, kernel_desc: str,
                         generic: GenericRow, machine: dict[str, Any] | None) -> Path:
    """Write ``index.html`` of a size-generic kernel (:meth:`partita.db.Records.generic`)
    into ``out_dir``; return its path. The kernel's versions are static winners whose own
    tunes each have a report (``partita report`` at a training size); this page has the
    kernel, the machine and :func:`generic_section`, no plots."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for stale in PLOTS.values():  # plots of an earlier report in this directory
        if (out / stale).exists():
            (out / stale).unlink()
    sections = [
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_esc(title)}</title>", f"<style>{_CSS}</style>", "</head>", "<body>",
        f"<h1>{_esc(title)}</h1>", '<h2 id="kernel">Kernel</h2>',
        f"<pre>{_esc(kernel_desc)}</pre>", generic_section(generic), _machine(machine),
        "</body>", "</html>", ""]
    page = out / "index.html"
    page.write_text("\n".join(s for s in sections if s), encoding="utf-8")
    return page
