"""Search strategies over the candidate tree (Beaugnon's thesis, §6.1): branch-and-bound and MCTS.

A strategy proposes implementations and observes their measured times; the tuner
(:mod:`partita.search.tuner`) evaluates them in batches. Both strategies share the model:
a candidate whose lower bound is not below the best time so far cannot improve on it and is
never explored. Choices are instantiated in the space's choice order (first open slot).
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from partita.space.candidate import Candidate, DeadEnd, Decision
from partita.space.compiler import set_bits
from partita.space.estimate import random_descent
from partita.space.nest import Order, is_dim

BoundFn = Callable[[Candidate], float]


@dataclass
class SearchState:
    """What strategies share with the tuner: the best time so far and counters."""

    best_time: float = math.inf
    dead_ends: int = 0
    pruned: int = 0
    expanded: int = 0
    deadline: float = math.inf
    """``time.monotonic()`` past which the batch being evaluated starts no more programs
    (the stop condition's wall-time budget; infinite without one)."""


class Strategy:
    """Proposes implementations (``propose``) and learns from measurements (``observe``)."""

    name = "strategy"

    def __init__(self, root: Candidate, bound: BoundFn, state: SearchState,
                 rng: random.Random) -> None:
        self.root = root
        self.bound = bound
        self.state = state
        self.rng = rng

    def propose(self, n: int) -> list[Candidate]:
        raise NotImplementedError

    def observe(self, cand: Candidate, time_s: float | None) -> None:
        """``time_s`` is None for an implementation that failed (it is never revisited)."""

    def frontier(self) -> tuple[float, Candidate | None]:
        """The least lower bound over the implementations this strategy may still propose
        (infinite when it has none left), and the candidate it bounds. Those it proposed
        and those it pruned are not counted: the tuner knows their times or the cut that
        pruned them. This strategy keeps no frontier: the root."""
        return self.bound(self.root), self.root

    def children(self, cand: Candidate) -> list[tuple[Candidate, float]]:
        """Viable children of the first open choice with their bounds, pruned ones dropped."""
        slot = cand.open_slots()[0]
        out = []
        self.state.expanded += 1
        for _, child in cand.children(slot):
            if isinstance(child, DeadEnd):
                self.state.dead_ends += 1
                continue
            b = self.bound(child)
            if b >= self.state.best_time:
                self.state.pruned += 1
                continue
            out.append((child, b))
        return out


class BranchAndBound(Strategy):
    """Best-first branch-and-bound: expands the candidate of least bound, evaluates every
    implementation reached whose bound is below the best time. Exhaustive on small spaces."""

    name = "bnb"

    def __init__(self, root: Candidate, bound: BoundFn, state: SearchState,
                 rng: random.Random) -> None:
        super().__init__(root, bound, state, rng)
        self._tie = itertools.count()
        # Ties in the bound go to the deepest candidate (then the newest): with a flat bound
        # the search dives to implementations instead of widening level by level.
        self.heap: list[tuple[float, int, int, Candidate]] = [(bound(root), 0, 0, root)]

    def propose(self, n: int) -> list[Candidate]:
        out: list[Candidate] = []
        while self.heap and len(out) < n:
            b, _, _, cand = heapq.heappop(self.heap)
            if b >= self.state.best_time:
                # Best-first: everything left is bounded at least as high.
                self.state.pruned += 1 + len(self.heap)
                self.heap.clear()
                break
            if cand.is_implementation:
                out.append(cand)
                continue
            for child, cb in self.children(cand):
                heapq.heappush(self.heap, (cb, -len(child.decisions), -next(self._tie), child))
        return out

    @property
    def exhausted(self) -> bool:
        return not self.heap

    def frontier(self) -> tuple[float, Candidate | None]:
        """The open candidates: the least bound of the heap."""
        return (self.heap[0][0], self.heap[0][3]) if self.heap else (math.inf, None)


@dataclass
class _Node:
    cand: Candidate
    bound: float
    children: list[_Node] | None = None
    visits: int = 0
    exhausted: bool = False
    top: list[tuple[float, int]] = field(default_factory=list)
    """The best times seen below this node, with the index of the child they came through."""
    reward_sum: float = 0.0


class MonteCarlo(Strategy):
    """MCTS: a tree policy picks a path through expanded nodes (TAG or UCT), the leaf is
    expanded, and a rollout completes it, picking children with probability proportional to
    ``max(T_best - bound, 0)`` (uniformly while no time is known). Dead ends backtrack."""

    name = "mcts"

    def __init__(self, root: Candidate, bound: BoundFn, state: SearchState,
                 rng: random.Random, policy: str = "tag", topk: int = 10, delta: float = 1.0,
                 uct_c: float = math.sqrt(2), fusion_prior: float = 16.0,
                 preference_prior: float = 16.0, mutation: float = 0.0,
                 elite: int = 8, sharpness: float = 1.0,
                 seeds: Sequence[Candidate] = (), seed_share: float = 0.5) -> None:
        super().__init__(root, bound, state, rng)
        if not 0.0 <= seed_share <= 1.0:
            raise ValueError(f"seed_share must be a fraction in [0, 1], got {seed_share}")
        self.seeds = [s for s in seeds if not s.is_implementation]
        self.seed_share = seed_share if self.seeds else 0.0
        self.seed_bounds = [bound(s) for s in self.seeds]
        self.seed_best = [math.inf] * len(self.seeds)
        """The best time measured below each seed."""
        if sharpness <= 0:
            raise ValueError(f"sharpness must be positive, got {sharpness}")
        self.sharpness = sharpness
        if not 0.0 <= mutation <= 1.0:
            raise ValueError(f"mutation must be a fraction in [0, 1], got {mutation}")
        self.mutation = mutation
        self.elite_size = max(1, elite)
        self.elite: list[tuple[float, tuple[Decision, ...]]] = []
        """The fastest implementations measured, with the decisions that produced them."""
        for name, factor in (("fusion_prior", fusion_prior),
                             ("preference_prior", preference_prior)):
            if factor <= 0:
                raise ValueError(f"{name} must be positive, got {factor}")
        self.fusion_prior = fusion_prior
        self.preference_prior = preference_prior
        if policy not in ("tag", "uct"):
            raise ValueError(f"unknown tree policy {policy!r} (tag or uct)")
        self.policy = policy
        self.topk = topk
        self.delta = delta
        self.uct_c = uct_c
        self.tree = _Node(root, bound(root))
        self.proposed: set[Any] = set()
        self.paths: dict[Any, list[tuple[_Node, int]]] = {}
        self.name = f"mcts-{policy}"

    @property
    def exhausted(self) -> bool:
        return self.tree.exhausted

    def frontier(self) -> tuple[float, Candidate | None]:
        """The least bound over the tree's leaves not exhausted: every implementation not
        yet proposed lies below one of them (rollouts leave the node they start from open),
        and a child's bound is never below its parent's, so subtrees bounded above the least
        found so far are skipped."""
        least, witness = math.inf, None
        stack = [self.tree]
        while stack:
            node = stack.pop()
            if node.exhausted or node.bound >= least:
                continue
            if node.children is None:
                least, witness = node.bound, node.cand
            else:
                stack.extend(node.children)
        return least, witness

    def propose(self, n: int) -> list[Candidate]:
        out: list[Candidate] = []
        attempts = 0
        while len(out) < n and not self.tree.exhausted and attempts < 20 * n:
            attempts += 1
            draw = self.rng.random()
            if draw < self.seed_share:
                leaf = self._from_seed()
            elif self.elite and draw < self.seed_share + self.mutation:
                leaf = self._mutate()
            else:
                leaf = self._iterate()
            if leaf is None:
                continue
            # Rollouts with priors reach the same implementation again now and then; it was
            # proposed already (and will be observed), so another one is drawn instead.
            key = leaf.key()
            if key in self.proposed:
                continue
            self.proposed.add(key)
            out.append(leaf)
        return out

    def _from_seed(self) -> Candidate | None:
        """An implementation completed by a rollout from one of the seeds (partial
        candidates: say, the sketches of :mod:`partita.search.sketch`) whose bound is below
        the best time. The tree refines from the root; seeds put part of the evaluations
        where a known structure leaves only parameters to find."""
        live = [i for i, b in enumerate(self.seed_bounds) if b < self.state.best_time]
        if not live:
            self.seed_share = 0.0
            return None
        # Half the time the seed below which the best time was measured, else any: one
        # structure often wins by far (a packed panel), but its first completions may not.
        measured = [i for i in live if self.seed_best[i] < math.inf]
        if measured and self.rng.random() < 0.5:
            pick = min(measured, key=self.seed_best.__getitem__)
        else:
            pick = self.rng.choice(live)
        return self._rollout(self.seeds[pick], self.seed_bounds[pick])

    def _mutate(self) -> Candidate | None:
        """A neighbour of one of the fastest implementations: its decisions replayed from the
        root without one to three of them, the first dropped one barred from its old values,
        and the rest completed by a rollout.

        Decisions commute, so any subset replays in its recorded order; dropping decisions
        only widens domains, so the kept ones stay consistent (a decision on an object that
        only a dropped decision created is dropped too). MCTS alone refines near the root
        of the tree; this refines a good implementation deep down, where a fast matmul
        differs from a slow one by the layout of a buffer or the order of two loops.

        Off by default (``mutation=0``): on matmul 1024^3 with 100 s (20 to 50
        evaluations), proposing half of them as mutations found a worse best in five seeds of
        six; so few evaluations are better spent exploring."""
        _, decisions = self.rng.choice(self.elite)
        if not decisions:
            return None
        drop = set(self.rng.sample(range(len(decisions)),
                                   min(len(decisions), self.rng.choice((1, 1, 2, 3)))))
        cand: Candidate | DeadEnd = self.root
        for i, d in enumerate(decisions):
            if i in drop:
                continue
            assert isinstance(cand, Candidate)
            if not all(a in cand.compiled.oid for a in d.args):
                continue
            cand = cand.apply(d)
            if isinstance(cand, DeadEnd):
                self.state.dead_ends += 1
                return None
        assert isinstance(cand, Candidate)
        old = decisions[min(drop)]
        if all(a in cand.compiled.oid for a in old.args):
            others = [v for v in cand.domain(old.choice, *old.args) if v not in old.values]
            if not others:
                return None
            changed = cand.restrict(old.choice, old.args, others)
            if isinstance(changed, DeadEnd):
                self.state.dead_ends += 1
                return None
            cand = changed
        return self._rollout(cand)

    def _iterate(self) -> Candidate | None:
        path: list[tuple[_Node, int]] = []
        node = self.tree
        while node.children is not None:
            i = self._select(node)
            if i is None:
                node.exhausted = True
                self._propagate_exhausted(path)
                return None
            path.append((node, i))
            node = node.children[i]
        if node.cand.is_implementation:
            node.exhausted = True
            self._propagate_exhausted(path)
            self.paths.setdefault(node.cand.key(), path)
            return node.cand
        kids = self.children(node.cand)
        node.children = [_Node(c, b) for c, b in kids]
        if not node.children:
            node.exhausted = True
            self._propagate_exhausted(path)
            return None
        i = self._weighted([c.bound for c in node.children])
        path.append((node, i))
        leaf = self._rollout(node.children[i].cand, node.children[i].bound)
        if leaf is None:
            return None
        # A leaf reached again keeps the path it was proposed (and will be observed) by.
        self.paths.setdefault(leaf.key(), path)
        return leaf

    def _rollout(self, cand: Candidate, parent: float | None = None) -> Candidate | None:
        """Complete ``cand`` by sampling (eq. 6.2) without computing every child.

        A value drawn uniformly is accepted with probability
        ``((T_best - bound) / (T_best - parent bound)) ** sharpness``, which picks children
        with probability proportional to ``max(T_best - bound, 0) ** sharpness`` at the cost
        of one propagation per draw instead of one per child (a child's bound is never below
        its parent's). Dead or pruned values are dropped and the draw repeats; a choice with
        none left backtracks (returns None). ``parent`` is ``cand``'s bound, if known.
        """
        while not cand.is_implementation:
            slot = cand.open_slots()[0]
            values = set_bits(cand.vec[slot])
            weights = self._prior(cand, slot, values)
            best = self.state.best_time
            if not math.isinf(best) and parent is None:
                parent = self.bound(cand)
            slack = best - parent if parent is not None else math.inf
            # Children rejected by chance are kept: a value drawn again costs no propagation.
            tried: dict[int, tuple[Candidate, float]] = {}
            while True:
                if not values:
                    return None
                if len(tried) == len(values) and tried:
                    # Every child left is known: draw from their exact weights (with a sharp
                    # policy, rejection could take many draws when all of them raise the bound).
                    live = [tried[x] for x in values]
                    w = [(best - b) ** self.sharpness * (weights[x] if weights else 1.0)
                         for x, (_, b) in zip(values, live, strict=True)]
                    child, b = live[self.rng.choices(range(len(live)), w)[0]]
                    break
                at = self.rng.randrange(len(values)) if weights is None else \
                    self.rng.choices(range(len(values)), [weights[x] for x in values])[0]
                v = values.pop(at)
                if v in tried:
                    child, b = tried[v]
                else:
                    found = cand.restrict_slot(slot, 1 << v)
                    if isinstance(found, DeadEnd):
                        self.state.dead_ends += 1
                        continue
                    child = found
                    if math.isinf(best):
                        break
                    b = self.bound(child)
                    if b >= best:
                        self.state.pruned += 1
                        continue
                    tried[v] = (child, b)
                if self.rng.random() < ((best - b) / slack) ** self.sharpness:
                    break
                values.append(v)  # rejected by chance, not pruned: it may be drawn again
            cand = child
            parent = None if math.isinf(best) else b
        return cand

    def _prior(self, cand: Candidate, slot: int, values: list[int]) -> dict[int, float] | None:
        """Rollout weights of a slot's values, None for uniform. Two kinds of value are
        favoured, each by its factor (a value that is both gets the product):

        - fusion (``fusion_prior``): fusing two loops that may be fused (MERGED), putting an
          instruction inside a loop that may be fused with one of its own (IN), giving a loop
          the kind that a loop it may be fused with already has. Fusion is what keeps values
          in registers instead of temporaries, and random kinds and orders rarely fuse a
          whole nest;
        - the values the space prefers (``preference_prior``, :meth:`SpaceDef.prefer`), such
          as VECTOR kinds and temporaries in registers on a CPU.

        The bound still prunes and weighs the children a rollout reaches."""
        inst = cand.compiled.instances[slot]
        universe = cand.compiled.universe_of_slot[slot]
        weight: dict[object, float] = {}
        pref = cand.compiled.sdef.preferences.get(inst.choice)
        if pref is not None and self.preference_prior != 1.0:
            for v in pref.values:
                weight[v] = self.preference_prior
        if self.fusion_prior != 1.0:
            for v in _fusion_values(cand, inst.choice, inst.args):
                weight[v] = weight.get(v, 1.0) * self.fusion_prior
        if not weight:
            return None
        return {v: weight.get(universe[v], 1.0) for v in values}

    def _weighted(self, bounds: list[float]) -> int:
        best = self.state.best_time
        if math.isinf(best):
            return self.rng.randrange(len(bounds))
        weights = [max(best - b, 0.0) ** self.sharpness for b in bounds]
        if sum(weights) <= 0:
            return self.rng.randrange(len(bounds))
        return self.rng.choices(range(len(bounds)), weights)[0]

    def _select(self, node: _Node) -> int | None:
        assert node.children is not None
        children = node.children  # the lambdas below see the narrowed list
        live = [i for i, c in enumerate(children)
                if not c.exhausted and c.bound < self.state.best_time]
        if not live:
            return None
        fresh = [i for i in live if children[i].visits == 0]
        if fresh:
            return fresh[self._weighted([children[i].bound for i in fresh])]
        if self.policy == "uct":
            logn = math.log(max(node.visits, 1))
            return max(live, key=lambda i: children[i].reward_sum / children[i].visits
                       + self.uct_c * math.sqrt(logn / children[i].visits))
        # TAG (Beaugnon's thesis, eq. 6.1); n counts the visits of the node, as in threshold ascent.
        k = len(children)
        alpha = math.log(2 * max(node.visits, 1) * k / self.delta)
        counts = [0] * k
        for _, i in node.top:
            counts[i] += 1

        def score(i: int) -> float:
            s = counts[i]
            return (s + alpha + math.sqrt(2 * s * alpha + alpha * alpha)) / children[i].visits

        return max(live, key=score)

    def _propagate_exhausted(self, path: list[tuple[_Node, int]]) -> None:
        for parent, _ in reversed(path):
            if parent.children is not None and all(c.exhausted for c in parent.children):
                parent.exhausted = True
            else:
                break

    def observe(self, cand: Candidate, time_s: float | None) -> None:
        if time_s is not None:
            for i, seed in enumerate(self.seeds):
                if time_s < self.seed_best[i] and cand.satisfies(seed.decisions):
                    self.seed_best[i] = time_s
            self.elite.append((time_s, cand.decisions))
            self.elite.sort(key=lambda e: e[0])
            del self.elite[self.elite_size:]
        path = self.paths.pop(cand.key(), [])
        reward = 0.0 if time_s is None or math.isinf(self.state.best_time) \
            else min(1.0, self.state.best_time / time_s)
        for node, i in path:
            node.visits += 1
            assert node.children is not None
            child = node.children[i]
            child.visits += 1
            child.reward_sum += reward
            if time_s is not None:
                node.top.append((time_s, i))
                node.top.sort()
                del node.top[self.topk:]


def _fusion_values(cand: Candidate, choice: str, args: tuple[str, ...]) -> set[object]:
    """The values of a choice instance that fuse loops (see :meth:`MonteCarlo._prior`)."""
    k = cand.kernel
    if choice == "dim_kind":
        # Fused loops share their kind: follow a decided partner to keep fusion possible.
        d = args[0]
        return {kinds[0] for e in k.dims if k.mergeable(d, e.name)
                and len(kinds := cand.domain("dim_kind", e.name)) == 1}
    if choice != "order":
        return set()
    a, b = args
    if is_dim(k, a) and is_dim(k, b):
        return {Order.MERGED} if k.mergeable(a, b) else set()
    if is_dim(k, b) and _fusable_into(k, a, b):
        return {Order.IN}  # the instruction a inside b, where fusion can put it
    if is_dim(k, a) and _fusable_into(k, b, a):
        return {Order.OUT}
    return set()


def _fusable_into(k: Any, inst: str, d: str) -> bool:
    """``d`` is foreign to instruction ``inst`` but may be fused with one of its own dims."""
    own = k.iteration_dims(inst)
    return d not in own and any(k.mergeable(d, e) for e in own)


class RandomSearch(Strategy):
    """Uniform random descents (the baseline the model-guided strategies must beat)."""

    name = "random"

    def propose(self, n: int) -> list[Candidate]:
        out: list[Candidate] = []
        for _ in range(20 * n):
            if len(out) == n:
                break
            leaf, _, _ = random_descent(self.root, self.rng)
            if isinstance(leaf, DeadEnd):
                self.state.dead_ends += 1
            elif self.bound(leaf) < self.state.best_time:
                out.append(leaf)
            else:
                self.state.pruned += 1
        return out


STRATEGIES = {"bnb": BranchAndBound, "mcts": MonteCarlo, "random": RandomSearch}


def make_strategy(name: str, root: Candidate, bound: BoundFn, state: SearchState,
                  rng: random.Random, **options: Any) -> Strategy:
    """``bnb``, ``mcts`` (options ``policy`` tag|uct, ``topk``, ``delta``) or ``random``."""
    if name not in STRATEGIES:
        raise ValueError(f"unknown search strategy {name!r} (strategies: "
                         f"{', '.join(STRATEGIES)})")
    return STRATEGIES[name](root, bound, state, rng, **options)
