"""The CPU description: JSON round trip, per-machine cache, helpers, and a real measurement.

The real measurement runs once per test session in quick mode (a few seconds) and is checked
only for sanity: positive rates, relations every CPU satisfies (fp32 peak about twice fp64,
DRAM slower than L1, latencies of at least a cycle), never absolute speeds.
"""

from __future__ import annotations

import json
from dataclasses import replace
from itertools import pairwise

import numpy as np
import pytest

from partita.targets import AVX512_REFERENCE
from partita.targets.cpu import measure as measure_mod
from partita.targets.cpu.description import (
    SCHEMA,
    CpuDescription,
    dtype_name,
    fresh_specs,
    ladder_specs,
    machine_key,
)
from partita.targets.cpu.measure import (
    FULL,
    QUICK,
    MeasureError,
    cache_path,
    describe,
    summarize,
    working_sets,
)
from tests.host import MEASURED_HOST, measured_host

REQUIRED_KEYS = {"cores", "peak_gflops_fp32", "peak_gflops_fp64", "stream_triad_gbs"}


@pytest.fixture
def nominal() -> CpuDescription:
    return CpuDescription.nominal(AVX512_REFERENCE, compiler="gcc test", frequency_ghz=3.0)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PARTITA_CACHE", str(tmp_path))
    return tmp_path


@pytest.fixture
def fake_measure(monkeypatch, nominal):
    """Replaces the benchmarks with a counter returning a fixed description."""
    calls = []

    def fake(cpu=None, **kwargs):
        calls.append(cpu)
        return replace(nominal, source="measured", key=machine_key(cpu, "gcc test"))

    monkeypatch.setattr(measure_mod, "measure", fake)
    monkeypatch.setattr(measure_mod, "compiler_version", lambda cc="gcc": "gcc test")
    monkeypatch.setattr(measure_mod.shutil, "which", lambda cc: "/usr/bin/" + cc)
    return calls


@pytest.fixture(scope="module")
def measured() -> CpuDescription:
    return measured_host()


# ---------------------------------------------------------------------- JSON


def test_json_round_trip(nominal):
    data = json.loads(json.dumps(nominal.to_json()))
    assert CpuDescription.from_json(data) == nominal
    assert data.keys() >= REQUIRED_KEYS


def test_json_rejects_other_layouts(nominal):
    data = nominal.to_json()
    with pytest.raises(ValueError):
        CpuDescription.from_json({**data, "schema": SCHEMA + 1})
    with pytest.raises(ValueError):
        CpuDescription.from_json({**data, "levels": [{"name": "L1"}]})


@pytest.mark.slow  # measures this machine (about 5 s)
@MEASURED_HOST
def test_measured_round_trip(measured):
    data = json.loads(measured.dumps())
    assert CpuDescription.from_json(data) == measured
    assert data.keys() >= REQUIRED_KEYS
    assert data["samples"], "benchmark summaries are kept for tracing"


# ---------------------------------------------------------------------- cache


def test_describe_caches(cache, fake_measure):
    first = describe(cpu=AVX512_REFERENCE)
    path = cache_path(first.key)
    assert path.parent == cache / "machines" and path.exists()
    second = describe(cpu=AVX512_REFERENCE)
    assert len(fake_measure) == 1, "second describe read the cache"
    assert second == first
    describe(cpu=AVX512_REFERENCE, force=True)
    assert len(fake_measure) == 2


def test_describe_without_measuring(cache, fake_measure):
    desc = describe(measure_if_missing=False, cpu=AVX512_REFERENCE)
    assert desc.source == "nominal" and not fake_measure
    assert not (cache / "machines").exists() or not any((cache / "machines").iterdir())


def test_describe_remeasures_unreadable_cache(cache, fake_measure):
    path = cache_path(machine_key(AVX512_REFERENCE, "gcc test"))
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    with pytest.warns(UserWarning, match="unreadable"):
        desc = describe(cpu=AVX512_REFERENCE)
    assert desc.source == "measured" and len(fake_measure) == 1
    assert CpuDescription.load(path) == desc


def test_describe_remeasures_a_description_in_another_layout(cache, fake_measure, nominal):
    path = cache_path(machine_key(AVX512_REFERENCE, "gcc test"))
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({**nominal.to_json(), "schema": SCHEMA - 1}))
    with pytest.warns(UserWarning, match="another layout .* measuring this machine again"):
        desc = describe(cpu=AVX512_REFERENCE)
    assert desc.source == "measured" and len(fake_measure) == 1
    assert CpuDescription.load(path) == desc


