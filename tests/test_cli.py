"""The command line: output keys are a public interface."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import partita
from partita.cli import main


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def test_kernels_lists_the_required_kernels() -> None:
    code, out = run("kernels", "--json")
    assert code == 0
    listed = json.loads(out)
    for name in ("axpy", "matmul", "batched_matmul"):
        assert name in listed
    assert set(listed["matmul"]["params"]) >= {"m", "n", "k", "transpose_a", "transpose_b",
                                               "stride_a", "dtype"}
    assert "reuse_b" in listed["batched_matmul"]["params"]


def test_space_json_keys() -> None:
    code, out = run("space", "axpy", "n=4096", "--samples", "50", "--seed", "3", "--json")
    assert code == 0, out
    result = json.loads(out)
    for key in ("size_estimate", "size_ci", "mean_depth", "dead_end_rate", "descents_per_s"):
        assert key in result
    lo, hi = result["size_ci"]
    assert lo <= result["size_estimate"] <= hi
    assert 0.0 <= result["dead_end_rate"] <= 1.0
    assert result["mean_depth"] > 0
    assert result["example_decisions"], "an implementation's decisions are shown"
    assert 1.0 <= result["size_ess"] <= result["samples"]
    assert result["choice_order"][:2] == ["layout", "size"]


@pytest.mark.slow
def test_space_flags_a_heavy_tailed_estimate() -> None:
    """axpy's descents weigh alike; matmul's few heaviest carry its estimate, and the text
    says that its interval is not to be trusted."""
    code, out = run("space", "axpy", "n=4096", "--samples", "50")
    assert code == 0 and "heavy-tailed" not in out
    code, out = run("space", "matmul", "m=64", "n=64", "k=64", "--samples", "100")
    assert code == 0, out
    assert "heavy-tailed" in out and "effective sample size" in out
    assert "falls short of the size" in out


def test_space_is_reproducible_with_a_seed() -> None:
    first = json.loads(run("space", "axpy", "n=4096", "--samples", "30", "--json")[1])
    second = json.loads(run("space", "axpy", "n=4096", "--samples", "30", "--json")[1])
    for key in ("size_estimate", "size_ci", "mean_depth", "dead_end_rate", "example_decisions"):
        assert first[key] == second[key]


def test_space_text_shows_a_loop_nest() -> None:
    code, out = run("space", "axpy", "n=4096", "--samples", "20", "--target", "gpu")
    assert code == 0, out
    assert "implementations (estimate)" in out
    assert "st_y" in out


def test_unknown_kernel_is_a_one_line_error() -> None:
    code, out = run("space", "conv9d")
    assert code != 0
    assert "unknown kernel 'conv9d'" in out
    assert "Traceback" not in out


def test_bad_parameters_name_the_parameter() -> None:
    code, out = run("space", "matmul", "m=0")
    assert code != 0 and "m" in out and "Traceback" not in out
    code, out = run("space", "matmul", "q=3")
    assert code != 0 and "no parameter 'q'" in out
    code, out = run("space", "matmul", "m")
    assert code != 0 and "key=value" in out


def test_speed_line_names_the_resource_that_bounds_the_kernel(monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    from partita import cli_output
    from partita.cli_output import peak_line as _peak_line
    from partita.targets import AVX512_REFERENCE
    from partita.targets.cpu.description import CpuDescription

    nominal = CpuDescription.nominal(AVX512_REFERENCE, frequency_ghz=3.0)
    monkeypatch.setattr(cli_output, "describe", lambda **_: nominal)
    # A matmul whose data fits a cache is compared with the peak, not with DRAM streams.
    small = partita.kernel("matmul", m=256, n=256, k=32)
    assert "of peak" in _peak_line(small, 5e-5)[2]
    # axpy on 2^26 elements streams from DRAM.
    big = partita.kernel("axpy", n=1 << 26)
    assert "of STREAM triad" in _peak_line(big, 0.03)[2]
    # axpy on 2^14 elements stays in L1/L2: its speed is compared with that level.
    line = _peak_line(partita.kernel("axpy", n=1 << 14), 2e-6)[2]
    assert "bandwidth" in line and "STREAM" not in line
