"""The Python engine's propagators: one generated function per occurrence of a choice in a
constraint or a trigger.

Constraints are not instantiated per tuple of objects. For every occurrence of a choice in a
constraint, :class:`OccurrenceGenerator` writes one Python function that binds the variables
of that occurrence from the changed instance, loops over the other variables, and applies
unit propagation to the disjunction: a true condition satisfies it, all-false is a dead end,
and a single unknown condition is enforced. Conditions are evaluated at the shallowest loop
where their variables are bound (:func:`~partita.space.conditions.condition_levels`), so a
satisfied clause skips its inner loops. A trigger's occurrence records its grounding in
``fired`` when every condition holds.

An occurrence function is called as ``f(vec, R, fired, *objects)``: ``vec`` the decision
vector, ``R(slot, mask, constraint)`` the engine's restriction, ``fired`` the set of
``(trigger, objects)`` that fired, ``objects`` the ids the changed instance binds.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from partita.space.conditions import (
    Comparison,
    DeadEndSignal,
    Relation,
    any_slot,
    choice_refs,
    condition_levels,
)
from partita.space.decl import (
    Compare,
    Condition,
    Is,
    Related,
    Require,
    SpaceError,
    Static,
    TriggerDecl,
    Var,
)

if TYPE_CHECKING:
    from partita.space.compiler import CompiledSpace


class OccurrenceGenerator:
    """Writes the Python source of the occurrence functions of constraints and triggers."""

    def __init__(self, space: CompiledSpace) -> None:
        self.space = space
        self.ns: dict[str, Any] = {"DeadEndSignal": DeadEndSignal}
        self.chunks: list[str] = []
        self.n = 0

    def source(self) -> str:
        return "\n".join(self.chunks)

    def const(self, value: Any, prefix: str = "T") -> str:
        self.n += 1
        name = f"{prefix}{self.n}"
        self.ns[name] = value
        return name

    # -- entry points ----------------------------------------------------------------------

    def constraint(self, kid: int, req: Require) -> list[tuple[str, Callable, Condition]]:
        """``(choice read, occurrence function, condition)`` for every reference to a choice
        or a counter in the constraint's conditions."""
        out: list[tuple[str, Callable, Condition]] = []
        for ci, cond in enumerate(req.any_of):
            for choice, args in choice_refs(cond):
                fn = self._occurrence(f"k{kid}_{ci}_{len(out)}", req.forall, req.any_of,
                                      choice, args, kid, trigger=None)
                out.append((choice, fn, cond))
        return out

    def root_check(self, kid: int, req: Require) -> Callable:
        """The constraint over all its groundings, bound by nothing: run once at the root."""
        return self._occurrence(f"r{kid}", req.forall, req.any_of, None, (), kid, trigger=None)

    def trigger(self, tid: int, trig: TriggerDecl) -> list[tuple[str, Callable, Condition]]:
        """``(choice read, occurrence function, condition)`` for every condition of the
        trigger that reads a choice."""
        out: list[tuple[str, Callable, Condition]] = []
        for ci, cond in enumerate(trig.when):
            if isinstance(cond, Static):
                continue
            fn = self._occurrence(f"t{tid}_{ci}", trig.forall, trig.when, cond.choice,
                                  cond.args, -1, trigger=tid)
            out.append((cond.choice, fn, cond))
        return out

    # -- one occurrence --------------------------------------------------------------------

    def _occurrence(self, fname: str, forall: tuple[Var, ...], conds: tuple[Condition, ...],
                    choice: str | None, pattern: tuple[str, ...], kid: int,
                    trigger: int | None) -> Callable:
        """The occurrence function ``fname``: its parameters bind the ``pattern`` variables
        (the changed instance's arguments), loops bind the others; a clause's unit
        propagation or a trigger's firing ends it."""
        self.vars = {v.name: v for v in forall}  # every condition's variables are in it
        lines, bound, deferred = self._bind_pattern(fname, pattern)
        rest = [v for v in forall if v.name not in bound]
        levels = condition_levels(conds, [v.name for v in forall if v.name in bound], rest)
        body_indent, state = self._nest(lines, conds, bound, deferred, rest, levels,
                                        trigger is not None)
        if trigger is None:
            lines.extend(self._unit(conds, bound, body_indent, state, kid))
        else:
            ids = ", ".join(bound[v.name] for v in forall)
            lines.append(f"{body_indent}if {state[0]} == 0: fired.add(({trigger}, ({ids},)))")
        return self._define(fname, lines)

    def _bind_pattern(self, fname: str, pattern: tuple[str, ...]
                      ) -> tuple[list[str], dict[str, str], list[Var]]:
        """The function's head: a parameter per pattern position (a variable repeated must
        see the same object, distinct variables distinct objects) and the membership of the
        pattern's variables in their sets. Returns the lines, the code name of each bound
        variable, and the variables of parametric sets whose parameter a loop binds later
        (their membership is checked inside that loop)."""
        params = [f"a{i}" for i in range(len(pattern))]
        lines = [f"def {fname}(vec, R, fired{''.join(', ' + p for p in params)}):"]
        bound: dict[str, str] = {}
        for p, var in zip(params, pattern, strict=True):
            if var in bound:
                lines.append(f"    if {p} != {bound[var]}: return")
            else:
                bound[var] = p
        if len(set(pattern)) > 1:
            uniq = [bound[v] for v in dict.fromkeys(pattern)]
            for a, b in itertools.combinations(uniq, 2):
                lines.append(f"    if {a} == {b}: return")
        deferred: list[Var] = []
        for var in dict.fromkeys(pattern):
            v = self.vars[var]
            if v.of is not None and v.of not in bound:
                deferred.append(v)
            else:
                lines.extend(self._membership(v, bound, "    ", "return"))
        return lines, bound, deferred

    def _nest(self, lines: list[str], conds: tuple[Condition, ...], bound: dict[str, str],
              deferred: list[Var], rest: list[Var], levels: list[list[int]],
              is_trigger: bool) -> tuple[str, tuple[str, str]]:
        """Append the loops over the ``rest`` variables, each condition evaluated at its
        level; every loop keeps its own count of unknown conditions (``n<depth>``) and the
        last one seen (``u<depth>``). Returns the innermost indent and count names."""
        body_indent = "    "
        state = ("n0", "u0")
        lines.append(f"{body_indent}n0 = 0; u0 = -1")
        for depth in range(len(rest) + 1):
            if depth > 0:
                loop_var = rest[depth - 1]
                name = f"v_{loop_var.name}"
                src = self._iter_source(loop_var, bound)
                lines.append(f"{body_indent}for {name} in {src}:")
                body_indent += "    "
                others = list(bound.values())
                if others:
                    lines.append(f"{body_indent}if {name} in ({', '.join(others)},): continue")
                bound[loop_var.name] = name
                for v in [v for v in deferred if v.of == loop_var.name]:
                    lines.extend(self._membership(v, bound, body_indent, "continue"))
                prev = state
                state = (f"n{depth}", f"u{depth}")
                lines.append(f"{body_indent}{state[0]} = {prev[0]}; {state[1]} = {prev[1]}")
            exit_stmt = "return" if depth == 0 else "continue"
            for ci in levels[depth]:
                lines.extend(self._evaluate(ci, conds[ci], bound, body_indent, exit_stmt, state,
                                            is_trigger))
        return body_indent, state

    def _define(self, fname: str, lines: list[str]) -> Callable:
        """Compile the function's source in the generator's namespace (the constants its
        code names) and keep the source."""
        text = "\n".join(lines)
        self.chunks.append(text)
        code_ns = dict(self.ns)
        exec(compile(text, f"<space {fname}>", "exec"), code_ns)
        self.ns.update({k: v for k, v in code_ns.items() if k.startswith("T")})
        return code_ns[fname]

    def _membership(self, var: Var, bound: dict[str, str], indent: str,
                    exit_stmt: str) -> list[str]:
        sp = self.space
        if var.of is None:
            members = set(sp.set_ids[var.set])
            if len(members) == sp.n_objects:
                return []
            name = self.const(frozenset(members), "S")
            return [f"{indent}if {bound[var.name]} not in {name}: {exit_stmt}"]
        table = {k: frozenset(v) for k, v in sp.pset_ids[var.set].items()}
        name = self.const(table, "P")
        parent = bound.get(var.of)
        if parent is None:
            raise SpaceError(f"variable {var.name!r} depends on unbound {var.of!r}")
        return [f"{indent}if {bound[var.name]} not in {name}.get({parent}, ()): {exit_stmt}"]

    def _iter_source(self, var: Var, bound: dict[str, str]) -> str:
        sp = self.space
        if var.of is None:
            return self.const(tuple(sp.set_ids[var.set]), "S")
        if var.of not in bound:
            raise SpaceError(f"variable {var.name!r} depends on unbound {var.of!r}")
        table = {k: tuple(v) for k, v in sp.pset_ids[var.set].items()}
        return f"{self.const(table, 'P')}.get({bound[var.of]}, ())"

    # -- conditions ------------------------------------------------------------------------

    def _read(self, choice: str, args: tuple[str, ...], bound: dict[str, str], tag: str,
              indent: str) -> list[str]:
        """Code that sets s{tag} (signed slot) and d{tag} (domain in this orientation)."""
        sp = self.space
        table = self.const(sp.slot_table[choice], "L")
        idx = "".join(f"[{bound[a]}]" for a in args) if args else "[0]"
        lines = [f"{indent}s{tag} = {table}{idx}"]
        if sp.pair_choice.get(choice) and not sp.sdef.enums[choice].symmetric:
            flip = self.const(sp.flip_table(choice), "F")
            lines.append(f"{indent}d{tag} = vec[s{tag}] if s{tag} >= 0 else {flip}[vec[~s{tag}]]")
        else:
            lines.append(f"{indent}d{tag} = vec[s{tag}]")
        return lines

    def _evaluate(self, ci: int, cond: Condition, bound: dict[str, str], indent: str,
                  exit_stmt: str, state: tuple[str, str], is_trigger: bool) -> list[str]:
        """Code that exits when the condition is true, counts it when it is unknown.

        For a trigger every condition must be true: an unknown or false one exits.
        """
        n, u = state
        tag = f"{ci}"
        sp = self.space
        if isinstance(cond, Static):
            table = self.const(self._static_table(cond.predicate, cond.args), "T")
            idx = "".join(f"[{bound[a]}]" for a in cond.args)
            if is_trigger:
                return [f"{indent}if not {table}{idx}: {exit_stmt}"]
            return [f"{indent}if {table}{idx}: {exit_stmt}"]
        if isinstance(cond, Is):
            lines = self._read(cond.choice, cond.args, bound, tag, indent)
            if cond.choice in sp.sdef.integers:
                masks = self.const(sp.int_masks(cond.choice, cond.values), "M")
                lines.append(f"{indent}m{tag} = {masks}[s{tag}]")
                mask = f"m{tag}"
            else:
                mask = str(sp.value_mask(cond.choice, any_slot(sp, cond.choice), cond.values))
            if is_trigger:
                lines.append(f"{indent}if d{tag} & ~{mask}: {exit_stmt}")
                return lines
            lines.append(f"{indent}if not d{tag} & ~{mask}: {exit_stmt}")
            lines.append(f"{indent}if d{tag} & {mask}: {n} += 1; {u} = {ci}")
            return lines
        if isinstance(cond, Related):
            lines = self._read(cond.choice_a, cond.args_a, bound, f"{tag}a", indent)
            lines += self._read(cond.choice_b, cond.args_b, bound, f"{tag}b", indent)
            rel = self.const(self._relation(cond), "Q")
            lines.append(f"{indent}st{tag} = {rel}.state(vec, s{tag}a, d{tag}a, s{tag}b, d{tag}b)")
            lines.append(f"{indent}if st{tag} == 1: {exit_stmt}")
            lines.append(f"{indent}if st{tag} == 0: {n} += 1; {u} = {ci}")
            return lines
        if isinstance(cond, Compare):
            return self._compare(cond, bound, tag, indent, exit_stmt, state, ci)
        raise SpaceError(f"unknown condition {cond!r}")

    def _compare(self, cond: Compare, bound: dict[str, str], tag: str, indent: str,
                 exit_stmt: str, state: tuple[str, str], ci: int) -> list[str]:
        sp = self.space
        n, u = state
        cmp = self.const(Comparison(sp, cond), "C")
        lines = [f"{indent}b{tag} = {self._bound_expr(cond, bound)}"]
        if cond.choice in sp.sdef.counters:
            table = self.const(sp.counter_table[cond.choice], "K")
            idx = "".join(f"[{bound[a]}]" for a in cond.args) if cond.args else "[0]"
            lines.append(f"{indent}c{tag} = {table}{idx}")
            lines.append(f"{indent}st{tag} = {cmp}.counter_state(vec, c{tag}, b{tag})")
        else:
            lines += self._read(cond.choice, cond.args, bound, tag, indent)
            lines.append(f"{indent}st{tag} = {cmp}.int_state(s{tag}, d{tag}, b{tag})")
        lines.append(f"{indent}if st{tag} == 1: {exit_stmt}")
        lines.append(f"{indent}if st{tag} == 0: {n} += 1; {u} = {ci}")
        return lines

    def _bound_expr(self, cond: Compare, bound: dict[str, str]) -> str:
        if not callable(cond.bound):
            return self.const(cond.bound, "B")
        table = self.const(self._static_table(cond.bound, cond.bound_args), "B")
        if not cond.bound_args:
            return f"{table}"
        return table + "".join(f"[{bound[a]}]" for a in cond.bound_args)

    def _unit(self, conds: tuple[Condition, ...], bound: dict[str, str], indent: str,
              state: tuple[str, str], kid: int) -> list[str]:
        n, u = state
        lines = [f"{indent}if {n} == 0: raise DeadEndSignal(-1, {kid})"]
        lines.append(f"{indent}if {n} == 1:")
        first = True
        for ci, cond in enumerate(conds):
            if isinstance(cond, Static):
                continue
            kw = "if" if first else "elif"
            first = False
            lines.append(f"{indent}    {kw} {u} == {ci}:")
            lines.extend(self._enforce(ci, cond, indent + "        ", kid))
        return lines

    def _enforce(self, ci: int, cond: Condition, indent: str, kid: int) -> list[str]:
        sp = self.space
        tag = f"{ci}"
        if isinstance(cond, Is):
            if cond.choice in sp.sdef.integers:
                return [f"{indent}R(s{tag}, m{tag}, {kid})"]
            mask = sp.value_mask(cond.choice, any_slot(sp, cond.choice), cond.values)
            if sp.pair_choice.get(cond.choice) and not sp.sdef.enums[cond.choice].symmetric:
                fmask = sp.flip_table(cond.choice)[mask]
                return [f"{indent}if s{tag} >= 0: R(s{tag}, {mask}, {kid})",
                        f"{indent}else: R(~s{tag}, {fmask}, {kid})"]
            return [f"{indent}R(s{tag}, {mask}, {kid})"]
        if isinstance(cond, Related):
            rel = self.const(self._relation(cond), "Q")
            return [f"{indent}{rel}.enforce(vec, R, s{tag}a, s{tag}b, {kid})"]
        if isinstance(cond, Compare):
            cmp = self.const(Comparison(sp, cond), "C")
            if cond.choice in sp.sdef.counters:
                return [f"{indent}{cmp}.enforce_counter(vec, R, c{tag}, b{tag}, {kid})"]
            return [f"{indent}{cmp}.enforce_int(R, s{tag}, d{tag}, b{tag}, {kid})"]
        raise SpaceError(f"cannot enforce {cond!r}")

    # -- tables ----------------------------------------------------------------------------

    def _static_table(self, predicate: Callable[..., Any], args: tuple[str, ...]) -> Any:
        return self.space.static_table(predicate, args,
                                       {a: self.vars[a].set for a in args})

    def _relation(self, cond: Related) -> Any:
        return Relation(self.space, cond)