def test_describe_falls_back_when_measuring_fails(cache, fake_measure, monkeypatch):
    def broken(cpu=None, **kwargs):
        raise MeasureError("no luck")

    monkeypatch.setattr(measure_mod, "measure", broken)
    with pytest.warns(UserWarning, match="nominal"):
        desc = describe(cpu=AVX512_REFERENCE)
    assert desc.source == "nominal"
    assert not cache_path(desc.key).exists(), "estimates are not cached"


def test_key_depends_on_machine_and_compiler():
    base = machine_key(AVX512_REFERENCE, "gcc 12")
    assert base == machine_key(AVX512_REFERENCE, "gcc 12")
    assert base != machine_key(AVX512_REFERENCE, "gcc 13")
    assert base != machine_key(replace(AVX512_REFERENCE, cores=4), "gcc 12")
    assert base != machine_key(replace(AVX512_REFERENCE, flags=("avx2",)), "gcc 12")


# ---------------------------------------------------------------------- helpers


def test_peak_flops_by_lanes_and_cores(nominal):
    f32 = nominal.peak_flops("float32")
    assert f32 == pytest.approx(nominal.peak_gflops_fp32 * 1e9)
    assert nominal.peak_flops(np.float64) == pytest.approx(nominal.peak_gflops_fp64 * 1e9)
    assert nominal.peak_flops("fp32", lanes=1) < nominal.peak_flops("fp32", lanes=8) < f32
    assert nominal.peak_flops("fp32", lanes=64) == f32, "wider than the hardware: split"
    assert nominal.peak_flops("fp32", lanes=16, cores=1) == pytest.approx(f32 / 2)
    assert nominal.peak_flops("fp32", cores=99) == f32
    with pytest.raises(ValueError):
        dtype_name(np.int32)


def test_peak_is_the_fastest_width_not_the_widest(nominal):
    # Cores that split 512-bit FMAs into 256-bit halves measure both widths at one rate; noise
    # can put the narrower ahead, and the peak must still agree with peak_gflops_fp32.
    fp32 = {f.bits: f for f in nominal.fma if f.dtype == "fp32"}
    ahead = replace(fp32[256], gflops_core=fp32[512].gflops_core * 1.002,
                    gflops_all=fp32[512].gflops_all * 1.001)
    fma = tuple(ahead if f is fp32[256] else f for f in nominal.fma)
    split = replace(nominal, fma=fma, peak_gflops_fp32=ahead.gflops_all)
    assert split.peak_flops("fp32") == pytest.approx(ahead.gflops_all * 1e9)
    assert split.peak_flops("fp32", cores=1) == pytest.approx(ahead.gflops_core * 1e9)
    assert split.peak_flops("fp32", lanes=16) == pytest.approx(fp32[512].gflops_all * 1e9)


def test_bandwidth_picks_level_by_size(nominal):
    caps = AVX512_REFERENCE
    names = [nominal.level(n).name for n in
             (1024, caps.l1d_bytes * 2, caps.l1d_bytes * 2 + 1, caps.l2_bytes * 2,
              caps.l3_bytes, caps.l3_bytes + 1, 1 << 40)]
    assert names == ["L1", "L1", "L2", "L2", "L3", "DRAM", "DRAM"]
    sizes = [1 << k for k in range(10, 36)]
    bws = [nominal.bandwidth(n) for n in sizes]
    assert all(a >= b for a, b in pairwise(bws))


def test_rates_for_the_model(nominal):
    assert nominal.fma_per_cycle() == pytest.approx(2.0)
    assert nominal.fma_per_cycle("fp64", bits=0) == pytest.approx(2.0)
    assert nominal.loads_per_cycle == pytest.approx(2.0)
    assert nominal.stores_per_cycle == pytest.approx(1.0)
    table = nominal.bandwidth_table()
    assert [limit for limit, _ in table[:-1]] == [lv.capacity_bytes for lv in nominal.levels[:-1]]
    assert table[-1][0] > 1 << 50 and table[-1][1] == nominal.levels[-1].bandwidth_gbs
    text = nominal.summary()
    assert "nominal" in text and "STREAM" in text


