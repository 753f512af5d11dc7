"""GPU implementations timed on a CUDA device, kept as data so the bound can be checked anywhere.

The gpu target's lower bound must never exceed the time of an implementation on the device it
describes, but a device is lent only now and then. This script, run where there is one, draws
implementations of a few kernels (random ones, and random completions of the kernels'
sketches), builds them with nvcc, checks each against numpy and times it with CUDA events
(:class:`partita.targets.gpu.cuda.CudaRunner`), and writes their decisions with their times
and the device's name. ``tests/gpu/test_measured_bounds.py`` replays every one and checks the
bound of the device's description against its fastest time, on any machine.

Random implementations bounded above ``--max-bound`` times the root are not drawn: a random
matmul 1024^3 can run one launch for a minute, which cannot be interrupted.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import partita
from partita.codegen.gpu import print_cuda
from partita.model.bound import Model
from partita.runtime.harness import TimingOptions
from partita.search.sampling import NoImplementation, random_implementation
from partita.space.candidate import Candidate
from partita.targets.gpu.target import GPU, gpu_sketch_candidates

CONFIGS: list[tuple[str, str, dict[str, int], int, int]] = [
    # (label, kernel, parameters, random implementations, sketch completions)
    ("matmul 1024^3", "matmul", {"m": 1024, "n": 1024, "k": 1024}, 20, 16),
    ("matmul 256x256x32", "matmul", {"m": 256, "n": 256, "k": 32}, 16, 8),
    ("batched 512x32x32x64", "batched_matmul", {"b": 512, "m": 32, "n": 32, "k": 64}, 12, 8),
    ("strided matmul 512^3 (A stride 8)", "matmul",
     {"m": 512, "n": 512, "k": 512, "stride_a": 8}, 8, 8),
    ("axpy 2^24", "axpy", {"n": 1 << 24}, 12, 0),
]

TIMING = TimingOptions(warmups=2, warmup_s=0.02, min_reps=5, max_reps=30, budget_s=0.3)


def draw(label: str, name: str, params: dict[str, int], n_random: int, n_sketch: int,
         max_bound: float, seed: int) -> list[tuple[str, Candidate, float]]:
    """(origin, implementation, bound) of the configuration's draws."""
    k = partita.kernel(name, **params)
    space = partita.space(k, target="gpu")
    model: Model = GPU.model(k)
    root = model.bound(space.root()).time_s
    rng = random.Random(seed)
    out: list[tuple[str, Candidate, float]] = []
    tries = 0
    while sum(1 for o, _, _ in out if o == "random") < n_random and tries < 40 * n_random:
        tries += 1
        try:
            impl = random_implementation(space.root(), rng, tries=5)
        except NoImplementation:
            continue
        bound = model.bound(impl).time_s
        if bound <= max_bound * root:
            out.append(("random", impl, bound))
    if n_sketch:
        _, completions = gpu_sketch_candidates(space, model, seed, n_sketch, draws=n_sketch)
        out += [("sketch", c, model.bound(c).time_s) for c in completions]
    print(f"{label}: {len(out)} drawn in {tries} random descents (root bound {root:.3g} s)",
          flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--max-bound", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    from partita.targets.gpu.cuda import CudaRunner, cuda_device

    device = cuda_device()
    data: dict[str, Any] = {"device": device.name, "date": time.strftime("%Y-%m-%d"),
                            "configs": []}
    with CudaRunner(seed=0, timing=TIMING) as runner:
        for label, name, params, n_random, n_sketch in CONFIGS:
            t0 = time.perf_counter()
            drawn = draw(label, name, params, n_random, n_sketch, args.max_bound, args.seed)
            programs = [print_cuda(c, f"partita_{i}") for i, (_, c, _) in enumerate(drawn)]
            results = runner.evaluate(programs, timeout_s=2.0)
            impls = []
            for (origin, cand, bound), m in zip(drawn, results, strict=True):
                impls.append({"origin": origin, "status": m.status, "reason": m.reason[:200],
                              "median_s": m.median_s, "min_s": m.min_s, "bound_s": bound,
                              "decisions": [d.to_json() for d in cand.decisions]})
            ok = [i for i in impls if i["status"] == "ok"]
            worst = max((i["bound_s"] / i["min_s"] for i in ok), default=0.0)
            print(f"  {len(ok)} of {len(impls)} ok in {time.perf_counter() - t0:.0f} s; "
                  f"largest bound / time {worst:.3g}", flush=True)
            data["configs"].append({"label": label, "kernel": name, "params": params,
                                    "implementations": impls})
            args.out.write_text(json.dumps(data) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
