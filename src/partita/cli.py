"""The command line: ``partita COMMAND KERNEL key=value... [options] [--json]``."""

from __future__ import annotations

import datetime
import json
import random
import sys
from pathlib import Path
from typing import Any, NoReturn, cast

import click

from partita.api import kernel as library_kernel
from partita.api import space as make_space
from partita.cli_cluster import cluster_cmd, worker_cmd
from partita.cli_db import db_cmd
from partita.cli_generic import export_generic, generic_fixed, report_generic, show_generic
from partita.cli_output import generic_json, host_line, print_tuned, tune_summary
from partita.cli_suite import tune_suite_cmd
from partita.codegen.c import CodegenError
from partita.codegen.looptree import loop_tree, render
from partita.codegen.program import signature
from partita.db import Records, RecordsError, location, records_exist
from partita.db.hosts import evaluation_host, host_summaries
from partita.ir.kernel import Kernel
from partita.ir.types import KernelError
from partita.kernels import get_spec, list_kernels
from partita.kernels.files import file_kernel, is_file_kernel
from partita.report import export_c, write_report
from partita.runtime.data import TooLarge, reference_kind
from partita.search.pruning import prune_stats
from partita.search.sampling import NoImplementation, random_implementation, sample_and_evaluate
from partita.search.stop import parse_stop
from partita.space.candidate import Candidate, DeadEnd
from partita.space.decl import SpaceError
from partita.space.estimate import METHODS, heavy_tailed, space_stats
from partita.targets import REGISTRY, TARGETS, TargetUnavailable, UnsupportedKernel
from partita.targets import get as get_target
from partita.targets.base import printers_text
from partita.targets.cpu.measure import describe, is_cached
from partita.tuning import (
    StaleRecord,
    host_machine,
    kernel_params,
    kernel_rates,
    rebuild_program,
    records_target,
    target_model,
    tune,
    tune_generic,
)

target_option = click.option("--target", type=click.Choice(TARGETS), default="cpu",
                             show_default=True)
db_option = click.option("--db", type=click.Path(dir_okay=False),
                         help="Records database (default: PARTITA_DB, else the user cache).")
cold_option = click.option("--cold-cache", "cold_cache", is_flag=True,
                           help="Times from cold caches (CPU): a buffer of twice the last-level "
                                "cache is written before every timed call, so the data "
                                "streams from memory. Recorded apart from warm times.")
choice_order_option = click.option(
    "--choice-order", "choice_order", default="default", show_default=True,
    help="The order in which decisions are taken: default (layouts, sizes, kinds, memory "
         "spaces, order, prefetching), reverse, or choice names to take first, separated by commas "
         "(e.g. order,dim_kind).")