def test_summarize_prefers_clean_median():
    rates = [10.0, 1.0, 9.0, 11.0, 2.0]
    shares = [1.0, 0.3, 0.99, 0.97, 0.5]
    assert summarize(rates, shares) == (10.0, 11.0, 3), "median and best of the clean ones"
    assert summarize([3.0, 5.0], [0.1, 0.2]) == (5.0, 5.0, 0), "none clean: the best"


@pytest.mark.parametrize("settings", [FULL, QUICK])
def test_working_sets_are_ordered(settings):
    for cpu in (AVX512_REFERENCE, replace(AVX512_REFERENCE, cores=64, l3_bytes=32 << 20)):
        ws = working_sets(cpu, cpu.cores, settings)
        caches = cpu.l3_bytes + cpu.cores * cpu.l2_bytes
        assert ws.l1 <= cpu.l1d_bytes < ws.l2 <= cpu.l2_bytes < ws.l3
        assert ws.total("l3") < caches < ws.total("dram")
        # The ladder doubles from twice the private caches and stays below the shared one.
        private = cpu.cores * cpu.l2_bytes
        assert list(ws.ladder) == [2 * private << i for i in range(len(ws.ladder))]
        assert all(total < cpu.l3_bytes for total in ws.ladder)
        assert not ws.ladder or 2 * ws.ladder[-1] >= cpu.l3_bytes
    # 64 cores whose L2s hold more than the L3: nothing between them to measure.
    assert working_sets(replace(AVX512_REFERENCE, cores=64, l3_bytes=32 << 20), 64,
                        FULL).ladder == ()


def test_nominal_is_marked_and_sane(nominal):
    assert nominal.source == "nominal"
    assert nominal.peak_gflops_fp32 == pytest.approx(2 * nominal.peak_gflops_fp64)
    assert nominal.levels[-1].bandwidth_gbs < nominal.levels[0].bandwidth_gbs


# ---------------------------------------------------------------------- measured


@pytest.mark.slow  # measures this machine (about 5 s)
@MEASURED_HOST
def test_measured_numbers_are_sane(measured):
    d = measured
    assert d.source == "measured" and d.quick
    assert d.cores >= 1 and d.frequency_ghz > 0.2
    assert all(f.gflops_core > 0 and f.gflops_all > 0 and f.flops_per_cycle > 0 for f in d.fma)
    assert {f.bits for f in d.fma} >= {0, 128}
    ratio = d.peak_gflops_fp32 / d.peak_gflops_fp64
    assert 1.2 < ratio < 3.5, ratio
    for dtype in ("fp32", "fp64"):
        by_width = sorted((f.bits, f.gflops_core) for f in d.fma if f.dtype == dtype)
        assert by_width[-1][1] > 1.5 * by_width[0][1], "vectors beat scalars"
    assert d.fma_latency_cycles >= 1 and d.add_latency_cycles >= 1
    assert d.load_latency_cycles >= 1
    assert d.load_bytes_per_cycle > 0 and d.store_bytes_per_cycle > 0
    # scalar loads and stores: at least a few tenths per cycle, at most a handful
    assert 0.3 < d.scalar_loads_per_cycle < 8 and 0.2 < d.scalar_stores_per_cycle < 8
    l1, dram = d.levels[0], d.levels[-1]
    assert [lv.name for lv in d.levels] == ["L1", "L2", "L3", "DRAM"]
    assert all(lv.bandwidth_gbs > 0 for lv in d.levels)
    assert dram.bandwidth_gbs < l1.bandwidth_gbs
    assert 0 < d.stream_triad_gbs < l1.bandwidth_gbs
    assert d.peak_flops("fp32") == pytest.approx(d.peak_gflops_fp32 * 1e9)
    assert d.bandwidth(1 << 40) == pytest.approx(dram.bandwidth_gbs * 1e9)
    assert d.seconds < 60
    # Every rung of the ladder ran on all cores and on one.
    ran = {s.spec for s in d.samples}
    for total in d.ladder_bytes:
        for threads in {1, d.cores}:
            assert set(ladder_specs(total, threads)) <= ran
    assert min(d.fma_per_cycle(), d.loads_per_cycle, d.stores_per_cycle) > 0
    assert "measured" in d.summary()
    # Fresh memory: faulted in on one thread and on all, the faster counts.
    assert set(fresh_specs(d.cores)) <= ran
    assert d.fresh_pages_per_s == max(s.best for s in d.samples if s.spec.startswith("fresh:"))
    assert d.fresh_pages_per_s > 0
    assert "fresh memory" in d.summary()


