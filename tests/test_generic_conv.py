"""A size-generic conv2d: one kernel for every layer shape, its output extents derived.

The tuned kernel's tests (static tunes, versions, thresholds: about a minute on two cores)
are slow; the dynamic conv's first implementation is checked in the fast subset."""

from __future__ import annotations

import ctypes
import functools
import json
import random
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

import partita
from partita.cli import main
from partita.codegen.program import Program, signature
from partita.db import Records
from partita.kernels.families import conv2d_output_sizes
from partita.kernels.registry import get_spec
from partita.model import Model, Rates
from partita.search.sampling import random_implementation
from partita.space.candidate import Candidate, DeadEnd
from partita.targets import get as get_target
from partita.tuning.dispatch import dispatcher_source
from partita.tuning.generic import (
    GenericTuned,
    Version,
    compile_versions,
    first_completion,
    replay_version,
)
from partita.tuning.generic_store import Recorded, Winner
from partita.tuning.generic_tune import generic_kernel, replayed_winner
from partita.tuning.tuned import host_machine, kernel_params, records_target

RATES = Rates(cores=2, ghz=2.0, vector_bytes=64, arith_per_cycle=2, loads_per_cycle=2,
              stores_per_cycle=1, fma_latency_cycles=4,
              bandwidth_gbs=((48 << 10, 300.0), (2 << 20, 150.0), (1 << 62, 20.0)))
# One xdist worker runs this module: its tuned kernel is made once, not once per worker.
pytestmark = pytest.mark.xdist_group("generic_conv")

FIXED = {"r": 3, "s": 3, "pad": 1}
TRAIN = [{"n": 1, "h": 6, "w": 6, "c": 4, "k": 8}, {"n": 1, "h": 10, "w": 10, "c": 8, "k": 8}]
UNTRAINED = [(1, 7, 9, 3, 5), (2, 5, 5, 8, 16), (1, 13, 11, 4, 8), (2, 3, 4, 1, 1),
             (1, 1, 2, 2, 3)]
"""(n, h, w, c, k): odd image sizes, other channel counts, two images, an image smaller than
the filter (padded to its reach)."""


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("records") / "records.sqlite"


def one_version(fixed: dict[str, Any], leaf: Candidate) -> partita.GenericTuned:
    """The implementation ``leaf`` of the conv over dynamic sizes with the parameters
    ``fixed``, alone behind a dispatcher of one branch."""
    plug = get_target("cpu")
    dyn = leaf.kernel
    entry = "conv2d_generic_v1"
    version = Version(entry, plug.print_program(leaf, entry).source,
                      [d.to_json() for d in leaf.decisions], [])
    source = dispatcher_source(dyn, "conv2d_generic", [entry], [])
    library = compile_versions(dyn, [version],
                               Program(dyn, "conv2d_generic", source, signature(dyn)))
    return GenericTuned("conv2d", dyn, fixed, ["n", "h", "w", "c", "k"], [version], [],
                        "conv2d_generic", source, library)


@pytest.fixture(scope="module")
def single() -> partita.GenericTuned:
    """No tune: one version, the dynamic space's first implementation (plain loops, every
    temporary in memory), behind a dispatcher of one branch."""
    _, fixed, dyn = generic_kernel("conv2d", "cpu", dict(FIXED))
    leaf, _, _ = replay_version(get_target("cpu").space(dyn), [], 0)
    return one_version(fixed, leaf)


@pytest.mark.slow
def test_a_padded_load_tests_only_the_axes_that_can_leave_the_image(
        single: partita.GenericTuned) -> None:
    """Over dynamic sizes, the image's row and column (``p + r - 1`` against ``h``) can
    leave it and are tested; its image and channel indices span their own axes and are not,
    as with static sizes: a test per element on them cost the inner loop of every version."""
    source = single.versions[0].source
    loads = [line for line in source.splitlines() if "? I[" in line]
    assert loads
    for line in loads:
        test = line.split("? I[")[0]
        assert "< n_h" in test and "< n_w" in test, line
        assert "< n_c" not in test and "< n_n" not in test, line


