"""The bound of an accumulation's innermost loop body (see :func:`body_time`)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from partita.codegen.lower import accumulator_temporary
from partita.ir.kernel import Kernel
from partita.ir.operands import Value
from partita.model.terms import BodyTerms, BoundModel, KernelTerms, Parallel
from partita.space.candidate import Candidate
from partita.space.nest import CommonKind, Order
from partita.space.temporaries import carried_operand


def body_terms(model: BoundModel, k: Kernel, inst: str) -> BodyTerms:
    """What :meth:`body_time` needs of an accumulation, per kernel."""
    i = k.inst(inst)
    reduction = frozenset(k.reduced_logicals(inst))
    # One load feeds every operand that reads the same value (``x * x``).
    loaded = dict.fromkeys((op.inst, op.mapping) for op in i.operands
                           if isinstance(op, Value) and k.inst(op.inst).op == "load")
    holders = {a.carries: a.name for a in k.arrays if a.carries is not None}
    # A temporary's axes follow one operand (carried_operand): another reading the same
    # load through another mapping is left unpriced by it.
    operands = []
    dim_pairs = set(k.dim_pairs)
    for load, mapping in loaded:
        op = carried_operand(k, load, inst)
        carried = op is not None and op.mapping == mapping
        holder = holders.get((load, inst)) if carried else None
        # While the load is fused, unfusing one of these pairs adds its temporary.
        pairs = tuple(pair for src, dst in mapping
                      for pair in zip(k.dims_of(src), k.dims_of(dst), strict=True)
                      if pair in dim_pairs) if carried and holder is None else ()
        # The load's innermost tiles (those that may be VECTOR), and the logical dim of
        # the accumulation each runs along.
        along = dict(mapping)
        inner = tuple((k.dims_of(ld)[-1], along.get(ld)) for ld in k.inst(load).dims)
        operands.append((frozenset(dst for _, dst in mapping), holder, pairs, inner))
    return BodyTerms(
        tuple((ld, k.dims_of(ld), model.logical_size(k, ld)) for ld in i.dims),
        reduction, tuple(operands), tuple(ld for ld in i.dims if ld not in reduction),
        accumulator_temporary(k, inst), {ld: k.dims_of(ld)[-1] for ld in i.dims})

def body_time(model: BoundModel, cand: Candidate, inst: str, parallel: Parallel | None = None,
              share: float | None = None) -> float:
    """A bound on the time of the accumulation ``inst`` from the body of its innermost
    loop, on the busiest core (0 where loops are not certainly rolled, or while no loop
    need enclose it).

    Where loops are rolled (:attr:`Rates.rolled_loops`), the innermost loop ``L`` around
    the accumulation runs, per iteration, the points of its dims nested inside it: at
    most, per logical dim, those of the tiles inside its innermost tile that is certainly
    a loop of more than one iteration (LOOP or PARALLEL; all its tiles if none is), and
    along ``L``'s own logical dim those inside the outermost tile that may still be
    ``L``. Per iteration, the body issues its FMAs on
    vectors along one dim that may be VECTOR, and it loads:

    - each operand read from memory that varies along ``L``: one load per vector of its
      elements in the body, or per element where the vector is not along its dims (a
      broadcast), or one per vector of its copy where a temporary in registers may carry
      it (the copy runs in the body, and the FMAs take its elements from the copy's
      vectors: see :func:`register_copy`), if fewer; one read through a temporary (a
      packed copy) along the body's vector moves as :func:`operand_moves` allows; one
      that does not vary along ``L`` is hoisted and costs nothing;
    - where ``L`` is not a reduction dim and a reduction loop certainly encloses it: the
      accumulators of the body, loaded and stored at every iteration (registers cannot be
      indexed by a rolled loop's counter, and each iteration updates other ones), in the
      temporary that carries the init to the accumulation: one element at a time along a
      vector dim that none of its remaining layouts makes contiguous, ``L``'s pairs
      unfused (the init cannot be fused into a loop that a reduction loop encloses).

    The body time is the busiest port over its rate, times at least the points of the
    instruction over the points of one body, at the least over the choice of ``L``'s
    logical dim, of the vector's and of the ways the copies may move. Everything else
    (other instructions, register limits, the copies' other work) is left out, so it
    stays optimistic.
    """
    r = model.rates
    if not r.rolled_loops or r.lane_group:
        return 0.0
    k = cand.kernel
    t = model.terms(k)
    body = t.bodies.get(inst)
    if body is None:
        return 0.0
    points = body_points(model, cand, t, body)
    if not points.looped:
        return 0.0
    reduction_looped = any(ld in points.looped for ld in body.reduction)
    strided = strided_accumulators(model, cand, t, body, points, reduction_looped)
    moves: dict[tuple[str, str, str], tuple[tuple[float, float], ...]] = {}
    # Per operand, the vectors a copy in registers may load it in (None: no such copy).
    copies = [register_copy(model, cand, t, holder, pairs, inner)
              for _, holder, pairs, inner in body.operands]
    best = math.inf
    for loop, inner in points.inside.items():
        per_body = {**points.outside, loop: inner}
        for vec, w in [(None, 1), *points.lanes.items()]:
            best = min(best, body_cycles(model, cand, t, body, per_body, loop, vec, w, copies,
                                         moves, strided.get(loop, set()), reduction_looped))
    if best == math.inf:
        return 0.0
    if share is None:
        share = model.work_share(cand, inst, parallel if parallel is not None
                                 else model.parallel_dims(cand))
    return t.volumes[inst] * best * share / (model.rates.ghz * 1e9)


@dataclass(frozen=True)
class BodyPoints:
    """How many points of each logical dim of an accumulation one body of its innermost
    loop ``L`` runs at most."""

    outside: dict[str, int]
    """Per logical dim, its points per body where ``L`` runs along another dim: those of its
    tiles inside its innermost tile certainly a loop (all its tiles if none is)."""
    inside: dict[str, int]
    """Per logical dim that ``L`` may run along, its points per body then: those of its tiles
    inside the outermost tile that may still be ``L``."""
    looped: frozenset[str]
    """The logical dims with a tile certainly a loop of more than one iteration."""
    lanes: dict[str, int]
    """Per logical dim whose innermost tile may be a vector, its most lanes."""


def body_points(model: BoundModel, cand: Candidate, t: KernelTerms,
                body: BodyTerms) -> BodyPoints:
    """The points per body of each logical dim of the accumulation (see
    :class:`BodyPoints`)."""
    r = model.rates
    size = model.dim_size_range
    outside: dict[str, int] = {}
    inside: dict[str, int] = {}
    looped: set[str] = set()
    rolled = (CommonKind.LOOP, r.parallel_kind)
    lanes: dict[str, int] = {}
    for logical, tiles, n in body.tiles:
        certain = -1
        first = None
        his = []
        kinds: tuple[str, ...] = ()
        for index, d in enumerate(tiles):
            kinds = cand.domain("dim_kind", d)
            lo, hi = size(cand, d)
            his.append(hi)
            if lo > 1 and all(kind in rolled for kind in kinds):
                certain, first = index, index
            elif first is None and hi > 1 and any(kind in kinds for kind in rolled):
                first = index
        if certain >= 0:
            looped.add(logical)
        outside[logical] = min(n, math.prod(his[certain + 1:]))
        if first is not None:
            inside[logical] = min(n, math.prod(his[first + 1:]))
        # ``kinds`` and ``hi`` are the innermost tile's: the only one that may be VECTOR
        if any(kind in kinds for kind in r.lane_kinds):
            lanes[logical] = min(t.widest, hi)
    return BodyPoints(outside, inside, frozenset(looped), lanes)


def strided_accumulators(model: BoundModel, cand: Candidate, t: KernelTerms, body: BodyTerms,
                         points: BodyPoints, reduction_looped: bool) -> dict[str, set[str]]:
    """Per row or column loop ``L`` (not a reduction dim), the logical dims along which the
    accumulators reloaded at every iteration of ``L`` move one element at a time.

    Accumulators loaded and stored at every iteration live in the temporary that carries the
    init to the accumulation (the printer updates it in place:
    :func:`partita.codegen.lower.accumulator_temporary`): along a vector dim that no
    remaining layout of it makes contiguous, they move one element at a time. The init is
    never fused into a loop inside the reduction loops, so the row or column loop they are
    reloaded in has its tile unfused."""
    strided: dict[str, set[str]] = {}
    if reduction_looped and points.lanes and body.accumulators is not None:
        for loop in points.inside:
            if loop not in body.reduction:
                strided[loop] = element_lanes(model, cand, t, body, body.accumulators,
                                              points.lanes, loop)
    return strided


def body_cycles(model: BoundModel, cand: Candidate, t: KernelTerms, body: BodyTerms,
                points: dict[str, int], loop: str, vec: str | None, w: int,
                copies: list[tuple[tuple[str | None, int], ...] | None],
                moves: dict[tuple[str, str, str], tuple[tuple[float, float], ...]],
                strided: set[str], reduction_looped: bool) -> float:
    """The cycles per point of a body of ``points`` (per logical dim) of the innermost loop
    along logical dim ``loop``, on vectors of ``w`` lanes along ``vec``: its busiest port, at
    the least over the ways the operands read through temporaries may move (``moves``
    caches them). ``strided``: the logical dims along which the accumulators move one
    element at a time."""
    r = model.rates
    total = math.prod(points.values())
    arith = r.issue_rates(w, t.widest)[0]
    loads = 0.0
    # Per operand read through a temporary: the (loads, stores) of each way it may still be
    # moved.
    ways: list[list[tuple[float, float]]] = []
    for (varying, holder, _, _), copy in zip(body.operands, copies, strict=True):
        if loop not in varying:
            continue
        elements = math.prod(points[ld] for ld in varying)
        if vec not in varying or w == 1 or holder is None:
            per = 1 / w if vec in varying else 1.0
            if copy is not None:
                # A copy's vector holds at most the body's points along its dim.
                per = min(per, 1 / max(
                    (min(n, points[ld]) if ld is not None else n for ld, n in copy),
                    default=1))
            loads += elements * per
        else:
            assert vec is not None
            key = (holder, loop, vec)
            if key not in moves:
                moves[key] = operand_moves(model, cand, t, body, holder, loop, vec, w)
            ways.append([(elements * a, elements * b) for a, b in moves[key]])
    stores = 0.0
    if loop not in body.reduction and reduction_looped:
        stores = math.prod(points[ld] for ld in body.kept) / (
            w if vec in body.kept and vec not in strided else 1)
        loads += stores
    load_rate = max(r.loads_per_cycle, r.scalar_loads_per_cycle)
    store_rate = max(r.stores_per_cycle, r.scalar_stores_per_cycle)
    best = math.inf
    for way in itertools.product(*ways):
        cycles = max(total / w / arith,
                     (loads + sum(a for a, _ in way)) / load_rate,
                     (stores + sum(b for _, b in way)) / store_rate)
        best = min(best, cycles / total)
    return best


def element_lanes(model: BoundModel, cand: Candidate, t: KernelTerms, body: BodyTerms, temp: str,
                   lanes: dict[str, int], unfused: str) -> set[str]:
    """The logical dims that may carry the body's vector along which the accumulation
    accesses ``temp`` one element at a time, where the pairs of logical dim ``unfused``
    are not fused (see :meth:`contiguous`)."""
    axes, where = t.temp_axes[temp], t.temp_where[temp][1]
    unfused_axis = where.get(body.innermost[unfused])
    return {logical for logical in lanes
            if (ax := where.get(body.innermost[logical])) is not None
            and not model.contiguous(cand, temp, axes, ax,
                                     unfused_axis if logical != unfused else None)}

def register_copy(model: BoundModel, cand: Candidate, t: KernelTerms, holder: str | None,
                   pairs: tuple[tuple[str, str], ...],
                   inner: tuple[tuple[str, str | None], ...]
                   ) -> tuple[tuple[str | None, int], ...] | None:
    """The vectors a copy in registers may load an operand in: (the logical dim of the
    accumulation they run along, their most lanes) per innermost tile of the load
    (``inner``) that may still be VECTOR; None where no copy in registers can carry the
    operand: its temporary ``holder`` can no longer live in registers or, while the
    load is fused with the accumulation (``holder`` None), none of the ``pairs`` may
    still be unfused (which would add the temporary).

    A copy into registers runs in the body (every index into the temporary is unrolled
    or fused): it loads the operand's elements of one iteration, at most the body's
    points along the vector's dim per vector, and the accumulation takes them from the
    copy's vectors in registers without loading them again, even where it does not
    vectorise along them (a broadcast of a lane, or a scalar lane).
    """
    if holder is not None:
        if model.rates.register_space not in cand.domain("mem_space", holder):
            return None
    elif not any(cand.allows("order", pair, Order.BEFORE) for pair in pairs):
        return None
    return tuple((ld, min(t.widest, model.dim_size_range(cand, d)[1]))
                 for d, ld in inner
                 if any(cand.allows("dim_kind", (d,), kind)
                        for kind in model.rates.lane_kinds))

def operand_moves(model: BoundModel, cand: Candidate, t: KernelTerms, body: BodyTerms, temp: str,
                   loop: str, vec: str, w: int) -> tuple[tuple[float, float], ...]:
    """The (loads, stores) per element that an operand read through ``temp`` may still
    cost the body of a loop along logical dim ``loop``, with vectors of ``w`` lanes along
    logical dim ``vec``, which the operand varies along: one pair per way to move it, at
    the least (the copy's other work, and the shuffles of values in registers, left out).

    - In registers, every index into the temporary is unrolled or fused: the copy runs in
      the body and loads as many elements at once as its producer may vectorise.
    - In memory, a layout that can store the vector's axis contiguously (see
      :meth:`contiguous`) lets the body load whole vectors. Where ``loop`` is not
      ``vec``, the loop's own tile holds more than one element unless the copy is fused
      inside it, in the body; a layout contiguous only so has the copy load the vectors'
      elements one by one, unless the copy too may vectorise along them (what it vectorises
      along another axis it then stores one by one, that axis coming first).
    - Otherwise every lane is loaded alone.
    """
    r = model.rates
    axes, where = t.temp_axes[temp], t.temp_where[temp][1]
    ax = where[body.innermost[vec]]
    carries = cand.kernel.array(temp).carries
    assert carries is not None
    producer = carries[0]
    copy = 1 / model.lanes(cand, t.inner[producer], t.widest)
    spaces = cand.domain("mem_space", temp)
    ways = [(copy, 0.0)] if r.register_space in spaces else []
    if any(space != r.register_space for space in spaces):
        fused = where.get(body.innermost[loop]) if loop != vec else None
        paired = next(p for p, q in axes[ax] if q == body.innermost[vec])
        if model.contiguous(cand, temp, axes, ax, fused):
            return ((1 / w, 0.0),)
        # Contiguous only with the copy fused inside the loop, in the body.
        in_body = fused is not None and model.contiguous(cand, temp, axes, ax)
        if in_body and any(cand.allows("dim_kind", (paired,), kind)
                           for kind in r.lane_kinds):
            return ((1 / w, 0.0),)
        ways.append((1.0, 0.0))
        if in_body:
            ways.append((copy, 1.0))
    return tuple(ways)
