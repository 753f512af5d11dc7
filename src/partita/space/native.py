"""Propagation in C: a compiled space's constraints as tables for one interpreter (native.c).

The Python engine (engine.py, counters.py and the occurrence functions that occurrences.py
generates) runs a matmul descent at a few per second: the work per decision is thousands of small
function calls. ``native.c`` runs the same algorithm over one flat ``int64`` array, the
*program*, which :class:`_Builder` writes from a :class:`CompiledSpace`: the same occurrences
in the same order, the same worklist, the same counters, so it reaches the same fixpoint, the
same dead end and the same fired triggers (a test compares them on random descents). The C
file depends on no kernel and is compiled once per machine into the cache; a space using
something the interpreter does not know (a bound that is not an integer) keeps the Python
engine. A callable relation between integer choices runs from a table per pair of instances.

Layout of the program (offsets are indices into it):

- header: ``H_*`` below;
- per choice slot: its choice's index, ``[n_ids, id0, id1]`` and its universe ``[n, v*]``;
- per choice: ``[both_orientations, n, (occurrence, gate, mask, flipped_mask)*]``, the gate
  saying which change of the condition can matter (``GATE_*``);
- per slot: the counters watching it ``[n, (counter, n_masks or -1, mask*)*]``;
- per counter: ``[mul, half, lo_slot, merged_bit, n_terms, occurrences, n_ids, id0..id3,
  term*]``, a term ``[n_conds, (slot, mask)*, value_is_slot, value, n_quotient or -1,
  slot*, n_partners or -1, (slot, term)*]``;
- per occurrence: its constraint (or trigger), variables, loops, conditions per loop depth;
  conditions are records whose first field is their type (see native.c).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import tempfile
import threading
from array import array
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from partita import config
from partita.paths import cache_root
from partita.space.compiler import CompiledSpace
from partita.space.conditions import (
    DeadEndSignal,
    Relation,
    any_slot,
    choice_refs,
    condition_levels,
)
from partita.space.decl import Compare, Condition, Is, Related, SpaceError, Static, Var
from partita.space.facts import pack_flags

SOURCE = Path(__file__).with_name("native.c")

(H_NSLOTS, H_NCHOICE, H_ABSENT, H_NCOUNTERS, H_NOBJ, H_SLOT_CHOICE, H_SLOT_IDS, H_SLOT_UNIV,
 H_CHOICES, H_WATCH, H_COUNTERS, H_ROOT, H_BASE) = range(13)
C_STATIC, C_IS, C_REL, C_CMP_INT, C_CMP_CNT = range(5)
GATE_ANY, GATE_FALSE, GATE_TRUE = range(3)
"""When an occurrence runs on a change of its condition's slot: on any change, when the
condition turns false (a clause: only a false disjunct can leave one unknown or none), or
when it turns true (a trigger: it fires when every condition holds)."""
OPS = {"<=": 0, "<": 1, ">=": 2, ">": 3, "==": 4, "in": 5}
MAX_VARS = 8
MAX_TERMS = 512
MEMBER_BITS = 1 << 22
"""Largest bit table of a parametric set's membership (objects squared): 512 KiB."""
INT64_MAX = (1 << 63) - 1


class Unsupported(Exception):
    """The space uses something the C interpreter does not implement."""


# ---------------------------------------------------------------------- the shared library

FLAGS = ("-O2", "-shared", "-fPIC")
_LIB: Any = None
_LIB_FAILED = False


def enabled() -> bool:
    """``PARTITA_NATIVE=0`` keeps every space on the Python engine."""
    return config.native_engine()


