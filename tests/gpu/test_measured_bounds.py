"""The gpu target's bound against times measured on a real device.

``bench/gpu_timings.py``, run on a machine with a CUDA device, timed GPU implementations
(random ones and completions of the sketches) and stored their decisions beside their times
in ``tests/gpu/measured/``. Here, on any machine, each is replayed in this build's space and
bounded with the description of the device that timed it: a lower bound above the fastest
time measured is a bound violation, the one thing the search's pruning cannot survive.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from partita.api import kernel, space
from partita.model.gpu import GpuModel
from partita.space.candidate import DeadEnd, Decision
from partita.targets.gpu.device import capabilities_of

MEASURED = sorted((Path(__file__).parent / "measured").glob("*.json"))


def _cases() -> list[tuple[str, str, dict[str, Any], list[dict[str, Any]]]]:
    out = []
    for path in MEASURED:
        data = json.loads(path.read_text())
        for config in data["configs"]:
            ok = [i for i in config["implementations"] if i["status"] == "ok"]
            out.append((f"{path.stem}: {config['label']}", data["device"],
                        {"name": config["kernel"], "params": config["params"]}, ok))
    return out


CASES = _cases()
FAST = ("axpy",)
"""The cases the fast subset checks (``-m 'not slow'``); ``make test`` checks them all."""


def _param(case: tuple) -> object:
    fast = any(name in case[0] for name in FAST)
    return pytest.param(case, id=case[0], marks=() if fast else pytest.mark.slow)


def test_measurements_are_stored() -> None:
    """At least one device's timings are kept (the check below is not vacuous)."""
    assert CASES and sum(len(impls) for *_, impls in CASES) >= 50


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_the_bound_never_exceeds_a_measured_time(case: tuple) -> None:
    label, device, spec, impls = case
    k = kernel(spec["name"], **spec["params"])
    sp = space(k, "gpu")
    model = GpuModel(capabilities_of(device), k.compute_dtype.value)
    violations, replayed = [], 0
    for impl in impls:
        cand = sp.replay([Decision.from_json(d) for d in impl["decisions"]], lenient=True)
        if isinstance(cand, DeadEnd) or not cand.is_implementation:
            continue  # the space changed since: this implementation is no longer in it
        replayed += 1
        bound = model.bound(cand).time_s
        if bound > impl["min_s"]:
            violations.append((impl["origin"], bound, impl["min_s"]))
    assert replayed >= len(impls) // 2, f"{label}: {replayed} of {len(impls)} replayed"
    assert not violations, f"{label}: bound above the fastest time measured: {violations}"
