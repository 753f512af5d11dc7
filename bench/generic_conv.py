"""The conv2d section of ``generic_bench.py``: one size-generic conv2d (3x3 filter, pad 1)
for the layers of a CNN, trained on at most 6 layer shapes and timed at others beside
PyTorch's CPU conv2d and beside a tune of each shape alone.

The shapes are ResNet-like (56x56x64 -> 64 down to 7x7x512 -> 512) and some odd ones (17x17,
35x35, 55x31, channel counts that are no power of two). PyTorch is timed on the same NHWC
data, viewed as a channels-last NCHW tensor (no copy), its output allocated per call as its
``conv2d`` does; without torch installed, its column is left out with a note.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import partita
from partita.codegen.program import Program, signature
from partita.ir.types import DType
from partita.kernels.registry import get_spec
from partita.runtime.compile import Compiler
from partita.tuning.dispatch import declaration, load_function

Layer = tuple[int, int, int, int, int]
"""(n, h, w, c, k): images, rows, columns, input and output channels."""

FIXED = {"r": 3, "s": 3, "stride": 1, "pad": 1}
TRAIN: list[Layer] = [(1, 56, 56, 64, 64), (1, 28, 28, 128, 128), (1, 14, 14, 256, 256),
                      (1, 7, 7, 512, 512), (1, 30, 30, 32, 48), (2, 20, 20, 96, 64)]
LAYERS: list[Layer] = [
    (1, 56, 56, 32, 32), (1, 28, 28, 64, 64), (1, 14, 14, 128, 128), (1, 7, 7, 256, 256),
    (2, 14, 14, 256, 256), (1, 28, 28, 256, 128),  # ResNet-like, not trained on
    (1, 17, 17, 96, 96), (1, 35, 35, 48, 64), (1, 13, 13, 192, 160), (1, 55, 31, 24, 40),
]
QUICK_TRAIN: list[Layer] = [(1, 8, 8, 8, 8), (1, 16, 16, 16, 16)]
QUICK_LAYERS: list[Layer] = [(1, 9, 11, 8, 12), (2, 14, 14, 16, 16)]

TARGETS = {"alone": 1.25, "torch": 1.3, "tuning": 0.25}
"""The generic conv's time over the shape-alone tune's and over PyTorch's, at most; its tuning
time over the sum of the separate tunes', at most."""


def sizes(layer: Layer) -> dict[str, int]:
    return dict(zip("nhwck", layer, strict=True))


def operands(layer: Layer, seed: int) -> dict[str, np.ndarray]:
    n, h, w, c, k = layer
    rng = np.random.default_rng(seed)
    return {"I": rng.standard_normal((n, h, w, c), dtype=np.float32),
            "F": rng.standard_normal((k, 3, 3, c), dtype=np.float32),
            "O": np.zeros((n, h, w, k), np.float32)}


def c_call(library: Path, entry: str, params: Any, values: dict[str, int],
           arrays: dict[str, np.ndarray]) -> tuple[Callable[..., Any], list[Any]]:
    """An entry loaded through cffi and its arguments (sizes by name, arrays in place)."""
    ffi, fn = load_function(library, entry, declaration(entry, params))
    args: list[Any] = []
    for p in params:
        if p.kind == "size":
            args.append(values[p.name])
        else:
            args.append(ffi.cast(f"{DType.parse(p.dtype).c_type} *",
                                 arrays[p.name].ctypes.data))
    return fn, args


def torch_call(arrays: dict[str, np.ndarray]) -> tuple[Callable[..., Any], list[Any]] | None:
    """PyTorch's conv2d on the same data, or None without torch."""
    try:
        import torch
        import torch.nn.functional as functional
    except ImportError:
        return None
    image = torch.from_numpy(arrays["I"]).permute(0, 3, 1, 2)  # NCHW view, channels last
    filters = torch.from_numpy(arrays["F"]).permute(0, 3, 1, 2).contiguous(
        memory_format=torch.channels_last)

    def call() -> None:
        with torch.no_grad():
            functional.conv2d(image, filters, padding=FIXED["pad"])

    return call, []


def tune_alone(layer: Layer, budget: float, seed: int, directory: Path
               ) -> tuple[partita.Tuned, float]:
    """A tune of ``layer`` alone, on records of its own; its wall time."""
    start = time.perf_counter()
    tuned = partita.tune(partita.kernel("conv2d", **sizes(layer), **FIXED), budget=budget,
                         seed=seed, db=directory / f"alone-{'x'.join(map(str, layer))}.sqlite")
    return tuned, time.perf_counter() - start


