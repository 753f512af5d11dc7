"""Tuning on a real Dask cluster: a LocalCluster of worker processes on this machine, one
measuring and one compiling, and what happens when the measuring worker is killed mid-tune."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

import partita
from partita.cli import main
from partita.codegen.program import Program
from partita.db import Records
from partita.runtime import cluster as cluster_module
from partita.runtime.cluster import ClusterEvaluator, measure_resource
from partita.runtime.harness import TimingOptions
from partita.search.sampling import random_implementation
from partita.search.stop import Evaluations
from partita.search.strategies import SearchState
from partita.search.tuner import Evaluation
from partita.targets import get as get_target
from partita.tuning.tuned import host_machine, kernel_params
from tests.clusters import KEY, cluster, measuring_worker, recorded

distributed = pytest.importorskip("distributed", reason="distributed (Dask) is not installed")


@pytest.mark.slow
def test_a_tune_on_a_cluster_is_verified_and_names_the_measuring_host(tmp_path: Path) -> None:
    db = tmp_path / "records.sqlite"
    k = partita.kernel("axpy", n=4096)
    with cluster() as client:
        tuned = partita.tune(k, stop=Evaluations(4), db=db, cluster=client, seed=3)
        assert client.status == "running"  # a client given is the caller's: left open
    evals = recorded(db, k)
    assert len(evals) == 4 and tuned.result is not None and len(tuned.result.evaluations) == 4
    assert all(e.status == "ok" and e.median_s and e.median_s > 0 for e in evals)
    assert {e.measured_on for e in evals} == {socket.gethostname()}
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(4096, dtype=np.float32), rng.standard_normal(4096, dtype=np.float32)
    np.testing.assert_allclose(tuned(np.float32(1.5), x, y.copy()), 1.5 * x + y,
                               rtol=1e-5, atol=1e-6)
    with Records(db) as rec:  # the best came from a measurement taken on the cluster
        best = rec.best(rec.kernel_id(k, kernel_params(k)), rec.machine_id(host_machine()), "cpu")
    assert best is not None and best.time_s == min(e.median_s for e in evals)


def test_a_local_tune_records_no_measuring_host(tmp_path: Path) -> None:
    db = tmp_path / "records.sqlite"
    k = partita.kernel("axpy", n=1024)
    partita.tune(k, stop=Evaluations(2), db=db)
    assert [e.measured_on for e in recorded(db, k)] == ["", ""]


@pytest.mark.slow
def test_a_cluster_without_a_measuring_worker_fails_before_tuning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The check waits for a worker that a nanny restarts; none is coming back here.
    monkeypatch.setattr(cluster_module, "WORKER_RETURN_S", 1.0)
    k, db = partita.kernel("axpy", n=1024), tmp_path / "r.sqlite"
    match = r"partita-measure-.*partita worker .* --measure"
    with cluster() as client, pytest.raises(RuntimeError, match=match):
        partita.tune(k, stop=Evaluations(2), db=db, cluster=_compile_only(client))
    with Records(db) as rec:  # failed before a run was recorded
        assert rec.runs(rec.kernel_id(k, kernel_params(k))) == []


def _compile_only(client: Any) -> Any:
    """``client`` after its measuring worker is retired (the nanny does not bring it back)."""
    address, _ = measuring_worker(client)
    client.retire_workers([address], close_workers=True)
    deadline = time.monotonic() + 30
    while any(measure_resource(KEY) in (w.get("resources") or {}) for w in
              client.scheduler_info(n_workers=-1)["workers"].values()):
        assert time.monotonic() < deadline, "the measuring worker was not retired"
        time.sleep(0.2)
    return client


def killer(client: Any) -> tuple[Any, list[str]]:
    """An ``on_evaluation`` that, after the first evaluation, kills the measuring worker's
    process (SIGKILL) as soon as the scheduler has given it a task; and the list that names
    the worker killed."""
    killed: list[str] = []

    def kill() -> None:
        address, pid = measuring_worker(client)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if client.processing(workers=[address]).get(address):
                os.kill(pid, signal.SIGKILL)
                killed.append(address)
                return
            time.sleep(0.01)

    def on_evaluation(e: Evaluation, state: SearchState) -> None:
        if e.index == 0:
            threading.Thread(target=kill, daemon=True).start()

    return on_evaluation, killed


@pytest.mark.slow
def test_a_killed_measuring_worker_is_replaced_and_the_tune_goes_on(tmp_path: Path) -> None:
    db = tmp_path / "records.sqlite"
    k = partita.kernel("axpy", n=4096)
    with cluster() as client:
        on_evaluation, killed = killer(client)
        tuned = partita.tune(k, stop=Evaluations(8), db=db, cluster=client, batch=4,
                             on_evaluation=on_evaluation)
        assert killed, "the measuring worker was never given a task to be killed in"
        # The nanny started a new measuring worker; its task was moved there, not dropped.
        assert measuring_worker(client)[0] != killed[0]
        evals = recorded(db, k)
        assert tuned.result is not None
        assert [e.index for e in evals] == list(range(8)) == [
            e.index for e in tuned.result.evaluations]
        assert len({(e.run_id, e.index) for e in evals}) == len(evals)
        for e in evals:
            assert e.status == "ok" or (e.status == "lost" and "worker" in e.reason), e
        more = partita.tune(k, stop=Evaluations(3), db=db, cluster=client, continue_=True)
    again = recorded(db, k)
    assert len(again) == 11 and more.result is not None
    first = {str(e.decisions) for e in evals if e.status != "lost"}
    assert not first & {str(e.decisions) for e in again[8:]}  # resumed: nothing taken twice


@pytest.mark.slow
def test_a_task_whose_worker_dies_is_recorded_lost_and_taken_again_on_continue(
        tmp_path: Path) -> None:
    db = tmp_path / "records.sqlite"
    # Arrays of 16 MB: a measurement lasts long enough that the kill lands inside it (on 4096
    # elements a task can finish between the scheduler's answer and the signal).
    k = partita.kernel("axpy", n=1 << 22)
    with cluster(allowed_failures=0) as client:  # a task dies with its first worker
        on_evaluation, killed = killer(client)
        tuned = partita.tune(k, stop=Evaluations(8), db=db, cluster=client, batch=4,
                             on_evaluation=on_evaluation)
        assert killed and tuned.result is not None
        evals = recorded(db, k)
        assert len(evals) == len(tuned.result.evaluations) == 8
        lost = [e for e in evals if e.status == "lost"]
        assert lost, "the task running on the killed worker came back without a loss"
        assert all(killed[0] in e.reason for e in lost), [e.reason for e in lost]
        assert all(e.status == "ok" for e in evals if e.status != "lost")
        more = partita.tune(k, stop=Evaluations(len(lost) + 4), db=db, cluster=client,
                            continue_=True, transfer=False)
    assert more.result is not None
    retaken = [e.decisions for e in recorded(db, k)[8:] if e.status == "ok"]
    # A lost implementation is not 'already evaluated': a continued tune may take it again.
    with Records(db) as rec:
        seen = [json.loads(t) for t in rec.seen_decisions(
            rec.kernel_id(k, kernel_params(k)), rec.machine_id(host_machine()), "cpu")]
    assert all(e.decisions not in seen or e.decisions in retaken for e in lost)


def programs(k: partita.Kernel, count: int) -> list[Program]:
    plug = get_target("cpu")
    rng = random.Random(5)
    return [plug.print_program(random_implementation(plug.space(k, "default").root(), rng))
            for _ in range(count)]


@pytest.mark.slow
def test_compile_errors_come_back_and_a_hung_worker_loses_its_programs_by_name() -> None:
    k = partita.kernel("axpy", n=4096)
    progs = programs(k, 2)
    with cluster() as client:
        address, pid = measuring_worker(client)
        runner = ClusterEvaluator(client, key=KEY, seed=0, timing=TimingOptions(),
                                  references=None, compile_timeout_s=60)
        with runner:
            broken = dataclasses.replace(progs[0], source=progs[0].source + "\nint broken(")
            first = runner.evaluate([broken, progs[0]])
            assert [m.status for m in first] == ["compile_error", "ok"]
            assert "error" in first[0].reason and first[0].flags == first[1].flags != ""
            runner.program_limit_s = 4.0  # the first took longer: the worker started
            os.kill(pid, signal.SIGSTOP)  # alive to its nanny, silent to everyone
            try:
                lost = runner.evaluate(progs)
            finally:
                os.kill(pid, signal.SIGCONT)
            assert [m.status for m in lost] == ["lost", "lost"]
            assert any(address in m.reason for m in lost), [m.reason for m in lost]
            assert all("no answer in time" in m.reason for m in lost)
            runner.program_limit_s = None
            assert [m.status for m in runner.evaluate(progs[1:])] == ["ok"]  # it goes on


@pytest.mark.slow
def test_partita_cluster_serves_partita_tune_cluster(tmp_path: Path) -> None:
    env = {**os.environ, "PARTITA_DB": str(tmp_path / "records.sqlite")}
    proc = subprocess.Popen([sys.executable, "-m", "partita.cli", "cluster", "--workers", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=env)
    try:
        assert proc.stdout is not None
        address = proc.stdout.readline().strip()
        if not address.startswith("tcp://"):
            pytest.skip(f"partita cluster did not start here (exit {proc.poll()})")
        with distributed.Client(address) as client:
            client.wait_for_workers(2, timeout=60)
            resources = sorted(sorted(w["resources"]) for w in
                               client.scheduler_info(n_workers=-1)["workers"].values())
        assert resources == [[f"partita-compile-{KEY}"], [f"partita-measure-{KEY}"]]
        out = CliRunner().invoke(main, ["tune", "axpy", "n=2048", "--evaluations", "2",
                                        "--cluster", address, "--json"], env=env)
        assert out.exit_code == 0, out.output
        assert json.loads(out.output.splitlines()[-1])["evaluations"] == 2
        k = partita.kernel("axpy", n=2048)
        assert [e.measured_on for e in recorded(tmp_path / "records.sqlite", k)] == [
            socket.gethostname()] * 2
    finally:
        proc.send_signal(signal.SIGTERM)  # stops the scheduler and its workers
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError("partita cluster did not stop on SIGTERM") from None