def library() -> Any:
    """The compiled interpreter (built into the cache on first use), or None without gcc."""
    global _LIB, _LIB_FAILED
    if _LIB is not None or _LIB_FAILED:
        return _LIB
    text = SOURCE.read_bytes()
    cc = config.c_compiler()
    command = [cc, *FLAGS]
    digest = hashlib.sha256(text + " ".join(command).encode()).hexdigest()[:16]
    target = cache_root() / "native" / f"propagate-{digest}.so"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
        os.close(fd)
        try:
            subprocess.run([*command, "-o", tmp, str(SOURCE)],
                           check=True, capture_output=True, timeout=120)
            os.replace(tmp, target)
        except (OSError, subprocess.SubprocessError):
            _LIB_FAILED = True
            Path(tmp).unlink(missing_ok=True)
            return None
    lib = ctypes.CDLL(str(target))
    lib.partita_propagate.restype = ctypes.c_int
    lib.partita_propagate.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                      ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
                                      ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                                      ctypes.c_void_p]
    lib.partita_recompute_all.restype = None
    lib.partita_recompute_all.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.partita_carry.restype = None
    lib.partita_carry.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                  ctypes.c_int]
    lib.partita_open_slots.restype = ctypes.c_int
    lib.partita_open_slots.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                                       ctypes.c_void_p, ctypes.c_int]
    _LIB = lib
    return lib


# ---------------------------------------------------------------------- the engine


