"""The worker process that runs candidate kernels: ``python -m partita.runtime.worker``.

Candidates are untrusted native code: they may crash, hang, scribble over memory or exhaust it.
Running them in a separate process confines the damage to the worker, which the parent
restarts. The worker reads length-prefixed pickled requests on stdin and answers on what was
stdout; before anything else it moves stdout to a private descriptor and points file
descriptor 1 at stderr, so a kernel that prints cannot corrupt the protocol.

For each ``evaluate`` request the worker loads the shared object, copies the inputs into fresh
guarded buffers (see :mod:`partita.runtime.buffers`), sends ``calling``, calls the kernel once,
sends ``called``, checks the outputs, and, when they are right, sends ``timing`` and times the
kernel with the C harness (again when its speed probe finds the machine slowed). The final
``result`` message carries the status. The events let the parent apply the kernel-call timeout
to the call alone, not to loading inputs or checking them.

Options: ``--memory BYTES`` sets ``RLIMIT_AS`` so that a kernel exhausting memory fails in this
process rather than dragging the machine into the kernel's out-of-memory killer.
"""

from __future__ import annotations

import _ctypes
import argparse
import ctypes
import os
import resource
import signal
import sys
from collections import OrderedDict
from typing import Any

import numpy as np

from partita.runtime.buffers import (
    ArraySpec,
    GuardedBuffer,
    compare,
    describe_element,
    first_difference,
    gap_mask,
    pack_args,
)
from partita.runtime.harness import measure_probed
from partita.runtime.protocol import Reader, write_message

LOADED_LIBRARIES = 32
"""Shared objects kept loaded; older ones are closed so a long search does not pile them up."""


