"""Compile printed CUDA kernels with nvcc, many per run.

nvcc starts slowly (it drives a host compiler, the front end, ptxas and fatbinary), so
kernels with distinct entries are compiled as one translation unit; a failure is then charged
to the kernels whose lines the error messages name. :func:`compile_cuda` makes object code
(a check that needs no GPU); :func:`compile_module` makes the cubin (or fat binary) that the
CUDA runner (:mod:`partita.targets.gpu.cuda`) loads.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from partita.codegen.gpu import GpuProgram
from partita.config import cuda_roots
from partita.runtime.compile import signal_group
from partita.targets.gpu.check import check_batch

DEFAULT_ARCH = "sm_90"


def find_nvcc() -> str | None:
    """nvcc on PATH, under $CUDA_HOME, or in the usual /usr/local/cuda* places."""
    found = shutil.which("nvcc")
    if found:
        return found
    roots = cuda_roots()
    roots += sorted((str(p) for p in Path("/usr/local").glob("cuda*")), reverse=True)
    for root in roots:
        if root and (Path(root) / "bin" / "nvcc").is_file():
            return str(Path(root) / "bin" / "nvcc")
    return None


@dataclass
class CudaBuild:
    """The result of compiling a batch: ``failed`` maps entries to their error messages."""

    ok: bool
    log: str = ""
    failed: dict[str, str] = field(default_factory=dict)
    image: bytes | None = None
    """The cubin or fat binary of :func:`compile_module` (None for object code)."""


def translation_unit(programs: Sequence[GpuProgram]) -> tuple[str, list[tuple[int, str]]]:
    """One .cu source for all programs, and the first line (1-based) of each entry."""
    check_batch(programs, "cuda")
    lines: list[str] = []
    starts = []
    for p in programs:
        starts.append((len(lines) + 1, p.entry))
        lines.extend(p.source.splitlines())
        lines.append("")
    return "\n".join(lines) + "\n", starts


def compile_cuda(programs: Sequence[GpuProgram], arch: str = DEFAULT_ARCH,
                 nvcc: str | None = None, extra_flags: Sequence[str] = (),
                 timeout_s: float = 600.0) -> CudaBuild:
    """``nvcc -arch=<arch> -c`` on all programs at once (object code, no GPU needed).

    ``extra_flags`` are added to the command line (``-Xcicc -O0 -Xptxas -O0`` makes checks
    several times faster: what nvcc rejects does not depend on optimisation)."""
    return _nvcc(programs, ("-c",), "kernels.o", arch, nvcc, extra_flags, timeout_s)


def compile_module(programs: Sequence[GpuProgram], arch: str = DEFAULT_ARCH,
                   nvcc: str | None = None, extra_flags: Sequence[str] = (),
                   timeout_s: float = 600.0, fatbin: bool = False) -> CudaBuild:
    """A module the CUDA driver loads (``cuModuleLoadData``) holding every program's entry:
    ``nvcc -cubin -arch=<arch>`` (machine code for that architecture only), or with
    ``fatbin`` a fat binary with the machine code and the PTX, which a driver can compile
    for a newer GPU. ``arch`` is ``sm_90`` for an H100, else the device's own compute
    capability (:func:`arch_of`). The module is :attr:`CudaBuild.image`; compiling needs no
    GPU."""
    mode = ("-fatbin",) if fatbin else ("-cubin",)
    return _nvcc(programs, mode, "kernels.fatbin" if fatbin else "kernels.cubin", arch, nvcc,
                 extra_flags, timeout_s)


def arch_of(major: int, minor: int) -> str:
    """The nvcc architecture of a compute capability: ``(9, 0)`` -> ``sm_90``."""
    return f"sm_{major}{minor}"


def nvcc_version(nvcc: str | None = None) -> str:
    """The last line of ``nvcc --version`` (its release and build), or "" without nvcc."""
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        return ""
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _run_group(cmd: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` in its own process group; past ``timeout_s`` the whole group is killed
    (nvcc's stages, ptxas above all, would otherwise run on) and TimeoutExpired raised."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        signal_group(proc, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def _nvcc(programs: Sequence[GpuProgram], mode: Sequence[str], output: str, arch: str,
          nvcc: str | None, extra_flags: Sequence[str], timeout_s: float) -> CudaBuild:
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise FileNotFoundError("nvcc not found")
    source, starts = translation_unit(programs)
    image = None
    with tempfile.TemporaryDirectory(prefix="partita-nvcc-") as tmp:
        cu = Path(tmp) / "kernels.cu"
        cu.write_text(source)
        out = Path(tmp) / output
        cmd = [nvcc, f"-arch={arch}", *mode, *extra_flags, str(cu), "-o", str(out)]
        proc = _run_group(cmd, timeout_s)
        if proc.returncode == 0 and out.is_file():
            image = out.read_bytes()
    log = proc.stdout + proc.stderr
    if proc.returncode == 0:
        return CudaBuild(True, log, image=image)
    failed: dict[str, str] = {}
    for m in re.finditer(r"kernels\.cu\((\d+)\): (.*)", log):
        line = int(m.group(1))
        entry = next((e for start, e in reversed(starts) if start <= line), "?")
        failed.setdefault(entry, "")
        failed[entry] += m.group(0) + "\n"
    if not failed:
        failed["?"] = log
    return CudaBuild(False, log, failed)