@functools.cache
def dynamic_root(params: tuple[tuple[str, int], ...]) -> Candidate:
    """The root of the conv's space over dynamic sizes with the parameters ``params``, built
    once for every tiling of its windows drawn below (the same space each time: its
    layouts, compiled on the first descent, serve the others)."""
    _, _, dyn = generic_kernel("conv2d", "cpu", dict(params))
    root = get_target("cpu").space(dyn).root()
    assert isinstance(root, Candidate)
    return root


def unrolled_windows(params: dict[str, int], rows: int = 8, columns: int = 1) -> Candidate:
    """The first implementation of the conv over dynamic sizes whose output rows and
    columns are tiled by ``rows`` and ``columns``, unrolled where more than 1 (the image's
    loads with them): copies of a padded load that the printer proves inside the image, and
    others it cannot. (A random completion may nest whole tiles of the filter's loads inside
    the image's, for 10^11 iterations at any size: the first keeps the rest plain.)"""
    root: Candidate | DeadEnd = dynamic_root(tuple(sorted(params.items())))
    for dim, size in (("p", rows), ("q", columns)):
        assert isinstance(root, Candidate)
        root = root.restrict("size", [f"{dim}.2"], [size])
        for tile in (f"{dim}.2", f"{dim}_I.2") if size > 1 else ():
            assert isinstance(root, Candidate)
            root = root.restrict("dim_kind", [tile], ["UNROLL"])
    assert isinstance(root, Candidate)
    leaf = first_completion(root)
    assert leaf is not None
    return leaf


def check_at_shapes(g: partita.GenericTuned, params: dict[str, int], seed: int) -> None:
    """``g`` against numpy at shapes around its tiles (smaller than a tile, a multiple of
    it, one more)."""
    rng = np.random.default_rng(seed)
    taps = (params["r"] - 1) * params["dilation"] + 1 - 2 * params["pad"]
    for h, w in [(4, 8), (5, 9), (13, 3), (1, 1), (12, 17)]:
        h, w = max(h, taps), max(w, taps)
        image = rng.standard_normal((1, h, w, 3), dtype=np.float32)
        filters = rng.standard_normal((5, params["r"], params["s"], 3), dtype=np.float32)
        expected = get_spec("conv2d").reference(
            image.astype(np.float64), filters.astype(np.float64), stride=params["stride"],
            dilation=params["dilation"], pad=params["pad"])["O"]
        np.testing.assert_allclose(g(image, filters), expected, rtol=1e-4, atol=1e-4,
                                   err_msg=f"{h}x{w}")


@pytest.mark.slow
def test_padded_tests_of_copies_proven_inside_the_image_are_dropped() -> None:
    """With rows tiled by 8 and unrolled, the full tiles' middle copies of a 3x3 window
    (pad 1) stay inside the image, through the relation of the output's height to the
    image's (``n_h - n_p >= 0``): their loads test the column only. The first and last
    copies, and the last partial tile, keep the row's test."""
    params = {**FIXED, "stride": 1, "dilation": 1}
    leaf = unrolled_windows(params)
    assert [str(r) for r in leaf.kernel.size_relations] == ["n_h - n_p >= 0",
                                                             "n_w - n_q >= 0"]
    g = one_version({"r": 3, "s": 3, "pad": 1}, leaf)
    tests = [line.split("? I[")[0] for line in g.versions[0].source.splitlines()
             if "? I[" in line]
    assert any("< n_h" not in t for t in tests) and any("< n_h" in t for t in tests)
    check_at_shapes(g, params, 0)


@pytest.mark.slow
@pytest.mark.parametrize("params", [
    {"r": 7, "s": 7, "stride": 2, "pad": 3, "dilation": 1},
    {"r": 3, "s": 3, "stride": 1, "pad": 2, "dilation": 2},
    {"r": 3, "s": 2, "stride": 3, "pad": 0, "dilation": 1},
    {"r": 1, "s": 1, "stride": 1, "pad": 0, "dilation": 1},
    {"r": 1, "s": 3, "stride": 1, "pad": 2, "dilation": 1},
], ids=["7x7-stride2-pad3", "dilated", "stride3-unpadded", "1x1-unpadded",
        "pad-beyond-the-filter"])