class NativeEngine:
    """Propagation of one compiled space in C."""

    FIRED_WIDTH = 6
    """Words per fired trigger: its index, its number of objects, up to four objects."""
    MAX_FIRED = 1 << 20

    def __init__(self, sp: CompiledSpace, lib: Any) -> None:
        self.sp = sp
        self.lib = lib
        try:
            self.program = array("q", _Builder(sp).program())
        except (TypeError, OverflowError) as exc:
            raise Unsupported(f"a value of the program is not a 64-bit integer: {exc}") from None
        self._p = self.program.buffer_info()[0]
        n = sp.size
        self.n = n
        self._scratch = array("q", bytes(16 * n))
        # A flag per slot (queued), then one per object (bound while enumerating groundings).
        self._pending = bytearray(n + sp.n_objects)
        self._pending_p = (ctypes.c_char * len(self._pending)).from_buffer(self._pending)
        # Room for every grounding of every trigger: the list never overflows.
        groundings = sum(sp.n_objects ** len(t.forall) for t in sp.sdef.triggers)
        if groundings > self.MAX_FIRED or any(len(t.forall) > self.FIRED_WIDTH - 2
                                              for t in sp.sdef.triggers):
            raise Unsupported("triggers with too many groundings for the fired list")
        self._max_fired = max(groundings, 1)
        self._fired = array("q", bytes(8 * self.FIRED_WIDTH * self._max_fired))
        self._out = array("q", [0, 0, 0])
        self._lock = threading.Lock()
        self._order = array("q", sp.decision_slots)
        self._open = array("q", bytes(8 * len(sp.decision_slots)))

    def propagate(self, vec: array, changed: list[int],
                  fired: set[tuple[int, tuple[int, ...]]], root: bool) -> None:
        """Propagate in place, adding the triggers that fire to ``fired``; raises
        DeadEndSignal on an emptied domain."""
        ch = array("q", changed)
        # ctypes releases the GIL during the call, and the scratch buffers are the engine's.
        with self._lock:
            status = self.lib.partita_propagate(
                self._p, vec.buffer_info()[0], ch.buffer_info()[0] if ch else None, len(ch),
                1 if root else 0, self._scratch.buffer_info()[0], self._pending_p,
                self._fired.buffer_info()[0], self._max_fired, self._out.buffer_info()[0])
            out = self._out.tolist()
            entries = self._fired[:self.FIRED_WIDTH * out[2]].tolist()
        if status == 2:
            raise RuntimeError("the C engine's list of fired triggers overflowed")
        w = self.FIRED_WIDTH
        for i in range(0, len(entries), w):
            fired.add((entries[i], tuple(entries[i + 2:i + 2 + entries[i + 1]])))
        if status == 1:
            raise DeadEndSignal(out[0], out[1])

    def recompute_all(self, vec: array) -> None:
        """Every counter's interval, in place."""
        self.lib.partita_recompute_all(self._p, vec.buffer_info()[0])

    def carry(self, vec: array, old: array, pairs: array) -> None:
        """``vec[s] &= old[p]`` for the ``(s, p)`` pairs, flattened."""
        self.lib.partita_carry(vec.buffer_info()[0], old.buffer_info()[0],
                               pairs.buffer_info()[0], len(pairs) // 2)

    def open_slots(self, vec: array, limit: int) -> list[int]:
        """The open decision slots in the space's choice order (at most ``limit``)."""
        order = self._order
        out = self._open
        k = self.lib.partita_open_slots(vec.buffer_info()[0], order.buffer_info()[0],
                                        len(order), out.buffer_info()[0], limit)
        return out[:k].tolist()


def engine_of(sp: CompiledSpace) -> NativeEngine | None:
    """The space's C engine, built on first use (None: Python engine)."""
    if sp.native_engine is not False:
        return sp.native_engine
    eng = None
    if enabled():
        lib = library()
        if lib is not None:
            try:
                eng = NativeEngine(sp, lib)
            except Unsupported:
                eng = None
    sp.native_engine = eng
    return eng


# ---------------------------------------------------------------------- the program


class _Builder:
    """Writes the program of a compiled space (layout in the module docstring)."""

    def __init__(self, sp: CompiledSpace) -> None:
        self.sp = sp
        self.P: list[int] = [0] * H_BASE
        self._sets: dict[str, tuple[int, int]] = {}
        self._psets: dict[str, tuple[int, int]] = {}
        self._tables: dict[Any, int] = {}
        """Offsets of the tables written once per key (slots, flips, statics, bounds)."""
        self._relation_tables: dict[Any, tuple[int, int, int]] = {}
        self._sets_of: dict[str, str] = {}
        """The set of each variable of the occurrence being written."""

    def add(self, values: Iterable[int]) -> int:
        """Append a record; ``values`` must not add records itself while it is read."""
        off = len(self.P)
        self.P.extend(values)
        return off

    def program(self) -> list[int]:
        sp = self.sp
        P = self.P
        P[H_NSLOTS] = sp.size
        P[H_NCHOICE] = sp.n_choice_slots
        P[H_ABSENT] = sp.absent_slot
        P[H_NCOUNTERS] = len(sp.counters)
        P[H_NOBJ] = sp.n_objects
        choices = list(sp.slot_table)
        index = {c: i for i, c in enumerate(choices)}
        P[H_SLOT_CHOICE] = self.add(index[inst.choice] for inst in sp.instances)
        ids: list[int] = []
        for inst in sp.instances:
            ids += [len(inst.ids), *_pad(inst.ids, 2)]
        P[H_SLOT_IDS] = self.add(ids)
        univ = []
        # One record per distinct universe (an enum's instances share one tuple of values),
        # keyed with whether its values are integers: (1.0, 2.0) == (1, 2) in Python.
        by_tuple: dict[int, int] = {}
        written: dict[tuple[bool, tuple[Any, ...]], int] = {}
        for vals in sp.universe_of_slot:  # at most MAX_VALUES each (the compiler checks)
            off = by_tuple.get(id(vals))
            if off is None:
                ints = all(isinstance(v, int) for v in vals)
                off = written.get((ints, vals))
                if off is None:
                    off = written[ints, vals] = self.add(
                        [len(vals), *(vals if ints else [0] * len(vals))])
                by_tuple[id(vals)] = off
            univ.append(off)
        univ.append(self.add([0]))
        P[H_SLOT_UNIV] = self.add(univ)
        occ, cocc, root = self._occurrences()
        rec = []
        for choice in choices:
            entries = occ.get(choice, [])
            flat = [int(bool(sp.pair_choice.get(choice, False))), len(entries)]
            for off, gate, mask, flipped in entries:
                flat += [off, 0 if mask is None else gate, mask or 0, flipped or 0]
            rec.append(self.add(flat))
        P[H_CHOICES] = self.add(rec)
        watch = []
        for s in range(sp.size):
            flat = [len(sp.counter_watch[s])]
            for ci, masks in sp.counter_watch[s]:
                flat += [ci, -1] if masks is None else [ci, len(masks), *masks]
            watch.append(self.add(flat))
        P[H_WATCH] = self.add(watch)
        counters = []
        for c in sp.counters:
            if len(c.terms) > MAX_TERMS:
                raise Unsupported(f"counter {c.name} has more than {MAX_TERMS} terms")
            terms = [self._term(c, i) for i in range(len(c.terms))]
            lst = cocc.get(c.name, [])
            head = [int(c.kind == "mul"), int(c.half), c.lo_slot, c.merged_bit, len(c.terms),
                    self.add([len(lst), *lst]), len(c.ids), *_pad(c.ids, 4)]
            counters.append(self.add(head + terms))
        P[H_COUNTERS] = self.add(counters)
        P[H_ROOT] = self.add([len(root), *root])
        if min(P) < -INT64_MAX - 1 or max(P) > INT64_MAX:
            raise Unsupported("a value does not fit 64 bits")
        return P

    def _term(self, c: Any, i: int) -> int:
        conds, value, quot, _ = c.terms[i]
        flat = [len(conds)]
        for slot, mask in conds:
            flat += [slot, mask]
        flat += [1, value[0]] if isinstance(value, tuple) else [0, value]
        flat += [-1] if quot is None else [len(quot), *quot]
        partners = c.partners[i] if c.partners is not None else None
        if partners is None:
            flat.append(-1)
        else:
            flat.append(len(partners))
            for s, j in partners:
                flat += [s, j]
        return self.add(flat)

    # -- occurrences, in the order compiler.py registers them -------------------------------

    def _occurrences(self) -> tuple[dict[str, list], dict[str, list[int]], list[int]]:
        sp = self.sp
        occ: dict[str, list] = {}
        cocc: dict[str, list[int]] = {}
        root: list[int] = []
        for kid, req in enumerate(sp.sdef.constraints):
            conds = self._conditions(req.forall, req.any_of, False)
            for cond in req.any_of:
                for choice, args in choice_refs(cond):
                    off = self._occurrence(req.forall, req.any_of, conds, args, kid, None)
                    if choice in sp.sdef.counters:
                        cocc.setdefault(choice, []).append(off)
                    else:
                        occ.setdefault(choice, []).append(
                            (off, GATE_FALSE, *self.sp.occurrence_masks(cond)))
            if len(req.forall) <= 2:
                root.append(self._occurrence(req.forall, req.any_of, conds, (), kid, None))
        trig: dict[str, list] = {}
        for tid, t in enumerate(sp.sdef.triggers):
            conds = self._conditions(t.forall, t.when, True)
            for cond in t.when:
                if isinstance(cond, Static):
                    continue
                off = self._occurrence(t.forall, t.when, conds, cond.args, -1, tid)
                trig.setdefault(cond.choice, []).append(
                    (off, GATE_TRUE, *self.sp.occurrence_masks(cond)))
        for choice, lst in trig.items():
            occ.setdefault(choice, []).extend(lst)
        return occ, cocc, root

    def _conditions(self, forall: tuple[Var, ...], conds: tuple[Condition, ...],
                    trigger: bool) -> list[int]:
        """The records of a constraint's (or trigger's) conditions, written once: each of
        its occurrences (one per choice it reads, and the root's) points to the same ones,
        which the C engine only reads."""
        if len(forall) > MAX_VARS:
            raise Unsupported("more than 8 variables in a constraint")
        vidx = {v.name: i for i, v in enumerate(forall)}
        self._sets_of = {v.name: v.set for v in forall}
        return [self._condition(ci, c, vidx, trigger) for ci, c in enumerate(conds)]

    def _occurrence(self, forall: tuple[Var, ...], conds: tuple[Condition, ...],
                    cond_offs: list[int], pattern: tuple[str, ...], kid: int,
                    trigger: int | None) -> int:
        vidx = {v.name: i for i, v in enumerate(forall)}
        by_name = {v.name: v for v in forall}
        bound: list[str] = []
        params = []
        for var in pattern:
            params.append(vidx[var])
            if var not in bound:
                bound.append(var)
        unique = [vidx[v] for v in bound]
        head = [kid, -1 if trigger is None else trigger, len(forall), len(params),
                *_pad(params, 2), len(unique) if len(unique) == 2 else 0, *_pad(unique, 2)]
        vars_flat: list[int] = []
        for v in forall:
            vars_flat += self._var(v, vidx)
        checks, deferred = [], []
        for var in bound:
            v = by_name[var]
            if v.of is not None and v.of not in bound:
                deferred.append(v)
            else:
                checks.append(vidx[var])
        rest = [v for v in forall if v.name not in bound]
        loops: list[int] = []
        known = set(bound)
        for v in rest:
            if v.of is not None and v.of not in known:
                raise SpaceError(f"variable {v.name!r} depends on unbound {v.of!r}")
            known.add(v.name)
            dfr = [vidx[d.name] for d in deferred if d.of == v.name]
            loops += [vidx[v.name], len(dfr), *dfr]
        levels = condition_levels(conds, [v.name for v in forall if v.name in bound], rest)
        lv_flat: list[int] = []
        for lv in levels:
            lv_flat += [len(lv), *(cond_offs[ci] for ci in lv)]
        flat = (head + vars_flat + [len(checks), *checks] + [len(rest)] + loops + lv_flat
                + [len(conds), *cond_offs])
        return self.add(flat)

    def _var(self, v: Var, vidx: dict[str, int]) -> list[int]:
        sp = self.sp
        if v.of is None:
            found = self._sets.get(v.set)
            if found is None:
                members = sp.set_ids[v.set]
                lst = self.add([len(members), *members])
                flags = -1
                if len(set(members)) != sp.n_objects:
                    inside = set(members)
                    flags = self.add(int(i in inside) for i in range(sp.n_objects))
                found = self._sets[v.set] = (lst, flags)
            return [0, found[0], 0, found[1]]
        table = self._psets.get(v.set)
        if table is None:
            rows = sp.pset_ids[v.set]
            offs = [self.add([len(rows[i]), *rows[i]]) if i in rows else -1
                    for i in range(sp.n_objects)]
            bits = -1
            n = sp.n_objects
            if n * n <= MEMBER_BITS:
                # membership of x in the set of p at bit p * n + x: one load where scanning
                # the set's list costs its length
                bits = self.add(_pack_bits(n * n, (parent * n + x for parent, members
                                                   in rows.items() for x in members)))
            table = self._psets[v.set] = (self.add(offs), bits)
        return [1, table[0], vidx[v.of], table[1]]

    def _arg_vars(self, args: tuple[str, ...], vidx: dict[str, int]) -> list[int]:
        return [len(args), *_pad([vidx[a] for a in args], 2)]

    def _choice_read(self, choice: str, args: tuple[str, ...], vidx: dict[str, int]) -> list[int]:
        """``[slot table, arity, v0, v1, flip table or -1]``."""
        sp = self.sp
        key = ("slots", choice)
        off = self._tables.get(key)
        if off is None:
            flat = _flatten(sp.slot_table[choice], len(args), sp.n_objects, sp.absent_slot)
            off = self._tables[key] = self.add(_pack32(flat))
        flip = -1
        decl = sp.sdef.enums.get(choice)
        if decl is not None and decl.is_pair and not decl.symmetric:
            fkey = ("flip", choice)
            flip = self._tables.get(fkey, -1)
            if flip < 0:
                flip = self._tables[fkey] = self.add(sp.flip_table(choice))
        return [off, *self._arg_vars(args, vidx), flip]

    def _condition(self, ci: int, cond: Condition, vidx: dict[str, int],
                   trigger: bool) -> int:
        sp = self.sp
        if isinstance(cond, Static):
            table = self._static(cond)
            return self.add([C_STATIC, ci, table, *self._arg_vars(cond.args, vidx)])
        if isinstance(cond, Is):
            read = self._choice_read(cond.choice, cond.args, vidx)
            if cond.choice in sp.sdef.integers:
                masks = sp.int_masks(cond.choice, cond.values)
                return self.add([C_IS, ci, *read, 1, self.add(masks)])
            mask = sp.value_mask(cond.choice, any_slot(sp, cond.choice), cond.values)
            return self.add([C_IS, ci, *read, 0, mask])
        if trigger:
            raise Unsupported("a trigger condition that is neither Is nor Static")
        if isinstance(cond, Related):
            rel = Relation(sp, cond)
            a = self._choice_read(cond.choice_a, cond.args_a, vidx)
            b = self._choice_read(cond.choice_b, cond.args_b, vidx)
            if rel.is_enum:
                tables = [self.add(rel.sup_a), self.add(rel.all_a), self.add(rel.sup_b)]
                return self.add([C_REL, ci, *a, *b, 0, *tables])
            if cond.relation in ("eq", "ne"):
                return self.add([C_REL, ci, *a, *b, 1 if cond.relation == "eq" else 2, 0, 0, 0])
            return self.add([C_REL, ci, *a, *b, 3, *self._relation_table(cond, rel)])
        if isinstance(cond, Compare):
            if cond.op not in OPS:
                raise Unsupported(f"comparison {cond.op!r}")
            bound = self._bound(cond, vidx)
            if cond.choice in sp.sdef.counters:
                key = ("counters", cond.choice)
                off = self._tables.get(key)
                if off is None:
                    off = self._tables[key] = self.add(_flatten(
                        sp.counter_table[cond.choice], len(cond.args), sp.n_objects, -1))
                return self.add([C_CMP_CNT, ci, off, *self._arg_vars(cond.args, vidx),
                                 OPS[cond.op], *bound])
            read = self._choice_read(cond.choice, cond.args, vidx)
            return self.add([C_CMP_INT, ci, *read, OPS[cond.op], *bound])
        raise Unsupported(f"condition {cond!r}")

    def _relation_table(self, cond: Related, rel: Relation) -> list[int]:
        """A callable relation between integer choices, tabulated for every pair of their
        instances: ``[index of a's slots, index of b's slots, pairs]`` (see native.c)."""
        key = ("relation", cond.relation, cond.choice_a, cond.choice_b)
        found = self._relation_tables.get(key)
        if found is not None:
            return list(found)
        sp = self.sp
        slots_a = [s for s, i in enumerate(sp.instances) if i.choice == cond.choice_a]
        slots_b = [s for s, i in enumerate(sp.instances) if i.choice == cond.choice_b]
        index_a = [-1] * (sp.n_choice_slots + 1)
        index_b = [-1] * (sp.n_choice_slots + 1)
        for i, s in enumerate(slots_a):
            index_a[s] = i
        for i, s in enumerate(slots_b):
            index_b[s] = i
        # One table of rows per pair of distinct universes (instances share a few), numbered
        # once: hashing each pair's universes again cost more than the rest of the table.
        numbers: dict[tuple[Any, ...], int] = {}
        of_a = [numbers.setdefault(sp.universe_of_slot[s], len(numbers)) for s in slots_a]
        of_b = [numbers.setdefault(sp.universe_of_slot[s], len(numbers)) for s in slots_b]
        universes = list(numbers)
        rows_of: dict[tuple[int, int], int] = {}
        for ia in dict.fromkeys(of_a):
            for ib in dict.fromkeys(of_b):
                ua, ub = universes[ia], universes[ib]
                rows_of[ia, ib] = self.add(
                    [sum(1 << j for j, y in enumerate(ub) if rel.test(x, y)) for x in ua])
        pairs = [len(slots_b), *(rows_of[ia, ib] for ia in of_a for ib in of_b)]
        found = (self.add(index_a), self.add(index_b), self.add(pairs))
        self._relation_tables[key] = found
        return list(found)

    def _bound(self, cond: Compare, vidx: dict[str, int]) -> list[int]:
        """``[kind, ref, arity, v0, v1]``: a bound record, or a table of them."""
        if not callable(cond.bound):
            return [0, self._bound_record(cond.bound), 0, 0, 0]
        key = ("bound", cond.bound, tuple(self._sets_of[a] for a in cond.bound_args))
        off = self._tables.get(key)
        if off is None:
            table = self.sp.static_table(cond.bound, cond.bound_args, self._sets_of)
            flat = _flatten(table, len(cond.bound_args), self.sp.n_objects, None)
            refs = [-1 if b is None else self._bound_record(b) for b in flat]
            off = self._tables[key] = self.add(refs)
        return [1, off, *self._arg_vars(cond.bound_args, vidx)]

    def _bound_record(self, bound: Any) -> int:
        """``[0, value]`` for an integer bound, ``[1, n, values*]`` for a collection of
        integers (``in``); anything else (a bool included) is unsupported."""
        if isinstance(bound, int) and not isinstance(bound, bool):
            return self.add([0, bound])
        allowed: Any = bound
        try:
            values = sorted(int(v) for v in allowed)
        except (TypeError, ValueError):
            raise Unsupported(f"bound {bound!r}") from None
        if any(int(v) != v for v in allowed):
            raise Unsupported(f"bound {bound!r}")
        return self.add([1, len(values), *values])

    def _static(self, cond: Static) -> int:
        key = ("static", cond.predicate, tuple(self._sets_of[a] for a in cond.args))
        off = self._tables.get(key)
        if off is None:
            # Packed 64 flags a word (a table per pair of sets would fill the cache).
            flags = self.sp.static_flags(cond.predicate, cond.args, self._sets_of)
            off = self._tables[key] = self.add(pack_flags(flags))
        return off


def _pack_bits(n: int, ones: Iterable[int]) -> list[int]:
    """A table of ``n`` flags, 64 a word (flag i at bit i % 64 of word i // 64, as the C
    engine reads static tables and membership tables), with the flags at ``ones`` set:
    signed 64-bit words of the program."""
    words = array("Q", bytes(8 * ((n + 63) // 64)))
    for i in ones:
        words[i >> 6] |= 1 << (i & 63)
    return array("q", words.tobytes()).tolist()


def _pack32(values: list[int]) -> list[int]:
    """Signed 32-bit entries in native byte order, two to a 64-bit word of the program: the
    C engine reads entry i at byte 4 * i of the table."""
    if values and not -(1 << 31) <= min(values) <= max(values) < 1 << 31:
        raise Unsupported("a slot does not fit 32 bits")
    if len(values) % 2:
        values = [*values, 0]
    return array("q", array("i", values).tobytes()).tolist()


def _pad(values: Iterable[int], n: int) -> list[int]:
    """The first ``n`` values, padded with zeros (fixed-width fields of a record)."""
    return [*values, *[0] * n][:n]


def _flatten(table: Any, arity: int, n: int, missing: Any) -> list[Any]:
    """A slot, counter or static table (nested lists) as one row-major list."""
    if arity == 0:
        v = table[0] if isinstance(table, list) else table
        return [missing if v is None else v]
    if arity == 1:
        return [missing if v is None else v for v in table]
    return [missing if v is None else v for row in table for v in row]


def propagate_native(sp: CompiledSpace, vec: array, changed: list[int],
                     fired: set, root: bool) -> bool:
    """Run the C engine if the space has one; False if the caller must use Python."""
    eng = engine_of(sp)
    if eng is None:
        return False
    eng.propagate(vec, changed, fired, root)
    return True