def measure(layer: Layer, generic: partita.GenericTuned, alone: partita.Tuned, seed: int,
            rounds: int, side_by_side: Callable[..., dict[str, float]]) -> dict[str, Any]:
    """The generic conv, the shape-alone tune and PyTorch at ``layer``, side by side, the
    generic conv's output checked against the library's numpy reference."""
    arrays = {name: operands(layer, seed) for name in ("generic", "alone", "torch")}
    g = arrays["generic"]
    calls = {"generic": c_call(generic.loaded_library(), generic.entry,
                               signature(generic.kernel), generic.sizes_of((g["I"], g["F"])),
                               g)}
    so = Compiler().build([Program(alone.kernel, alone.entry, alone.source, alone.params)])
    calls["alone"] = c_call(so.path, alone.entry, alone.params, {}, arrays["alone"])
    torch = torch_call(arrays["torch"])
    if torch is not None:
        calls["torch"] = torch
    times = side_by_side(calls, rounds)
    expected = get_spec("conv2d").reference(g["I"].astype(np.float64),
                                            g["F"].astype(np.float64), stride=1, dilation=1,
                                            pad=FIXED["pad"])["O"]
    reach = 9 * layer[3]
    n, h, w, c, k = layer
    return {"layer": layer, "label": f"{n}x{h}x{w}x{c}->{k}", **times,
            "version": generic.version_for(sizes(layer)) + 1,
            "right": bool(np.allclose(g["O"], expected, rtol=1e-4, atol=1e-5 * reach)),
            "max_error": float(np.abs(g["O"] - expected).max())}


def run(train: list[Layer], layers: list[Layer], budget: float, alone_budget: float,
        seed: int, rounds: int, directory: Path,
        side_by_side: Callable[..., dict[str, float]]) -> dict[str, Any]:
    print(f"tuning the generic conv2d on {len(train)} layer shapes for {budget:g} s ...",
          flush=True)
    start = time.perf_counter()
    generic = partita.tune_generic("conv2d", [sizes(t) for t in train], budget=budget,
                                   seed=seed, db=directory / "generic-conv2d.sqlite", **FIXED)
    generic_s = time.perf_counter() - start
    print(generic.report(), flush=True)
    rows, alone_s = [], 0.0
    for layer in layers:
        alone, took = tune_alone(layer, alone_budget, seed, directory)
        alone_s += took
        rows.append(measure(layer, generic, alone, seed, rounds, side_by_side))
        print(table(rows[-1:]), flush=True)
    return {"rows": rows, "generic_s": generic_s, "alone_s": alone_s,
            "versions": len(generic.versions), "chain": generic.chain(), "train": train,
            "warnings": generic.warnings, "failures": generic.failures}


def _t(t: float) -> str:
    return f"{t * 1e6:.4g} us" if t < 1e-3 else f"{t * 1e3:.4g} ms"


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| n x h x w x c -> k | generic (version) | tuned alone | PyTorch | "
             "generic ÷ alone | generic ÷ PyTorch | right |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        torch = r.get("torch")
        lines.append(f"| {r['label']} | {_t(r['generic'])} (V{r['version']}) | "
                     f"{_t(r['alone'])} | {_t(torch) if torch else 'n/a'} | "
                     f"{r['generic'] / r['alone']:.3g} | "
                     f"{r['generic'] / torch if torch else float('nan'):.3g} | "
                     f"{'yes' if r['right'] else '**no**'} |")
    return "\n".join(lines) + "\n"


def summary(result: dict[str, Any]) -> str:
    rows = result["rows"]
    worst_alone = max(r["generic"] / r["alone"] for r in rows)
    text = (f"Worst generic ÷ alone {worst_alone:.3g} (target ≤ {TARGETS['alone']:g}); ")
    if all("torch" in r for r in rows):
        worst_torch = max(r["generic"] / r["torch"] for r in rows)
        within = sum(r["generic"] / r["alone"] <= TARGETS["alone"]
                     and r["generic"] / r["torch"] <= TARGETS["torch"] for r in rows)
        text += (f"worst generic ÷ PyTorch {worst_torch:.3g} (target ≤ {TARGETS['torch']:g}); "
                 f"{within} of {len(rows)} shapes within both. ")
    else:
        text += "PyTorch not installed: its comparison is left out (pip install '.[bench]'). "
    share = result["generic_s"] / result["alone_s"]
    return text + (f"Tuning: {result['generic_s']:.0f} s for the generic conv2d "
                   f"({result['versions']} versions: `{result['chain']}`), "
                   f"{result['alone_s']:.0f} s for the {len(rows)} separate tunes: "
                   f"{share:.3g} of it (target ≤ {TARGETS['tuning']:g}).")


REPORT = """## Size-generic conv2d

{provenance}

{summary}

{table}
One conv2d (3x3 filter, pad 1, NHWC image, KRSC filter) over dynamic n, h, w, c and k, trained
on {train} layer shapes ({train_list}) with {budget:g} s in all, then timed at layer shapes it
was not trained on, each beside a tune of that shape alone for {alone:g} s (records of its own)
and PyTorch's CPU conv2d on the same data (a channels-last view), side by side in this process
over {rounds} alternating rounds. "Right" checks the generic conv's output against the
library's numpy reference in double precision.
"""
