"""The masked loads and stores of a partial vector (:func:`partita.codegen.vector.masked_access`):
for every element type and vector width, on AVX-512's masked moves, AVX2's ``maskload`` and
``maskstore``, and the portable lane loop (each compiled for the ISA that selects it), ``loadn``
reads exactly the first ``n`` lanes (zeros after) and ``storen`` writes exactly them, for every
``n`` from below 0 to past the width. The vectors end where a page without access begins, so a
lane read or written past the end faults and the program fails."""

from __future__ import annotations

import subprocess

import pytest

from partita.codegen.vector import vector_header, vector_type_name
from partita.ir.types import DType
from partita.runtime.compile import DEFAULT_CC

CASES = [("float32", 4), ("float32", 8), ("float32", 16), ("float64", 2), ("float64", 4),
         ("float64", 8), ("int32", 4), ("int32", 8), ("int32", 16)]

# native: AVX-512 on hosts that have it; x86-64-v3: AVX2 without AVX-512; x86-64-v2: neither.
MARCHES = ["native", "x86-64-v3", "x86-64-v2"]


def _harness(dtype: DType, lanes: int) -> str:
    vt = vector_type_name(dtype, lanes)
    c = dtype.c_type
    return "\n".join([
        "#include <stdint.h>", "#include <stdio.h>", "#include <string.h>",
        "#include <sys/mman.h>", "#include <unistd.h>",
        "#if defined(__AVX512F__) || defined(__AVX2__)", "#include <immintrin.h>", "#endif",
        *vector_header({(dtype, lanes): vt}, {("loadn", vt), ("storen", vt)}),
        "int main(void) {",
        "  long page = sysconf(_SC_PAGESIZE);",
        "  char *mem = mmap(0, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,"
        " -1, 0);",
        "  if (mem == MAP_FAILED || mprotect(mem + page, page, PROT_NONE)) return 2;",
        f"  {c} *end = ({c} *)(mem + page);",
        f"  for (int64_t n = -2; n <= {lanes} + 2; ++n) {{",
        f"    int64_t in = n < 0 ? 0 : n > {lanes} ? {lanes} : n;",
        f"    {c} *p = end - in;",
        f"    for (int64_t l = -{lanes}; l < in; ++l) p[l] = ({c})(100 + l);",
        f"    {vt} v = loadn_{vt}(p, n);",
        f"    for (int64_t l = 0; l < {lanes}; ++l)",
        f"      if (v[l] != (l < in ? ({c})(100 + l) : ({c})0)) {{",
        "        printf(\"loadn n=%ld lane %ld\\n\", (long)n, (long)l); return 1; }",
        f"    {vt} w;",
        f"    for (int64_t l = 0; l < {lanes}; ++l) w[l] = ({c})(-1 - l);",
        f"    storen_{vt}(p, w, n);",
        f"    for (int64_t l = -{lanes}; l < in; ++l)",
        f"      if (p[l] != (l < 0 ? ({c})(100 + l) : ({c})(-1 - l))) {{",
        "        printf(\"storen n=%ld element %ld\\n\", (long)n, (long)l); return 1; }",
        "  }",
        "  printf(\"ok\\n\");",
        "  return 0;",
        "}"])


@pytest.mark.parametrize("march", MARCHES)
@pytest.mark.parametrize("name,lanes", CASES, ids=[f"{n}x{k}" for n, k in CASES])
def test_masked_loads_and_stores_touch_exactly_the_lanes_in_range(
        tmp_path, name: str, lanes: int, march: str) -> None:
    dtype = DType(name)
    src = tmp_path / "masked.c"
    src.write_text(_harness(dtype, lanes))
    exe = tmp_path / "masked"
    subprocess.run([DEFAULT_CC, "-O3", f"-march={march}", "-std=gnu11", str(src), "-o", str(exe)],
                   check=True)
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=30)
    assert run.returncode == 0 and run.stdout.strip() == "ok", (run.returncode, run.stdout)
