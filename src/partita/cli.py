"""The command line: ``partita COMMAND KERNEL key=value... [options] [--json]``."""

from __future__ import annotations

import json
import random
import sys
from typing import Any

import click

from partita.api import kernel as library_kernel
from partita.api import space as make_space
from partita.codegen.c import CodegenError, print_c
from partita.codegen.looptree import loop_tree, render
from partita.ir.types import KernelError
from partita.kernels import get_spec, list_kernels
from partita.search.sampling import NoImplementation, random_implementation
from partita.space.candidate import Candidate, DeadEnd
from partita.space.decl import SpaceError
from partita.space.estimate import space_stats
from partita.targets import TARGETS


def _params(items: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.UsageError(f"expected key=value, got {item!r}")
        out[key] = value
    return out


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


@click.group()
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
@click.option("--target", type=click.Choice(TARGETS), default="cpu", show_default=True)
@click.option("--samples", type=click.IntRange(1), default=200, show_default=True,
              help="Random descents for the estimates.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--method", type=click.Choice(["knuth", "chen"]), default="knuth",
              show_default=True, help="Size estimator.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def space_cmd(kernel: str, params: tuple[str, ...], target: str, samples: int, seed: int,
              method: str, as_json: bool) -> None:
    """Estimate the size of KERNEL's decision space and show one random implementation."""
    _, root = _open_space(kernel, params, target)
    rng = random.Random(seed)
    stats = space_stats(root, samples, rng, method=method)
    example = _example(root, random.Random(seed))
    result: dict[str, Any] = {
        "kernel": kernel, "params": get_spec(kernel).resolve(_params(params)),
        "target": target, "size_estimate": stats.size_estimate,
        "size_ci": list(stats.size_ci), "mean_depth": stats.mean_depth,
        "dead_end_rate": stats.dead_end_rate, "descents_per_s": stats.descents_per_s,
        "samples": samples, "method": method, "open_choices_at_root": len(root.open_slots()),
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


def _open_space(kernel: str, params: tuple[str, ...], target: str) -> tuple[Any, Candidate]:
    """(space, root) of a library kernel, or a one-line error and exit status 2."""
    try:
        k = library_kernel(kernel, **_params(params))
        space = make_space(k, target)
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
    from partita.targets.cpu.measure import describe, is_cached

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
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the draws and of the input data.")
@click.option("--target", type=click.Choice(["cpu"]), default="cpu", show_default=True)
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0.01), default=10.0,
              show_default=True, help="Seconds one kernel call may take before it is killed.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def sample_cmd(kernel: str, params: tuple[str, ...], count: int, seed: int, target: str,
               timeout_s: float, as_json: bool) -> None:
    """Draw random implementations of KERNEL; compile, run, verify and time each one."""
    from partita.runtime import Evaluator
    from partita.search.sampling import sample_and_evaluate

    _, root = _open_space(kernel, params, target)
    spec = get_spec(kernel)
    resolved = spec.resolve(_params(params))
    with Evaluator(seed=seed, timeout_s=timeout_s) as ev:
        report = sample_and_evaluate(root, count, random.Random(seed), ev.evaluate)
    result = report.to_json(spec.flops(**resolved))
    if as_json:
        click.echo(json.dumps(result))
        return
    click.echo(f"{report.sampled} random implementations of {kernel} "
               f"({' '.join(f'{k}={v}' for k, v in resolved.items())})")
    click.echo(f"  compiled {report.compiled}, verified against numpy {report.verified}, "
               f"failed {len(report.failed)}")
    if report.best_time_s is not None:
        click.echo(f"  best {report.best_time_s * 1e3:.4g} ms "
                   f"({result['gflops_best']:.3g} GFLOP/s); median of the verified "
                   f"{sorted(report.times)[len(report.times) // 2] * 1e3:.4g} ms")
    for f in report.failed[:10]:
        click.echo(f"  failed: {f['reason']}")
    if report.verified < report.sampled:
        sys.exit(1)


@main.command("codegen")
@click.argument("kernel")
@click.argument("params", nargs=-1)
@click.option("--decisions", "decisions_file", type=click.Path(dir_okay=False),
              help="JSON file of decisions (as `partita sample --json` or records give them).")
@click.option("--seed", type=int, help="Print a random implementation drawn with this seed.")
@click.option("--target", type=click.Choice(["cpu"]), default="cpu", show_default=True)
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object with the source and the decisions.")
def codegen_cmd(kernel: str, params: tuple[str, ...], decisions_file: str | None,
                seed: int | None, target: str, as_json: bool) -> None:
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
    try:
        program = print_c(cand)
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


if __name__ == "__main__":
    main()
