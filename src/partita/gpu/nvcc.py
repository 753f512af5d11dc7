"""Compile printed CUDA kernels with nvcc, many per run.

nvcc starts slowly (it drives a host compiler, the front end, ptxas and fatbinary), so
kernels with distinct entries are compiled as one translation unit; a failure is then charged
to the kernels whose lines the error messages name.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from partita.codegen.gpu import GpuProgram

DEFAULT_ARCH = "sm_90"


def find_nvcc() -> str | None:
    """nvcc on PATH, under $CUDA_HOME, or in the usual /usr/local/cuda* places."""
    found = shutil.which("nvcc")
    if found:
        return found
    roots = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", "")]
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


def translation_unit(programs: Sequence[GpuProgram]) -> tuple[str, list[tuple[int, str]]]:
    """One .cu source for all programs, and the first line (1-based) of each entry."""
    entries = [p.entry for p in programs]
    if len(set(entries)) != len(entries):
        raise ValueError("programs of one batch need distinct entries")
    lines: list[str] = []
    starts = []
    for p in programs:
        if p.language != "cuda":
            raise ValueError(f"{p.entry}: a {p.language} program, not CUDA")
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
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise FileNotFoundError("nvcc not found")
    source, starts = translation_unit(programs)
    with tempfile.TemporaryDirectory(prefix="partita-nvcc-") as tmp:
        cu = Path(tmp) / "kernels.cu"
        cu.write_text(source)
        cmd = [nvcc, f"-arch={arch}", "-c", *extra_flags, str(cu), "-o",
               str(Path(tmp) / "kernels.o")]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    log = proc.stdout + proc.stderr
    if proc.returncode == 0:
        return CudaBuild(True, log)
    failed: dict[str, str] = {}
    for m in re.finditer(r"kernels\.cu\((\d+)\): (.*)", log):
        line = int(m.group(1))
        entry = next((e for start, e in reversed(starts) if start <= line), "?")
        failed.setdefault(entry, "")
        failed[entry] += m.group(0) + "\n"
    if not failed:
        failed["?"] = log
    return CudaBuild(False, log, failed)