@pytest.mark.slow  # measures this machine (about 5 s)
def test_triad_probe_times_the_description_benchmark(measured):
    """The probe runs the description's DRAM triad again (same working set, same statistic):
    a rate of the same order as the measured description's, not a fixed number."""
    with measure_mod.TriadProbe(settings=QUICK) as probe:
        dram = working_sets(measure_mod.host(), probe.threads, QUICK).dram
        assert probe.spec == f"triad:{dram}:{probe.threads}"
        rates = [probe.gbs() for _ in range(2)]
    assert all(np.isfinite(r) and r > 0 for r in rates)
    assert measured.stream_triad_gbs / 10 < max(rates) < measured.stream_triad_gbs * 10


def _fake_benchmarks(monkeypatch, all_core_share: list[float]) -> list[list[str]]:
    """Benchmarks that report fixed rates, except that the all-core ones run at the next of
    ``all_core_share`` times ``cores`` one-core rates, call by call (the last one repeats):
    a host that schedules both cores of a virtual machine on one physical core."""
    calls: list[list[str]] = []

    def fake_run_specs(exe, specs, settings, reps=None, timeout_s=600.0):
        calls.append(list(specs))
        share = all_core_share[min(len(calls) - 2, len(all_core_share) - 1)] if specs else 1
        out = {}
        for spec in specs:
            threads = int(spec.rsplit(":", 1)[1]) if spec.count(":") >= 2 else 1
            rate = 1e10 * (threads * share if threads > 1 else 1)
            out[spec] = measure_mod.Runs(measure_mod._unit(spec), [rate] * 5, [1.0] * 5)
        return out, 512

    monkeypatch.setattr(measure_mod, "build", lambda workdir, cc="gcc": workdir / "fake")
    monkeypatch.setattr(measure_mod, "compiler_version", lambda cc="gcc": "gcc test")
    monkeypatch.setattr(measure_mod, "run_specs", fake_run_specs)
    return calls


def test_all_core_benchmarks_that_do_not_scale_are_timed_again(monkeypatch):
    calls = _fake_benchmarks(monkeypatch, [0.5, 1.0])
    d = measure_mod.measure(AVX512_REFERENCE, threads=2)
    # The first all-core rates were half what two cores do: timed again, and kept from then.
    assert len(calls) == 3 and all(spec.endswith(":2") for spec in calls[2])
    assert d.peak_gflops_fp32 == pytest.approx(2 * 10.0)
    assert d.levels[0].bandwidth_gbs == pytest.approx(20.0)


def test_all_core_benchmarks_that_never_scale_are_reported(monkeypatch):
    calls = _fake_benchmarks(monkeypatch, [0.5])
    with pytest.warns(UserWarning, match="measure again when the machine is quieter"):
        d = measure_mod.measure(AVX512_REFERENCE, threads=2)
    assert len(calls) == 2 + measure_mod.ALL_CORE_RETRIES
    assert d.peak_gflops_fp32 == pytest.approx(10.0)


def test_scaling_all_core_benchmarks_are_timed_once(monkeypatch):
    calls = _fake_benchmarks(monkeypatch, [0.9])
    measure_mod.measure(AVX512_REFERENCE, threads=2)
    assert len(calls) == 2


def test_a_description_whose_all_core_rates_do_not_scale_says_so(monkeypatch, cache, nominal):
    calls = _fake_benchmarks(monkeypatch, [0.5])
    with pytest.warns(UserWarning):
        halved = measure_mod.measure(AVX512_REFERENCE, threads=2)
    assert len(calls) == 2 + measure_mod.ALL_CORE_RETRIES
    assert halved.unscaled and all(spec.endswith(":2") for spec in halved.unscaled)
    assert "measure again when quieter" in halved.summary()
    # Loaded from the cache, it warns again; one measured on a quiet machine does not.
    key = machine_key(AVX512_REFERENCE, "gcc test")
    monkeypatch.setattr(measure_mod, "compiler_version", lambda cc="gcc": "gcc test")
    monkeypatch.setattr(measure_mod.shutil, "which", lambda cc: "/usr/bin/" + cc)
    path = cache_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(replace(halved, key=key).dumps())
    with pytest.warns(UserWarning, match="do not scale"):
        describe(cpu=AVX512_REFERENCE)
    _fake_benchmarks(monkeypatch, [1.0])
    quiet = measure_mod.measure(AVX512_REFERENCE, threads=2)
    assert not quiet.unscaled and "quieter" not in quiet.summary()