def test_copies_proven_inside_are_inside_at_every_stride_dilation_and_pad(
        params: dict[str, int]) -> None:
    """Random implementations with unrolled output rows and columns, over dynamic sizes,
    against numpy at shapes around their tiles: a test dropped wrongly reads outside the
    image (or its zeros) and shows as a wrong output."""
    for rows, columns in ((8, 1), (1, 4)):
        check_at_shapes(one_version(params, unrolled_windows(params, rows, columns)), params,
                        rows)


@pytest.mark.slow
@pytest.mark.parametrize("shape", UNTRAINED)
def test_the_dynamic_conv_matches_numpy_at_any_shape(single: partita.GenericTuned,
                                                     shape: tuple[int, ...]) -> None:
    image, filters, expected = operands(*shape)
    np.testing.assert_allclose(single(image, filters), expected, rtol=1e-4, atol=1e-4)
    assert single.sizes_of((image, filters))["n_p"] == shape[1]


@pytest.fixture(scope="module")
def generic(db: Path) -> partita.GenericTuned:
    return partita.tune_generic("conv2d", TRAIN, evaluations=2, db=db, measure_s=0.002,
                                tune_options={"model": Model(RATES), "batch": 2}, **FIXED)


def operands(n: int, h: int, w: int, c: int, k: int, seed: int = 0
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Image, filter and the library's numpy reference of their convolution (pad 1)."""
    rng = np.random.default_rng(seed)
    image = rng.standard_normal((n, h, w, c), dtype=np.float32)
    filters = rng.standard_normal((k, 3, 3, c), dtype=np.float32)
    expected = get_spec("conv2d").reference(image.astype(np.float64),
                                            filters.astype(np.float64), stride=1,
                                            dilation=1, pad=1)["O"]
    return image, filters, expected


@pytest.mark.slow
@pytest.mark.parametrize("shape", [tuple(s.values()) for s in TRAIN] + UNTRAINED)
def test_every_version_and_the_dispatcher_match_numpy(generic: partita.GenericTuned,
                                                      shape: tuple[int, ...]) -> None:
    image, filters, expected = operands(*shape)
    assert expected.shape[1:3] == (shape[1], shape[2])  # pad 1 keeps a 3x3 conv's extent
    np.testing.assert_allclose(generic(image, filters), expected, rtol=1e-4, atol=1e-4)
    for i in range(len(generic.versions)):
        np.testing.assert_allclose(generic.call_version(i, image, filters), expected,
                                   rtol=1e-4, atol=1e-4, err_msg=generic.versions[i].entry)
    out = np.full(expected.shape, np.nan, np.float32)
    assert generic(image, filters, out=out) is out
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_a_recorded_winner_replays_as_the_version_it_became(generic: partita.GenericTuned,
                                                           db: Path) -> None:
    """A later tune takes the replay chosen for a recorded winner (its tiles mapped or not)
    again rather than choosing anew: the same decisions, dropped and completed lists; a
    winner that changed since has none."""
    _, _, dyn = generic_kernel("conv2d", "cpu", dict(FIXED))
    with Records(db) as rec:
        recorded = Recorded(rec.generic(rec.kernel_id(dyn, kernel_params(dyn)),
                                        rec.machine_id(host_machine()), records_target("cpu")))
    plug = get_target("cpu")
    space = plug.space(dyn)
    for v in generic.versions:
        for sizes in v.won_at:
            winner = recorded.winner(sizes)
            assert winner is not None
            known = recorded.replay(winner)
            assert known is not None and json.dumps(known.decisions) == json.dumps(v.decisions)
            leaf, decisions, dropped, completed = replayed_winner(dyn, plug, space, winner, 0,
                                                                  None, 0.0, known)
            assert json.dumps(decisions) == json.dumps(v.decisions)  # the timings' key
            assert plug.print_program(leaf, v.entry).source == v.source
            assert (dropped, completed) == (v.dropped, v.completed)
            changed = Winner(winner.sizes, winner.decisions[:-1], None)
            assert recorded.replay(changed) is None


@pytest.mark.slow
def test_the_work_is_the_convolutions_iteration_count(generic: partita.GenericTuned) -> None:
    """The dispatcher compares n * p * q * k * r * s * c: half the conv's flops, the image's
    rows and columns entering through the output's."""
    assert generic.dynamic == ["n", "h", "w", "c", "k"]
    sizes = {"n": 2, "h": 7, "w": 9, "c": 3, "k": 5}
    assert generic.work(sizes) == 2 * 7 * 9 * 5 * 3 * 3 * 3
    assert generic.work(sizes) * 2 == get_spec("conv2d").flops(**get_spec("conv2d").resolve(
        {**FIXED, **sizes}))
    assert "n_h" not in generic.source.split("work = ")[1].split(";")[0]
    assert len(generic.training) == 2
    for run in generic.training:
        assert run.chosen == generic.version_for(run.sizes)
        assert all(t is not None and t > 0 for t in run.version_times)


def test_inconsistent_shapes_are_named(single: partita.GenericTuned) -> None:
    generic = single
    image, filters, _ = operands(1, 6, 6, 4, 8)
    with pytest.raises(ValueError, match=r"^argument 'F' dimension 3 is 3, but size n_c is 4 "
                                         r"from argument 'I' dimension 3$"):
        generic(image, filters[..., :3])
    with pytest.raises(ValueError, match="argument 'O' dimension 1 is 5, but size n_p is 6 "
                                         "from the inputs' shapes"):
        generic(image, filters, out=np.zeros((1, 5, 6, 8), np.float32))
    with pytest.raises(ValueError, match=r"'F' must have shape \(8, 3, 3, 4\)"):
        generic(image, np.zeros((8, 5, 5, 4), np.float32))  # the filter's extent is static


def test_static_parameters_are_refused_as_dynamic() -> None:
    with pytest.raises(ValueError, match="r cannot be dynamic"):
        partita.tune_generic("conv2d", [(1, 6, 6, 4, 8, 3)], s=3)
    result = CliRunner().invoke(main, ["tune", "conv2d", "n=?", "h=?", "w=?", "c=?", "k=?",
                                       "stride=?", "--train", "1,6,6,4,8"])
    assert result.exit_code == 2, result.output
    assert "stride cannot be dynamic" in result.output
    assert conv2d_output_sizes({"h": 7, "w": 9, "r": 3, "s": 3, "stride": 2, "pad": 1,
                                "dilation": 1}) == {"n_p": 4, "n_q": 5}


@pytest.mark.slow
def test_the_exported_library_builds_and_convolves(generic: partita.GenericTuned, db: Path,
                                                   tmp_path: Path) -> None:
    out = tmp_path / "lib"
    args = ["conv2d", "n=?", "h=?", "w=?", "c=?", "k=?", "r=3", "s=3", "pad=1"]
    result = CliRunner().invoke(main, ["export", *args, "--out", str(out), "--db", str(db)])
    assert result.exit_code == 0, result.output
    for v in generic.versions:
        assert (out / f"{v.entry}.c").read_text() == v.source
    subprocess.run(["make", "-s", "-C", str(out)], check=True, capture_output=True)
    lib = ctypes.CDLL(str(out / "libconv2d_generic.so"))
    names = [p.strip().split()[-1] for p in (out / "conv2d_generic.h").read_text()
             .split("void conv2d_generic(")[1].split(")")[0].split(",")]
    sizes = [n for n in names if not n.lstrip("*").isupper()]
    pointer = ctypes.POINTER(ctypes.c_float)
    lib.conv2d_generic.argtypes = [ctypes.c_int64] * len(sizes) + [pointer] * 3
    n, h, w, c, k = 2, 9, 5, 3, 7
    image, filters, expected = operands(n, h, w, c, k)
    values = {"n_n": n, "n_h": h, "n_w": w, "n_c": c, "n_k": k, "n_p": h, "n_q": w}
    o = np.full(expected.shape, np.nan, np.float32)
    lib.conv2d_generic(*(values[s] for s in sizes),
                       *(x.ctypes.data_as(pointer) for x in (image, filters, o)))
    np.testing.assert_allclose(o, expected, rtol=1e-4, atol=1e-4)
    shown = CliRunner().invoke(main, ["show", *args, "--db", str(db)])
    assert shown.exit_code == 0 and "n=1 h=10 w=10 c=8 k=8" in shown.output, shown.output
    report = CliRunner().invoke(main, ["report", *args, "--out", str(tmp_path / "rep"),
                                       "--db", str(db)])
    assert report.exit_code == 0, report.output
    assert "n=1 h=6 w=6 c=4 k=8" in (tmp_path / "rep" / "index.html").read_text()


@pytest.mark.slow
def test_the_command_line_tunes_it_end_to_end(generic: partita.GenericTuned,
                                              db: Path) -> None:
    """The training sizes are recorded: the command reads them back, and a new one joins."""
    result = CliRunner().invoke(main, ["tune", "conv2d", "n=?", "h=?", "w=?", "c=?", "k=?",
                                       "r=3", "s=3", "pad=1", "--train",
                                       "1,6,6,4,8;1,10,10,8,8", "--evaluations", "2",
                                       "--db", str(db), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["dynamic"] == ["n", "h", "w", "c", "k"] and out["entry"] == "conv2d_generic"
    assert [t["sizes"] for t in out["training"]] == TRAIN
    assert out["tuned_sizes"] == []
    assert (Path(out["code_path"]) / "conv2d_generic.c").exists()


@pytest.mark.slow
def test_a_stride_two_conv_matches_numpy_at_many_shapes(tmp_path: Path) -> None:
    g = partita.tune_generic("conv2d", [(1, 9, 9, 4, 8), (2, 12, 10, 8, 4)], evaluations=2,
                             db=tmp_path / "records.sqlite", measure_s=0.002, r=3, s=3,
                             stride=2, pad=1, tune_options={"model": Model(RATES), "batch": 3})
    rng = np.random.default_rng(3)
    for n, h, w, c, k in rng.integers(1, 14, size=(8, 5)):
        n = int(n % 3 + 1)
        image = rng.standard_normal((n, int(h), int(w), int(c)), dtype=np.float32)
        filters = rng.standard_normal((int(k), 3, 3, int(c)), dtype=np.float32)
        expected = get_spec("conv2d").reference(image.astype(np.float64),
                                                filters.astype(np.float64), stride=2,
                                                dilation=1, pad=1)["O"]
        np.testing.assert_allclose(g(image, filters), expected, rtol=1e-4, atol=1e-4)
        for i in range(len(g.versions)):
            np.testing.assert_allclose(g.call_version(i, image, filters), expected,
                                       rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_random_static_implementations_replayed_on_dynamic_sizes_match_numpy() -> None:
    """Random implementations of the conv at a training size, replayed on the dynamic sizes
    as the generic tuner replays its winners: temporaries sized by the dynamic image and
    channel sizes, where a vector dim is not their innermost slot, have lanes a dynamic stride
    apart and are accessed lane by lane (the printer used to refuse them, and the replay
    dropped the vector dims), and every version computes the convolution."""
    _, fixed, dyn = generic_kernel("conv2d", "cpu", dict(FIXED))
    plug = get_target("cpu")
    static_root = partita.space(partita.kernel("conv2d", **TRAIN[0], **FIXED)).root()
    rng = random.Random(3)
    versions, vector_kept = [], 0
    dyn_space = plug.space(dyn)  # one space replays every version, as in the generic tuner
    for i in range(5):
        decisions = random_implementation(static_root, rng).decisions
        leaf, dropped, _ = replay_version(dyn_space, decisions, i)
        vector_kept += sum(d.choice == "dim_kind" and "VECTOR" in map(str, d.values)
                           for d in leaf.decisions)
        entry = f"conv2d_replayed_v{i}"
        versions.append(Version(entry, plug.print_program(leaf, entry).source,
                                [d.to_json() for d in leaf.decisions], dropped))
    assert vector_kept > 0
    entries = [v.entry for v in versions]
    source = dispatcher_source(dyn, "conv2d_replayed", entries[:1], [])
    library = compile_versions(dyn, versions,
                               Program(dyn, "conv2d_replayed", source, signature(dyn)))
    g = GenericTuned("conv2d", dyn, fixed, ["n", "h", "w", "c", "k"], versions, [],
                     "conv2d_replayed", source, library)
    for shape in UNTRAINED[:2]:
        image, filters, expected = operands(*shape)
        for i, v in enumerate(versions):
            np.testing.assert_allclose(g.call_version(i, image, filters), expected,
                                       rtol=1e-4, atol=1e-4, err_msg=v.entry)