def _params(items: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.UsageError(f"expected key=value, got {item!r}")
        out[key] = value
    return out


def _fail(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


class _Cli(click.Group):
    """The command group; an unreadable or damaged records database, wherever a command meets
    it, ends the command with one line naming the file, not a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except RecordsError as exc:
            _fail(str(exc))


SEED = click.IntRange(0, 2**63 - 1)
"""Seeds of random draws: numpy and Python take non-negative integers."""


@click.group(cls=_Cli)
@click.version_option(package_name="partita")
def main() -> None:
    """partita: fast kernels found by searching partially specified implementations."""


@main.command("kernels")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def kernels_cmd(as_json: bool) -> None:
    """List the library kernels and their parameters."""
    specs = list_kernels()
    if as_json:
        click.echo(json.dumps({s.name: {"doc": s.doc, "params": {
            p.name: p.default for p in s.params}} for s in specs}, indent=2))
        return
    for s in specs:
        params = " ".join(f"{p.name}={p.default}" for p in s.params)
        click.echo(f"{s.name:<16} {s.doc}\n{'':<16} {params}")


@main.command("space")
@click.argument("kernel")
@click.argument("params", nargs=-1)
@target_option
@click.option("--samples", type=click.IntRange(1), default=200, show_default=True,
              help="Random descents for the estimates.")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--method", type=click.Choice(list(METHODS)), default="knuth",
              show_default=True,
              help="Size estimator: Knuth's probes, Chen's heuristic sampling, or Chen's "
                   "stratified also by the size of the open domains (slower, steadier on "
                   "spaces whose subtrees differ by orders of magnitude).")
@choice_order_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def space_cmd(kernel: str, params: tuple[str, ...], target: str, samples: int, seed: int,
              method: str, choice_order: str, as_json: bool) -> None:
    """Estimate the size of KERNEL's decision space and show one random implementation."""
    space, root = _open_space(kernel, params, target, choice_order)
    rng = random.Random(seed)
    stats = space_stats(root, samples, rng, method=method)
    example = _example(root, random.Random(seed))
    result: dict[str, Any] = {
        "kernel": kernel, "params": _described(kernel, params)[0],
        "target": target, "size_estimate": stats.size_estimate,
        "size_ci": list(stats.size_ci), "size_ess": stats.size_ess,
        "mean_depth": stats.mean_depth,
        "dead_end_rate": stats.dead_end_rate, "descents_per_s": stats.descents_per_s,
        "samples": samples, "method": method, "open_choices_at_root": len(root.open_slots()),
        "choice_order": list(space.sdef.decision_choices()),
    }
    if example is not None:
        result["example_decisions"] = [d.to_json() for d in example.decisions]
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    _print_space(result, example)


def _example(root: Candidate, rng: random.Random, tries: int = 200) -> Candidate | None:
    try:
        return random_implementation(root, rng, tries)
    except NoImplementation:
        return None


def _build(kernel: str, params: tuple[str, ...]) -> Kernel:
    """The library kernel ``kernel``, or the kernel of ``FILE.py:FUNCTION``, with
    ``key=value`` parameters (a KernelError names what is wrong)."""
    given = _params(params)
    if is_file_kernel(kernel):
        return file_kernel(kernel, **given)
    return library_kernel(kernel, **given)


def _kernel_or_fail(kernel: str, params: tuple[str, ...]) -> Kernel:
    """The kernel KERNEL (library or file) with its parameters, or a one-line error."""
    try:
        return _build(kernel, params)
    except KernelError as exc:
        _fail(str(exc))
        raise AssertionError from exc  # unreachable: _fail exits


def _described(kernel: str, params: tuple[str, ...]) -> tuple[dict[str, Any], int | None]:
    """(KERNEL's parameters, its flops per call): a library kernel's resolved parameters and
    flop count; a kernel from a file has the parameters given and no flop count."""
    if is_file_kernel(kernel):
        return _params(params), None
    spec = get_spec(kernel)
    resolved = spec.resolve(_params(params))
    return resolved, spec.flops(**resolved)


def _open_space(kernel: str, params: tuple[str, ...], target: str,
                choice_order: str = "default") -> tuple[Any, Candidate]:
    """(space, root) of a library kernel, or a one-line error and exit status 2."""
    try:
        k = _build(kernel, params)
        space = make_space(k, target, choice_order=choice_order)
        root = space.root()
    except (KernelError, SpaceError) as exc:
        _fail(str(exc))
        raise AssertionError from exc  # unreachable: _fail exits
    if isinstance(root, DeadEnd):
        _fail(f"the space of {kernel} has no implementation: {root.reason}")
    assert isinstance(root, Candidate)
    return space, root


def _read_decisions(path: str) -> list[Any]:
    """Decisions from a JSON file: a list, or an object with a ``decisions`` list."""
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as exc:
        _fail(f"cannot read decisions file {path!r}: {exc.strerror}")
    except json.JSONDecodeError as exc:
        _fail(f"decisions file {path!r} is not JSON: {exc}")
    except RecursionError:
        _fail(f"decisions file {path!r} nests its JSON too deeply to be decisions")
    if isinstance(data, dict):
        data = data.get("decisions")
    if not isinstance(data, list):
        _fail(f"decisions file {path!r}: expected a list of decisions")
    return data


@main.command("machine")
@click.option("--measure", "force", is_flag=True,
              help="Measure again (about 10-20 s), replacing the cached description.")
@click.option("--no-measure", is_flag=True,
              help="Use the cached description, or an estimate from the CPU's capabilities.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def machine_cmd(force: bool, no_measure: bool, as_json: bool) -> None:
    """Describe this CPU: cores, peak FLOP/s, latencies, bandwidths (measured once, cached)."""
    if force and no_measure:
        _fail("--measure and --no-measure contradict each other")
    if (force or not is_cached()) and not no_measure:
        click.echo("measuring this CPU (about 10-20 s)...", err=True)
    d = describe(measure_if_missing=not no_measure, force=force)
    click.echo(json.dumps(d.to_json(), indent=2) if as_json else d.summary())


@main.command("sample")
@click.argument("kernel")
@click.argument("params", nargs=-1)
@click.option("--count", type=click.IntRange(1), default=10, show_default=True,
              help="Random implementations to draw.")
@click.option("--seed", type=SEED, default=0, show_default=True,
              help="Seed of the draws and of the input data.")
@click.option("--target", type=click.Choice(TARGETS), default="cpu", show_default=True,
              help="gpu: OpenCL code run on PoCL (the CPU) to check it; not timed.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0.01), default=10.0,
              show_default=True, help="Seconds one kernel call may take before it is killed.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def sample_cmd(kernel: str, params: tuple[str, ...], count: int, seed: int, target: str,
               timeout_s: float, as_json: bool) -> None:
    """Draw random implementations of KERNEL; compile, run, verify and time each one."""
    _, root = _open_space(kernel, params, target)
    resolved, flops = _described(kernel, params)
    try:
        with get_target(target).sampling(root.kernel, seed=seed, timeout_s=timeout_s) as how:
            report = sample_and_evaluate(root, count, random.Random(seed), how.evaluate,
                                         printer=how.printer)
    except (TooLarge, TargetUnavailable, UnsupportedKernel) as exc:
        _fail(str(exc))
    result = report.to_json(flops)
    result["reference"] = reference_kind(root.kernel)
    if as_json:
        click.echo(json.dumps(result))
        return
    click.echo(f"{report.sampled} random {target} implementations of {kernel}{how.where} "
               f"({' '.join(f'{k}={v}' for k, v in resolved.items())})")
    click.echo(f"  compiled {report.compiled}, verified {report.verified} "
               f"(against {_AGAINST[result['reference']]}), "
               f"failed {len(report.failed)}")
    if report.best_time_s is not None:
        rate = (f" ({result['gflops_best']:.3g} GFLOP/s)"
                if result["gflops_best"] is not None else "")
        click.echo(f"  best {report.best_time_s * 1e3:.4g} ms{rate}; median of the verified "
                   f"{sorted(report.times)[len(report.times) // 2] * 1e3:.4g} ms")
    for f in report.failed[:10]:
        click.echo(f"  failed: {f['reason']}")
    if report.verified < report.sampled:
        sys.exit(1)


_AGAINST = {"numpy": "the numpy reference", "given": "the given reference",
            "sequential semantics": "the kernel's sequential semantics"}


@main.command("tune")
@click.argument("kernel")
@click.argument("params", nargs=-1)
@target_option
@click.option("--search", type=click.Choice(["mcts", "bnb", "random"]), default="mcts",
              show_default=True, help="Search strategy.")
@click.option("--policy", type=click.Choice(["tag", "uct"]), default="tag", show_default=True,
              help="MCTS tree policy.")
@click.option("--budget", default="1m", show_default=True,
              help="Wall-time budget (90, 90s, 5m, 1h).")
@click.option("--evaluations", type=click.IntRange(1), help="Stop after this many.")
@click.option("--stop", "stop_expr",
              help="Stop condition, e.g. 'time=300 or evals=500 or stall=100 or bound=1.1 "
                   "or gap=1.2' "
                   "(replaces --budget and --evaluations).")
@click.option("--seed", type=SEED, default=0, show_default=True)
@db_option
@click.option("--continue", "continue_", is_flag=True,
              help="Search further even if a best implementation is recorded.")
@click.option("--transfer/--no-transfer", default=True, show_default=True,
              help="Start from the best implementations recorded for the same kernel at "
                   "other sizes or variants, adapted to this one.")
@click.option("--sketches/--no-sketches", default=True, show_default=True,
              help="Start from completions of the kernel's sketches (the micro-kernel "
                   "structure of contractions, CPU) and keep completing them for part of "
                   "the search.")
@click.option("--reassociate", is_flag=True,
              help="Tune the order of the kernel's sum too (dot, gemv, prefix_sum): every "
                   "split into partial sums or chunks is a variant, and the budget is shared "
                   "among them (successive halving, cut by the bound). Results differ by "
                   "rounding.")
@cold_option
@choice_order_option
@click.option("--train", help="Training sizes of a size-generic kernel (sizes given as ?), "
                              "separated by semicolons, each the ? sizes in order: "
                              "'64,64,64;256,256,256'.")
@click.option("--cluster", metavar="ADDRESS",
              help="Compile on this Dask scheduler's workers and time on its measuring worker "
                   "on this machine (see `partita cluster` and `partita worker`).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object at the end.")
def tune_cmd(kernel: str, params: tuple[str, ...], target: str, search: str, policy: str,
             budget: str, evaluations: int | None, stop_expr: str | None, seed: int,
             db: str | None, continue_: bool, transfer: bool, sketches: bool,
             reassociate: bool, cold_cache: bool, choice_order: str, train: str | None,
             cluster: str | None, as_json: bool) -> None:
    """Search implementations of KERNEL, keep the fastest verified one, compare with numpy.

    With sizes given as ? (``m=? n=?``) and --train, the kernel is tuned at each training
    size, and the winners become versions over dynamic sizes behind one C entry point that
    chooses among them by tuned thresholds on the work."""
    if train is not None or "?" in _params(params).values():
        if stop_expr or reassociate or cold_cache or continue_ or cluster:
            _fail("a size-generic tune (sizes given as ?) takes --budget, --evaluations, "
                  "--seed, --search, --target and --db only")
        _tune_generic(kernel, params, train, budget, evaluations, search, seed, db, target,
                      as_json)
        return
    k = _kernel_or_fail(kernel, params)
    if reassociate and stop_expr:
        _fail("--reassociate shares --budget and --evaluations among the orders of the sum; "
              "it does not take --stop")
    try:
        stop = parse_stop(stop_expr) if stop_expr else None
    except ValueError as exc:
        _fail(f"--stop: {exc}")
    options: dict[str, Any] = {"policy": policy} if search == "mcts" else {}
    progress_cb, finish = _progress(k, as_json)
    try:
        # tune checks the rest of the request (budget, choice order, cold caches, memory, a
        # device) before any work, and says what is wrong in one line.
        tuned = tune(k, budget=budget, evaluations=evaluations, stop=stop, target=target,
                     search=search, seed=seed, db=db, continue_=continue_, transfer=transfer,
                     sketches=sketches, reassociate=reassociate, cold_cache=cold_cache,
                     choice_order=choice_order, on_evaluation=progress_cb, cluster=cluster,
                     **options)
    except OSError as exc:
        _fail(f"cannot write: {exc}")
    except (ValueError, RuntimeError, RecordsError) as exc:
        _fail(str(exc))
    finally:
        finish()
    out, peak = tune_summary(kernel, k, tuned, seed, cold_cache)
    if as_json:
        click.echo(json.dumps(out))
        return
    print_tuned(kernel, tuned, out["numpy_time_s"], peak)


def _train_sizes(text: str) -> list[tuple[int, ...]]:
    try:
        return [tuple(int(v) for v in item.split(",")) for item in text.split(";")
                if item.strip()]
    except ValueError:
        _fail(f"--train: expected sizes like '64,64,64;256,256,256', got {text!r}")


def _tune_generic(kernel: str, params: tuple[str, ...], train: str | None, budget: str,
                  evaluations: int | None, search: str, seed: int, db: str | None,
                  target: str, as_json: bool) -> None:
    """``partita tune KERNEL m=? ... --train ...``: a size-generic kernel."""
    given = _params(params)
    dynamic = [key for key, value in given.items() if value == "?"]
    if not dynamic or train is None:
        _fail("a size-generic tune needs both sizes given as ? (m=? n=?) and --train")
    try:
        fixed = generic_fixed(kernel, given)
        generic = tune_generic(kernel, _train_sizes(train), budget, evaluations=evaluations,
                               db=db, seed=seed, tune_options={"search": search},
                               target=target, **fixed)
        code = generic.write()
    except OSError as exc:
        _fail(f"cannot write: {exc}")
    except (ValueError, RuntimeError, RecordsError, KernelError) as exc:
        _fail(str(exc))
    if not as_json:
        click.echo(generic.report())
        click.echo(f"  C sources: {code}")
        return
    out = generic_json(kernel, generic)
    out["tuned_sizes"] = generic.tuned_sizes
    out["timed"] = len(generic.timings.fresh)
    out["reused"] = generic.timings.reused
    click.echo(json.dumps({**out, "code_path": str(code)}))


def _progress(k: Any, quiet: bool) -> tuple[Any, Any]:
    """A live line: evaluations, best time, speed, pruned candidates."""
    if quiet or not sys.stderr.isatty():
        return None, lambda: None
    from rich.console import Console
    from rich.live import Live

    console = Console(stderr=True)
    live = Live(console=console, refresh_per_second=4, transient=True)
    live.start()
    count = [0, 0]

    def update(e: Any, state: Any) -> None:
        count[0] += 1
        count[1] += 0 if e.ok else 1
        best = state.best_time
        line = f"evaluations {count[0]} (failed {count[1]})  pruned {state.pruned}"
        if best < float("inf"):
            gflops, gbs = kernel_rates(k, best)
            line += f"  best {best * 1e3:.4g} ms"
            if gflops is not None:
                line += f"  {gflops:.3g} GFLOP/s  {gbs:.3g} GB/s"
        live.update(line)

    return update, live.stop


def _when(stamp: Any) -> str:
    """A record's time (seconds since the epoch) as local date and time."""
    try:
        return datetime.datetime.fromtimestamp(float(stamp)).isoformat(sep=" ",
                                                                       timespec="seconds")
    except (TypeError, ValueError, OverflowError, OSError):
        return str(stamp)


def _records_path(db: str | None) -> Path | str:
    return location(db)


def _records_of(kernel: str, params: tuple[str, ...], db: str | None
                ) -> tuple[Kernel, Records, int, int, dict[str, Any]]:
    """(kernel, records, kernel id, machine id, fingerprint) for show, export and report,
    which only read: a database that does not exist is an error, never created."""
    k = _kernel_or_fail(kernel, params)
    path = _records_path(db)
    if not records_exist(db):
        _fail(f"no tuning records at {path}: run `partita tune` first, or give --db")
    try:
        rec = Records(db)
        fp = host_machine()
        return k, rec, rec.kernel_id(k, kernel_params(k)), rec.machine_id(fp), fp
    except RecordsError as exc:
        _fail(str(exc))
        raise AssertionError from exc


@main.command("show")
@click.argument("kernel")
@click.argument("params", nargs=-1)
@target_option
@cold_option
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def show_cmd(kernel: str, params: tuple[str, ...], target: str, cold_cache: bool,
             db: str | None, as_json: bool) -> None:
    """List the best implementation and the runs recorded for KERNEL on this machine (with
    sizes given as ?: the size-generic kernel, its versions, thresholds and training runs)."""
    if "?" in _params(params).values():
        show_generic(kernel, _params(params), target, db, as_json)
        return
    k, rec, kid, mid, _ = _records_of(kernel, params, db)
    with rec:
        best = rec.best(kid, mid, records_target(target, cold_cache))
        # Cold-cache times are recorded apart: say so where only they hold a best.
        cold = None if cold_cache or best else rec.best(kid, mid, records_target(target, True))
        runs = rec.runs(kid, mid)
        hosts = host_summaries(rec, kid, mid)
        best_host = evaluation_host(rec, best.evaluation_id) if best else ""
    if as_json:
        click.echo(json.dumps({"best": best.as_json() if best else None,
                               "runs": [r.as_json() for r in runs],
                               "best_host": best_host or None, "hosts": hosts}, default=str))
        return
    click.echo(f"{kernel} ({k.structural_hash}) in {rec.path}")
    if best is None:
        hint = " (a best timed from cold caches is recorded: add --cold-cache)" if cold else ""
        click.echo(f"  no implementation recorded: run `partita tune` first{hint}")
    else:
        on = f", timed on {best_host}" if best_host else ""
        click.echo(f"  best {best.time_s * 1e3:.4g} ms (evaluation {best.evaluation_id}"
                   f", entry {best.entry}{on})")
    for h in hosts:
        click.echo(host_line(h))
    for r in runs:
        b = r.best_s
        click.echo(f"  run {r.id}: {r.strategy} seed {r.seed}, {r.status}, "
                   f"{r.evaluations} evaluations, best "
                   f"{'-' if b is None else f'{b * 1e3:.4g} ms'}, started "
                   f"{_when(r.started_at)}")
        if r.space_lower_bound_s and b is not None:
            click.echo(f"    nothing left in its space runs faster than "
                       f"{r.space_lower_bound_s * 1e3:.4g} ms (gap "
                       f"{b / r.space_lower_bound_s:.3g}x)")


@main.command("export")
@click.argument("kernel")
@click.argument("params", nargs=-1)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Directory for the C source, header and Makefile.")
@target_option
@cold_option
@db_option
def export_cmd(kernel: str, params: tuple[str, ...], out_dir: str, target: str,
               cold_cache: bool, db: str | None) -> None:
    """Write the best implementation of KERNEL as a C library (source, header, Makefile);
    with sizes given as ?, the size-generic kernel's dispatching library."""
    if "?" in _params(params).values():
        export_generic(kernel, _params(params), out_dir, target, db)
        return
    k, rec, kid, mid, _ = _records_of(kernel, params, db)
    with rec:
        best = rec.best(kid, mid, records_target(target, cold_cache))
    if best is None:
        _fail(f"no implementation of {kernel} is recorded on this machine: tune it first")
    try:
        program, same = rebuild_program(k, best, target)
    except StaleRecord as exc:
        _fail(str(exc))
    if not same:
        click.echo("note: the code printed again from the recorded decisions differs from the "
                   "code that was measured; the recorded time may not hold", err=True)
    try:
        files = export_c(out_dir, k, program.source, program.entry, signature(k),
                         best.flags, best.decisions, best.time_s,
                         name=f"partita_{kernel}")
    except OSError as exc:
        _fail(f"cannot write {out_dir}: {exc}")
    for f in files:
        click.echo(str(f))


@main.command("report")
@click.argument("kernel")
@click.argument("params", nargs=-1)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Directory for index.html and its plots.")
@target_option
@cold_option
@db_option
def report_cmd(kernel: str, params: tuple[str, ...], out_dir: str, target: str,
               cold_cache: bool, db: str | None) -> None:
    """Write an HTML report of KERNEL's tuning: progress, model accuracy, times, decisions
    (with sizes given as ?: the size-generic kernel's versions, thresholds, training runs)."""
    if "?" in _params(params).values():
        report_generic(kernel, params, _params(params), out_dir, target, db)
        return
    k, rec, kid, mid, fp = _records_of(kernel, params, db)
    with rec:
        best = rec.best(kid, mid, records_target(target, cold_cache))
        evaluations = rec.evaluations(kid, mid)
        runs = rec.runs(kid, mid)
    if not evaluations:
        _fail(f"no evaluation of {kernel} is recorded on this machine: tune it first")
    try:
        path = write_report(out_dir, title=f"{kernel} {' '.join(params)}",
                            kernel_desc=k.describe(), evaluations=evaluations, best=best,
                            machine=fp, flops=_described(kernel, params)[1], runs=runs)
    except OSError as exc:
        _fail(f"cannot write {out_dir}: {exc}")
    click.echo(str(path))


@main.group("stats")
def stats_group() -> None:
    """Statistics of decision spaces and of the model."""


@stats_group.command("prune")
@click.argument("kernel")
@click.argument("params", nargs=-1)
@click.option("--depth", type=click.IntRange(1), default=10, show_default=True)
@click.option("--cut", type=click.FloatRange(min=0, min_open=True),
              help="Cut (seconds): candidates whose bound is at least this are pruned "
                   "(default: the best time recorded for the kernel, else 4x the root bound).")
@click.option("--order", type=click.Choice(["default", "reverse"]), default="default",
              show_default=True, help="Choice order: the default or its reverse.")
@click.option("--samples", type=click.IntRange(1), default=200, show_default=True)
@click.option("--witnesses", "witness_dives", type=click.IntRange(0), default=0,
              show_default=True,
              help="Dives (through children below the cut) from each node kept, looking for an "
                   "implementation bounded below the cut: the nodes that hold one cap what any "
                   "bound from this model could prune (0: do not look).")
@click.option("--seed", type=SEED, default=0, show_default=True)
@target_option
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def prune_cmd(kernel: str, params: tuple[str, ...], depth: int, cut: float | None, order: str,
              samples: int, witness_dives: int, seed: int, target: str, db: str | None,
              as_json: bool) -> None:
    """How much the lower bound prunes at a given depth of the search tree (Beaugnon's
    thesis, table 6.3)."""
    if records_exist(db):
        k, rec, kid, mid, _ = _records_of(kernel, params, db)
        with rec:
            best = rec.best(kid, mid, target)
    else:  # no records: the cut defaults to 4x the root bound
        k, best = _open_space(kernel, params, target)[1].kernel, None
    space = make_space(k, target)
    model = target_model(k, target, measure=False)  # statistics never run micro-benchmarks
    if cut is None:
        root = space.root()
        cut = best.time_s if best else 4 * model.bound(cast(Candidate, root)).time_s
    stats = prune_stats(space, model, depth, cut, samples, random.Random(seed),
                        reverse=order == "reverse", witness_dives=witness_dives)
    result = {"kernel": kernel, "target": target, "depth": depth, "cut_s": cut, "order": order,
              **stats}
    if as_json:
        click.echo(json.dumps(result))
        return
    click.echo(f"{kernel} ({target}): depth {depth}, cut {cut:.3g} s, {order} choice order")
    click.echo(f"  nodes at depth {depth}: {stats['nodes_before']:.3g} before the cut, "
               f"{stats['nodes_after']:.3g} after ({stats['pruned_factor']:.3g}x pruned)")
    click.echo(f"  space size after the cut: {stats['size_after']:.3g} "
               f"(before: {stats['size_before']:.3g})")
    if witness_dives:
        click.echo(f"  nodes kept that hold an implementation bounded below the cut: "
                   f"{stats['nodes_with_witness']:.3g} (found by {witness_dives} dives each); "
                   f"no bound from this model prunes more than about "
                   f"{stats['ceiling_factor']:.3g}x")


@main.command("codegen")
@click.argument("kernel")
@click.argument("params", nargs=-1)
@click.option("--decisions", "decisions_file", type=click.Path(dir_okay=False),
              help="JSON file of decisions (as `partita sample --json` or records give them).")
@click.option("--seed", type=SEED, help="Print a random implementation drawn with this seed.")
@target_option
@click.option("--lang", type=click.Choice(["c", "cuda", "opencl"]),
              help="Language (default: c on the cpu target, cuda on the gpu target).")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object with the source and the decisions.")
def codegen_cmd(kernel: str, params: tuple[str, ...], decisions_file: str | None,
                seed: int | None, target: str, lang: str | None, as_json: bool) -> None:
    """Print the C of one implementation of KERNEL (--decisions FILE or --seed S)."""
    if (decisions_file is None) == (seed is None):
        _fail("give exactly one of --decisions FILE and --seed S")
    space, root = _open_space(kernel, params, target)
    if decisions_file is not None:
        try:
            cand = space.replay(_read_decisions(decisions_file))
        except (SpaceError, ValueError, TypeError) as exc:
            _fail(f"invalid decisions in {decisions_file!r}: {exc}")
        if isinstance(cand, DeadEnd):
            _fail(f"the decisions in {decisions_file!r} lead to a dead end: {cand.reason}")
        if not cand.is_implementation:
            open_ = ", ".join(f"{c}({', '.join(a)})" for c, a in cand.open_choices()[:5])
            _fail(f"the decisions in {decisions_file!r} leave choices open: {open_}")
    else:
        try:
            cand = random_implementation(root, random.Random(seed))
        except NoImplementation as exc:
            _fail(str(exc))
    plug = get_target(target)
    lang = lang or plug.languages[0]
    if lang not in plug.languages:
        _fail(f"--lang {lang} does not print the {target} target "
              f"({printers_text(REGISTRY.values())})")
    try:
        program = plug.printer(lang)(cand, None)
    except CodegenError as exc:
        _fail(f"cannot print this implementation: {exc}")
    if as_json:
        click.echo(json.dumps({"kernel": kernel, "entry": program.entry,
                               "source": program.source,
                               "decisions": [d.to_json() for d in cand.decisions]}))
    else:
        click.echo(program.source, nl=False)


def _print_space(r: dict[str, Any], example: Candidate | None) -> None:
    lo, hi = r["size_ci"]
    params = " ".join(f"{k}={v}" for k, v in r["params"].items())
    click.echo(f"Decision space of {r['kernel']} ({params}) on the {r['target']} target")
    click.echo(f"  open choices at the root   {r['open_choices_at_root']}")
    click.echo(f"  implementations (estimate) {r['size_estimate']:.3g}   "
               f"95% interval [{lo:.3g}, {hi:.3g}]  ({r['method']}, {r['samples']} samples)")
    if heavy_tailed(r["size_ess"], r["samples"]):
        click.echo(f"    heavy-tailed: about {r['size_ess']:.1f} of the {r['samples']} samples "
                   "carry the estimate (effective sample size),\n"
                   "    so the interval understates its uncertainty, and the estimate more often\n"
                   "    falls short of the size than exceeds it (it rises as samples find rarer,\n"
                   "    larger subtrees)")
    click.echo(f"  decisions per descent      {r['mean_depth']:.1f}")
    click.echo(f"  dead ends                  {100 * r['dead_end_rate']:.1f}% of random descents")
    click.echo(f"  random descents per second {r['descents_per_s']:.1f}")
    if example is None:
        click.echo("\nNo random descent reached an implementation.")
        return
    click.echo("\nOne random implementation, as a loop nest:")
    for line in render(loop_tree(example), "  "):
        click.echo(line)
    fixed = [d for d in example.decisions if d.choice in ("size", "mem_space", "layout")]
    if fixed:
        click.echo("\nwith " + ", ".join(str(d) for d in fixed))


main.add_command(cluster_cmd)
main.add_command(worker_cmd)
main.add_command(tune_suite_cmd)
main.add_command(db_cmd)

if __name__ == "__main__":
    main()