class Worker:
    """The request loop; ``out`` is the protocol descriptor."""

    def __init__(self, inp: int, out: int) -> None:
        self.reader = Reader(inp)
        self.out = out
        self.libs: OrderedDict[str, ctypes.CDLL] = OrderedDict()
        try:
            # Held for the life of the process: the OpenMP runtime (and its thread pool) must
            # outlive every kernel library that gets closed.
            self.gomp: ctypes.CDLL | None = ctypes.CDLL("libgomp.so.1", mode=ctypes.RTLD_GLOBAL)
        except OSError:
            self.gomp = None

    def send(self, message: dict[str, Any]) -> None:
        write_message(self.out, message)

    def library(self, path: str) -> ctypes.CDLL:
        lib = self.libs.pop(path, None)
        if lib is None:
            lib = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        self.libs[path] = lib
        while len(self.libs) > LOADED_LIBRARIES:
            _, old = self.libs.popitem(last=False)
            _ctypes.dlclose(old._handle)
        return lib

    def serve(self) -> None:
        self.send({"event": "ready", "pid": os.getpid()})
        while True:
            try:
                request = self.reader.read()
            except EOFError:
                return
            op = request.get("op")
            if op == "exit":
                return
            if op == "ping":
                self.send({"event": "pong"})
            elif op == "evaluate":
                try:
                    result = self.evaluate(request)
                except MemoryError as e:
                    result = {"status": "oom", "reason": f"allocation failed in the worker: {e}"}
                except Exception as e:  # a faulty request must not take the worker down
                    result = {"status": "crash",
                              "reason": f"worker error: {type(e).__name__}: {e}"}
                self.send({"event": "result", **result})
            else:
                self.send({"event": "result", "status": "crash",
                           "reason": f"unknown request {op!r}"})

    def evaluate(self, req: dict[str, Any]) -> dict[str, Any]:
        lib = self.library(req["so"])
        try:
            packed = getattr(lib, req["entry"] + "_packed")
        except AttributeError:
            return {"status": "compile_error",
                    "reason": f"the shared object defines no {req['entry']}_packed"}
        packed.restype = None
        packed.argtypes = [ctypes.c_void_p]
        arrays: list[ArraySpec] = req["arrays"]
        buffers: dict[str, GuardedBuffer] = {}
        inputs: dict[str, np.ndarray] = {}
        for spec in arrays:
            buf = GuardedBuffer(spec.dtype, spec.footprint, req["canary_bytes"], req["alignment"])
            if spec.role in ("in", "inout"):
                inputs[spec.name] = np.load(req["inputs"][spec.name], mmap_mode="r")
                buf.data[:] = inputs[spec.name]
            else:
                buf.fill_nan()
            buffers[spec.name] = buf
        args, keep = pack_args(req["signature"], req["values"],
                               {n: b.address for n, b in buffers.items()})

        self.send({"event": "calling"})
        packed(ctypes.cast(args, ctypes.c_void_p))
        self.send({"event": "called"})

        verdict = self.check(arrays, buffers, inputs, req)
        if verdict["status"] != "ok" or not req.get("time", True):
            return verdict
        restore = []
        saved = []
        for spec in arrays:
            if spec.role == "inout":
                copy = np.array(inputs[spec.name])
                saved.append(copy)
                restore.append((buffers[spec.name].address, copy.ctypes.data, copy.nbytes))
        self.send({"event": "timing"})
        timing = measure_probed(lib, packed, args, req["timing"], restore,
                                req.get("probe_reference_s"))
        del keep, saved
        return {**verdict, "times": timing.times, "warmups": timing.warmups,
                "threads": timing.threads, "stop": timing.stop, "probe_s": timing.probe_s,
                "slowdown": timing.slowdown, "retimed": timing.retimed}

    @staticmethod
    def check(arrays: list[ArraySpec], buffers: dict[str, GuardedBuffer],
              inputs: dict[str, np.ndarray], req: dict[str, Any]) -> dict[str, Any]:
        """Status of the outputs after one call: out_of_bounds, wrong or ok."""
        for spec in arrays:
            damage = buffers[spec.name].canary_damage()
            if damage:
                return {"status": "out_of_bounds",
                        "reason": f"wrote outside array {spec.name}: {damage}"}
        for spec in arrays:
            if spec.role == "in":
                continue
            mask = gap_mask(spec)
            if mask is None:
                continue
            buf = buffers[spec.name]
            before = (inputs[spec.name][mask] if spec.role == "inout"
                      else np.broadcast_to(buf.fill_pattern().view(buf.dtype), (int(mask.sum()),)))
            at = first_difference(np.ascontiguousarray(buf.data[mask]),
                                  np.ascontiguousarray(before))
            if at is not None:
                element = int(np.flatnonzero(mask)[at])
                return {"status": "out_of_bounds",
                        "reason": f"wrote element {element} of {spec.name}'s buffer, which is "
                                  "between the elements of its strided view"}
        for spec in arrays:
            if spec.role == "in":
                at = first_difference(buffers[spec.name].data, inputs[spec.name])
                if at is not None:
                    return {"status": "wrong",
                            "reason": f"modified input array {spec.name} (element {at})"}
        max_error = 0.0
        for spec in arrays:
            if spec.role == "in":
                continue
            got = spec.view(buffers[spec.name].data)
            exp_path = req["expected"].get(spec.name)
            expected = np.load(exp_path, mmap_mode="r") if exp_path else None
            tol = np.load(req["tolerance"][spec.name], mmap_mode="r") if exp_path else None
            c = compare(got, expected, tol)
            max_error = max(max_error, c.max_error)
            if c.bad:
                where = describe_element(spec.name, c.where)
                if expected is None:
                    reason = f"{where} = {c.got:g}"
                else:
                    reason = (f"{where} = {c.got:.9g}, expected {c.expected:.9g} "
                              f"(|error| {abs(c.got - c.expected):.3g} > tolerance {c.tol:.3g})")
                total = spec.elements
                return {"status": "wrong", "max_error": max_error,
                        "reason": f"{reason}; {c.bad} of {total} elements wrong"}
        return {"status": "ok", "reason": "", "max_error": max_error}


def _set_memory_limit(limit: int | None) -> None:
    if limit:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _die_with_parent() -> None:
    """Ask Linux to kill this process if the parent dies while a kernel hangs."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m partita.runtime.worker")
    parser.add_argument("--memory", type=int, default=0, help="RLIMIT_AS in bytes (0: none)")
    args = parser.parse_args(argv)
    out = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    _die_with_parent()
    _set_memory_limit(args.memory)
    Worker(0, out).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
