"""Export an implementation as a small C library a user can build and link without partita.

A tuned kernel is only useful once it is called from the user's own program, so the export is
a directory that stands on its own:

- ``<name>.c``: the source exactly as it was measured, behind a comment saying what it is
  (kernel, sizes, number of decisions, measured time, flags) and an ``#include`` of its
  header, so that the compiler itself checks that the header matches the definition;
- ``<name>.h``: an include guard, ``<stdint.h>``, one doc comment per parameter (shape,
  strides in elements, buffer length, role) and the prototypes, derived from the parameters
  the same way the printer derives the definition;
- ``Makefile``: ``lib<name>.so`` and ``lib<name>.a`` built with the flags the implementation
  was timed with (the timing harness's own link flags removed), and a ``check`` target that
  builds and runs ``example.c``, which calls the function once on zero-filled buffers and
  shows the link line (``-L. -l<name> -fopenmp``);
- ``<name>.decisions.json``: the decisions, which regenerate the same source with
  ``partita codegen KERNEL ... --decisions <name>.decisions.json``.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from partita.codegen.program import Param, prototype, signature
from partita.ir.kernel import Kernel
from partita.ir.types import DType

DEFAULT_BUILD_FLAGS: tuple[str, ...] = (
    "-O3", "-march=native", "-fopenmp", "-fPIC", "-std=gnu11", "-fno-tree-vectorize",
    "-fno-tree-slp-vectorize", "-fno-tree-loop-distribute-patterns")
"""Used when no flags were recorded: the code generation flags implementations are timed with."""

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def build_flags(flags: str | Sequence[str]) -> list[str]:
    """The compile flags for the exported library, from the flags an implementation was
    timed with.

    The timing build links a shared object in one step and routes allocations through the
    harness (``-Wl,--wrap=malloc,...``): those flags would make every program that links the
    export fail with undefined ``__wrap_malloc``, so they go, as do ``-shared`` and output
    options (the Makefile adds them per target). ``-fPIC`` is added if missing, since the
    same object file goes into the shared library.
    """
    words = shlex.split(flags) if isinstance(flags, str) else list(flags)
    if not words:
        words = list(DEFAULT_BUILD_FLAGS)
    out: list[str] = []
    skip = False
    for w in words:
        if skip:
            skip = False
            continue
        if w in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if w in ("-shared", "-c", "-S", "-E") or w.startswith("-o"):
            continue
        if w.startswith("-Wl,") and "--wrap" in w:
            continue
        out.append(w)
    if "-fPIC" not in out and "-fpic" not in out:
        out.append("-fPIC")
    return out


def _comment(text: str) -> str:
    """Text made safe inside a C block comment (a ``*/`` would end it early)."""
    return text.replace("*/", "* /").replace("/*", "/ *")


def _make_escape(text: str) -> str:
    """A value made literal in a Makefile (``$`` starts a reference, ``#`` a comment)."""
    return text.replace("$", "$$").replace("#", "\\#")


def _format_time(time_s: float | None) -> str:
    if time_s is None or not math.isfinite(time_s):
        return "not measured"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if time_s >= scale:
            return f"{time_s / scale:.4g} {unit}"
    return f"{time_s / 1e-9:.4g} ns"


def _decisions_list(decisions: Any) -> list[Any]:
    """Decisions as a list, whether given decoded or as their stored JSON text."""
    if decisions is None:
        return []
    if isinstance(decisions, str):
        decisions = json.loads(decisions)
    return [d.to_json() if hasattr(d, "to_json") else d for d in decisions]


def _size_values(kernel: Kernel | str, sizes: Mapping[str, int] | None) -> dict[str, int]:
    values: dict[str, int] = {}
    if isinstance(kernel, Kernel):
        values = {s.name: s.value for s in kernel.sizes if s.value is not None}
    return values | dict(sizes or {})


def _param_doc(p: Param, sizes: Mapping[str, int]) -> list[str]:
    """The lines documenting one parameter: what it is, and for an array its role, shape,
    strides and buffer length (what a caller must allocate)."""
    if p.kind == "size":
        value = sizes.get(p.name)
        given = f" (exported for {p.name} = {value})" if value is not None else ""
        return [f"dynamic size, int64_t{given}"]
    ctype = DType.parse(p.dtype).c_type
    if p.kind == "scalar":
        return [f"scalar {p.dtype} ({ctype}), by value"]
    role = {"in": "input (read only)", "out": "output (written, not read)",
            "inout": "input and output (read, then written)"}.get(p.role, p.role)
    first = f"{role}: {p.dtype} array ({ctype} *)"
    if not p.shape:
        return [first + ", shape depending on the dynamic sizes"]
    shape = "[" + ", ".join(str(x) for x in p.shape) + "]"
    strides = "[" + ", ".join(str(x) for x in p.strides) + "]"
    return [f"{first}, shape {shape},",
            f"strides {strides} elements, buffer of {p.footprint} elements"]


def _header(name: str, entry: str, params: tuple[Param, ...], kernel_line: str,
            sizes: Mapping[str, int]) -> str:
    guard = f"PARTITA_EXPORT_{name.upper()}_H"
    lines = [
        f"/* {_comment(name)}.h: {_comment(kernel_line)} */",
        f"#ifndef {guard}",
        f"#define {guard}",
        "",
        "#include <stdint.h>",
        "",
        # C++ has no `restrict`; g++ and clang++ spell it __restrict.
        "#if defined(__cplusplus)",
        "#define restrict __restrict",
        'extern "C" {',
        "#endif",
        "",
        "/*",
        f" * {entry}: {_comment(kernel_line)}.",
        " *",
        " * Arrays are passed as pointers to the first element of their buffers, which must",
        " * not overlap (restrict). Element [i0, i1, ...] of an array p with strides",
        " * [s0, s1, ...] is p[i0 * s0 + i1 * s1 + ...]: strides are in elements, not bytes.",
        " *",
    ]
    width = max((len(p.name) for p in params), default=0)
    for p in params:
        doc = _param_doc(p, sizes)
        lines.append(f" * @param {p.name.ljust(width)}  {_comment(doc[0])}")
        lines += [f" *        {' ' * width}  {_comment(d)}" for d in doc[1:]]
    lines += [
        " */",
        f"{prototype(entry, params)};",
        "",
        "/* The same call with args[i] pointing to parameter i (to the value for sizes and",
        " * scalars, to the buffer for arrays): one calling convention for every kernel. */",
        f"void {entry}_packed(void **args);",
        "",
        "#if defined(__cplusplus)",
        "}",
        "#undef restrict",
        "#endif",
        "",
        f"#endif /* {guard} */",
        "",
    ]
    return "\n".join(lines)


def _example(name: str, entry: str, params: Sequence[Param], footprints: Mapping[str, int],
             sizes: Mapping[str, int], link: str) -> str:
    lines = [
        f"/* Calls {_comment(entry)} once on zero-filled buffers: how to call and link the",
        " * exported kernel. Built by `make check`, or by hand:",
        f" *   gcc -O2 example.c -L. {_comment(link)} -o example",
        " * (with LD_LIBRARY_PATH=. to run it against the shared library). */",
        "#include <stdio.h>",
        "#include <stdlib.h>",
        "#include <string.h>",
        "",
        f'#include "{name}.h"',
        "",
    ]
    missing = [p.name for p in params
               if (p.kind == "size" and p.name not in sizes)
               or (p.kind == "array" and footprints.get(p.name, 0) <= 0)]
    if missing:
        lines += [f'#error "the example needs the dynamic sizes (missing: '
                  f'{", ".join(missing)}); export with sizes=..."', ""]
        return "\n".join(lines)
    lines += [
        "/* 64-byte aligned (as the kernel's own buffers are) and zeroed. */",
        "static void *zeroed(size_t bytes)",
        "{",
        "    size_t n = (bytes + 63) / 64 * 64;",
        "    void *p = aligned_alloc(64, n ? n : 64);",
        "    if (p) memset(p, 0, n ? n : 64);",
        "    return p;",
        "}",
        "",
        "int main(void)",
        "{",
    ]
    arrays = [p for p in params if p.kind == "array"]
    for p in params:
        if p.kind == "size":
            lines.append(f"    int64_t {p.name} = {int(sizes[p.name])};")
            continue
        ctype = DType.parse(p.dtype).c_type
        if p.kind == "scalar":
            lines.append(f"    {ctype} {p.name} = 1;")
        else:
            n = footprints[p.name]
            lines.append(f"    {ctype} *{p.name} = zeroed((size_t){n} * sizeof({ctype}));")
    if arrays:
        cond = " || ".join(f"!{p.name}" for p in arrays)
        lines += [f"    if ({cond}) {{",
                  '        fprintf(stderr, "out of memory\\n");',
                  "        return 1;",
                  "    }"]
    lines.append(f"    {entry}({', '.join(p.name for p in params)});")
    for p in arrays:
        if p.role != "in":
            lines.append(f'    printf("{p.name}[0] = %g\\n", (double){p.name}[0]);')
    lines.append(f'    printf("{entry}: ok\\n");')
    lines += [f"    free({p.name});" for p in arrays]
    lines += ["    return 0;", "}", ""]
    return "\n".join(lines)


def _makefile(name: str, cflags: Sequence[str], link: str) -> str:
    cflags_text = _make_escape(" ".join(shlex.quote(f) for f in cflags))
    return "\n".join([
        f"# lib{name}: one tuned kernel. `make` builds lib{name}.so and lib{name}.a;",
        "# `make check` builds and runs example.c against the shared library.",
        "# CFLAGS are the flags the implementation was timed with: changing them changes the",
        "# code that runs, and its speed.",
        "",
        "CC = gcc",
        "AR = ar",
        f"NAME = {name}",
        f"CFLAGS = {cflags_text}",
        f"LDLIBS = {_make_escape(link)}",
        "",
        "all: lib$(NAME).so lib$(NAME).a",
        "",
        "lib$(NAME).so: $(NAME).c $(NAME).h",
        "\t$(CC) $(CFLAGS) -shared -o $@ $(NAME).c -lm",
        "",
        "$(NAME).o: $(NAME).c $(NAME).h",
        "\t$(CC) $(CFLAGS) -c -o $@ $(NAME).c",
        "",
        "lib$(NAME).a: $(NAME).o",
        "\t$(AR) rcs $@ $^",
        "",
        "example: example.c $(NAME).h lib$(NAME).so",
        "\t$(CC) $(CFLAGS) -o $@ example.c -L. $(LDLIBS) -Wl,-rpath,'$$ORIGIN'",
        "",
        "check: example",
        "\t./example",
        "",
        "clean:",
        "\trm -f lib$(NAME).so lib$(NAME).a $(NAME).o example",
        "",
        ".PHONY: all check clean",
        "",
    ])


def export_c(out_dir: str | os.PathLike[str], kernel: Kernel | str, source: str, entry: str,
             params: tuple[Param, ...], flags: str, decisions: Any,
             time_s: float | None = None, *, name: str | None = None,
             sizes: Mapping[str, int] | None = None) -> list[Path]:
    """Write the implementation ``source`` (defining ``entry`` with ``params``) as a C
    library in ``out_dir``; return the files written (source, header, Makefile, example,
    decisions).

    ``kernel`` is the kernel (its name and sizes go into the comments) or just its name;
    ``flags`` the flags it was timed with (a record's ``flags``); ``decisions`` its decisions
    (decoded or JSON text); ``time_s`` its measured time. ``name`` names the files and the
    library (default: ``entry``). ``sizes`` gives values to dynamic sizes, for the example
    call and the buffer lengths; without them an example that needs them is an ``#error``
    naming them.
    """
    name = name or entry
    for what, ident in (("entry", entry), ("name", name)):
        if not _IDENT.fullmatch(ident):
            raise ValueError(f"{what} {ident!r} is not a C identifier")
    if not re.search(rf"\bvoid\s+{re.escape(entry)}\s*\(", source):
        raise ValueError(f"the source does not define {entry!r}")
    kernel_name = kernel.name if isinstance(kernel, Kernel) else str(kernel)
    values = _size_values(kernel, sizes)
    decision_list = _decisions_list(decisions)
    flag_text = flags if isinstance(flags, str) else " ".join(flags)
    cflags = build_flags(flag_text)

    sizes_text = ", ".join(f"{k}={v}" for k, v in values.items()) or "none"
    kernel_line = f"kernel {kernel_name} ({sizes_text})"
    footprints = {p.name: p.footprint for p in params if p.kind == "array"}
    if isinstance(kernel, Kernel) and any(v <= 0 for v in footprints.values()):
        dynamic = {s.name for s in kernel.sizes if not s.is_static}
        if dynamic <= values.keys():
            footprints |= {p.name: p.footprint for p in signature(kernel, values)
                           if p.kind == "array"}
    link = f"-l{name}" + (" -fopenmp" if "-fopenmp" in cflags else "") + " -lm"

    c_head = "\n".join([
        "/*",
        f" * {_comment(name)}.c: {_comment(kernel_line)}, exported by partita.",
        f" * entry point:    {_comment(entry)}",
        f" * decisions:      {len(decision_list)} (in {_comment(name)}.decisions.json)",
        f" * measured time:  {_format_time(time_s)}",
        f" * timed with:     {_comment(flag_text) or '(no flags recorded)'}",
        f" * build flags:    {_comment(' '.join(cflags))}",
        " */",
        f'#include "{name}.h"',
        "",
    ])
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {
        f"{name}.c": c_head + source + ("" if source.endswith("\n") else "\n"),
        f"{name}.h": _header(name, entry, params, kernel_line, values),
        "Makefile": _makefile(name, cflags, link),
        "example.c": _example(name, entry, params, footprints, values, link),
        f"{name}.decisions.json": json.dumps(
            {"kernel": kernel_name, "sizes": values, "entry": entry, "time_s": time_s,
             "flags": flag_text, "decisions": decision_list}, indent=1) + "\n",
    }
    written = []
    for file_name, text in files.items():
        path = out / file_name
        path.write_text(text)
        written.append(path)
    return written
