"""What ``partita tune`` prints of a tuned kernel: the JSON object of ``--json`` (a public
interface: keys are added, never renamed) and the text report, with the speed as a fraction of
the machine's peak that bounds it."""

from __future__ import annotations

from typing import Any

import click

from partita.runtime.harness import TimingOptions
from partita.targets.cpu.measure import describe
from partita.tuning import GenericTuned, Tuned, numpy_time
from partita.tuning.baseline import kernel_rates


def peak_line(k: Any, t: float, cold_cache: bool = False
               ) -> tuple[float | None, float | None, str]:
    """GFLOP/s, GB/s, and the speed as a fraction of the machine's peak that bounds it (for
    times from cold caches, the bandwidth is memory's)."""
    gflops, gbs = kernel_rates(k, t)
    if gflops is None:
        return None, None, ""
    d = describe(measure_if_missing=False)
    peak = d.peak_gflops_fp64 if k.compute_dtype.value == "float64" else d.peak_gflops_fp32
    bw, where = d.stream_triad_gbs, "STREAM triad"
    if gbs is not None and not cold_cache:
        # Calls are timed back to back: a working set that fits a cache streams from it.
        level = d.level(int(gbs * t * 1e9))
        if level is not d.levels[-1]:
            bw, where = level.bandwidth_gbs, f"{level.name} bandwidth"
    # The bounding resource is the one whose ideal time (work / peak rate) is longer.
    if gbs is not None and gflops / peak < gbs / bw:
        return gflops, gbs, f"{gbs:.3g} GB/s = {100 * gbs / bw:.0f}% of {where} ({bw:.3g})"
    return gflops, gbs, f"{gflops:.3g} GFLOP/s = {100 * gflops / peak:.0f}% of peak ({peak:.3g})"


def tune_summary(kernel: str, k: Any, tuned: Tuned, seed: int, cold_cache: bool
                  ) -> tuple[dict[str, Any], str]:
    """(the JSON object of ``partita tune --json``, the text line of the speed)."""
    t = tuned.time or 0.0
    # numpy is timed as partita was: from cold caches too under --cold-cache.
    np_t = numpy_time(k, seed, flush_bytes=TimingOptions(flush_cache=cold_cache)
                      .resolved_flush_bytes())
    gflops, gbs, peak = peak_line(k, t, cold_cache)
    result = tuned.result
    out: dict[str, Any] = {
        "kernel": kernel, "best_time_s": tuned.time, "gflops": gflops, "gbs": gbs,
        "numpy_time_s": np_t, "speedup_vs_numpy": (np_t / t) if np_t and t else None,
        "evaluations": tuned.evaluations,
        "failed": len(result.failures) if result else 0,
        "bound_violations": len(result.violations) if result else 0,
        "slowed": len(result.slowed) if result else 0,
        "verified": True, "reference": tuned.reference, "code_path": str(tuned.code_path),
        "from_records": result is None,
        "cold_cache": cold_cache,
        "decisions": tuned.decisions,
    }
    if result is not None:
        out["accuracy"] = result.accuracy()
        out["stopped_by"] = result.stopped_by
        out["pruned"] = result.state.pruned
        out["space_lower_bound_s"] = result.space_lower_bound_s or None
        out["optimality_gap"] = result.optimality_gap
        out["certificate_violations"] = len(result.certificate_violations)
        out["certificate_limited_by"] = result.certificate_limiter or None
        reach = result.time_to_fraction(0.95)
        out["time_to_95pct_s"], out["evaluations_to_95pct"] = reach or (None, None)
    if tuned.variant is not None:
        out["variant"] = tuned.variant
        out["variants"] = tuned.variants
    return out, peak


def print_tuned(kernel: str, tuned: Tuned, np_t: float | None, peak: str) -> None:
    """The text report of ``partita tune`` (``np_t``: numpy's time; ``peak``: the speed)."""
    t, result = tuned.time or 0.0, tuned.result
    how = "recorded earlier" if result is None else f"after {len(result.evaluations)} " \
        f"evaluations this run ({result.stopped_by})"
    click.echo(f"best {kernel}: {t * 1e3:.4g} ms, {how}")
    if peak:
        click.echo(f"  speed: {peak}")
    if np_t and t:
        faster = f"partita is {np_t / t:.2f}x faster" if np_t > t \
            else f"numpy is {t / np_t:.2f}x faster"
        click.echo(f"  numpy on the same inputs: {np_t * 1e3:.4g} ms ({faster})")
    if result is not None:
        acc = result.accuracy()
        click.echo(f"  model: {len(result.violations)} bound violations, "
                   f"{100 * acc['within_10x']:.0f}% of bounds within 10x; "
                   f"{len(result.failures)} failed implementations")
        if result.optimality_gap is not None:
            click.echo(f"  certificate: nothing left in the space runs faster than "
                       f"{result.space_lower_bound_s * 1e3:.4g} ms (the best is within "
                       f"{result.optimality_gap:.3g}x of it, if the bound is valid)")
            if result.certificate_limiter:
                click.echo(f"    where it is set, the bound's largest term is "
                           f"{result.certificate_limiter!r}: a tighter model of that term "
                           "would narrow the gap")
        if result.slowed:
            click.echo(f"  {len(result.slowed)} implementations were timed while a core ran "
                       "slowed (shared with another process or virtual machine), even after "
                       "retiming: their times are high")
    if tuned.variant is not None:
        shown = " ".join(f"{key}={value}" for key, value in tuned.variant.items())
        click.echo(f"  order of the sum: {shown}, the fastest of {len(tuned.variants or [])} "
                   "variants (`--json` lists them)")
    click.echo(f"  C source: {tuned.code_path}")


def generic_json(kernel: str, generic: GenericTuned) -> dict[str, Any]:
    """A size-generic kernel as ``partita tune --json`` and ``partita show --json`` print it:
    its dynamic and fixed parameters, entry, chain and thresholds (None: infinite), each
    branch's property (the sizes it multiplies), versions, training runs (per size: each
    version's time, the choice), warnings and failures."""
    return {
        "kernel": kernel, "dynamic": generic.dynamic, "fixed": generic.fixed,
        "entry": generic.entry, "chain": generic.chain(),
        "thresholds": [None if t == float("inf") else t for t in generic.thresholds],
        "properties": [list(p) for p in generic.branch_properties()],
        "versions": [{"entry": v.entry, "won_at": v.won_at, "dropped": v.dropped,
                      "completed": v.completed, "decisions": v.decisions}
                     for v in generic.versions],
        "training": [{"sizes": t.sizes, "static_time_s": t.static_time,
                      "version_times_s": t.version_times, "chosen": t.chosen,
                      "dispatcher_time_s": t.dispatcher_time} for t in generic.training],
        "warnings": generic.warnings, "failures": generic.failures,
    }


def host_line(h: dict[str, Any]) -> str:
    """One line of ``partita show`` for a host that timed evaluations (``host_summaries``):
    its name, how many, and its machine's peak and triad bandwidth where it sent them."""
    line = f"  host {h['host']}: {h['evaluations']} evaluations"
    if h.get("peak_gflops") is not None:
        line += (f", peak {h['peak_gflops']:.1f} GFLOP/s fp32, triad "
                 f"{h.get('triad_gbs') or 0:.1f} GB/s ({h.get('source') or 'unknown'})")
    if h.get("notes"):
        line += f"; {'; '.join(str(n) for n in h['notes'])}"
    return line
