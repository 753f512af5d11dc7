"""The order of a size-generic kernel's versions and each branch's property, built from the
training times (partita.tuning.chain): checked on shapes whose work cannot tell them apart, on
the thesis's case where the work does, and as properties of any time table."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from partita.tuning.chain import (
    TOLERANCES,
    _greedy,
    candidate_properties,
    choose_chain,
    property_text,
    property_value,
    routed_version,
    training_slowdowns,
)
from partita.tuning.thresholds import choose_version

MNK = ("m", "n", "k")
CANDIDATES = candidate_properties(MNK, ["k"])


def values_of(sizes: list[tuple[int, int, int]]) -> list[dict[tuple[str, ...], int]]:
    return [{p: property_value(p, dict(zip(MNK, s, strict=True))) for p in CANDIDATES}
            for s in sizes]


def routed(chain, values, cuts=None):  # type: ignore[no-untyped-def]
    """The version each training size gets with each branch's cut at the smallest value of
    its property among the sizes it took (or at ``cuts``)."""
    if cuts is None:
        cuts = [min(values[d][p] for d in took)
                for p, took in zip(chain.properties, chain.taken, strict=False)]
    return [chain.order[choose_version([v[p] for p in chain.properties], cuts)]
            for v in values]


def test_candidates_put_the_work_first_then_output_and_reduction() -> None:
    assert CANDIDATES[:3] == [MNK, ("m", "n"), ("k",)]
    assert set(CANDIDATES) == {MNK, ("m", "n"), ("k",), ("m",), ("n",), ("m", "k"),
                               ("n", "k")}
    seven = candidate_properties(list("npqkrsc"), list("rsc"))
    assert seven[0] == tuple("npqkrsc") and seven[1] == tuple("npqk")
    assert seven[2] == tuple("rsc") and len(seven) == len(set(seven)) == 17
    assert property_text(MNK, MNK) == "work" and property_text(("m", "n"), MNK) == "m*n"


def test_shapes_of_equal_work_get_their_own_versions() -> None:
    """Tall, skinny and square matmuls of the same work (2^23): each one's winner is 3x
    slower on the others' shapes. The work cannot order them; products of fewer sizes can."""
    sizes = [(2048, 64, 64), (64, 2048, 64), (203, 203, 203), (64, 64, 2048)]
    fastest = [0, 1, 2, 3]
    times = [[1.0 if v == f else 3.0 for v in range(4)] for f in fastest]
    values = values_of(sizes)
    chain = choose_chain(times, values, CANDIDATES)
    assert sorted(chain.order) == [0, 1, 2, 3]
    assert len(chain.properties) == 3 and MNK not in chain.properties
    assert routed(chain, values) == fastest == routed(chain, values, chain.cuts)


def test_the_work_is_kept_where_it_orders_the_versions() -> None:
    """Square sizes: the winner at each size is fastest from that size up (the thesis's
    monotone case), and every property orders them alike: the work, listed first, is kept."""
    sizes = [(32, 32, 32), (128, 128, 128), (512, 512, 512)]
    times = [[3.0, 2.0, 1.0], [2.0, 1.0, 1.5], [1.0, 1.5, 3.0]]
    values = values_of(sizes)
    chain = choose_chain(times, values, CANDIDATES)
    assert chain.order == [0, 1, 2] and chain.properties == [MNK, MNK]
    assert routed(chain, values) == [2, 1, 0]


def test_a_version_no_size_needs_is_left_out_and_failures_never_win() -> None:
    sizes = [(32, 32, 32), (1024, 1024, 1024)]
    times = [[1.0, None, 1.5], [2.0, 1.0, 1.5]]  # V2 is nowhere the fastest
    chain = choose_chain(times, values_of(sizes), CANDIDATES)
    assert chain.order == [1, 0] and chain.taken == [[1], [0]]
    assert routed(chain, values_of(sizes)) == [0, 1]  # V1, failed at the small size, not there
    assert choose_chain([[2.0]], values_of(sizes[:1]), CANDIDATES).order == [0]


size = st.tuples(*[st.sampled_from([1, 7, 32, 100, 513, 2048])] * 3)
table = st.integers(2, 5).flatmap(lambda nv: st.lists(
    st.tuples(size, st.lists(st.one_of(st.none(), st.floats(0.1, 10.0)), min_size=nv,
                             max_size=nv)), min_size=1, max_size=8))


@settings(max_examples=200, deadline=None)
@given(table)
def test_any_time_table_gives_a_consistent_chain(rows) -> None:  # type: ignore[no-untyped-def]
    """Whatever the times: each version appears at most once, each branch has a property,
    the sizes the branches took partition the sizes some version computed, and cutting each
    branch at its smallest value routes every size to the branch that took it, whose version
    is within the loosest tolerance the chain needed of the fastest one left there."""
    sizes = [s for s, _ in rows]
    times = [t for _, t in rows]
    values = values_of(sizes)
    chain = choose_chain(times, values, CANDIDATES)
    assert len(set(chain.order)) == len(chain.order) >= 1
    assert len(chain.properties) == len(chain.order) - 1
    took = sorted(d for t in chain.taken for d in t)
    assert len(took) == len(set(took))
    computed = [d for d, t in enumerate(times) if any(x is not None for x in t)]
    assert set(took) <= set(computed)
    got = routed(chain, values)
    by_cuts = routed(chain, values, chain.cuts)
    assert [by_cuts[d] for d in took] == [got[d] for d in took]  # the chain's cuts route alike
    for branch, (v, ds) in enumerate(zip(chain.order, chain.taken, strict=True)):
        for d in ds:
            assert got[d] == v, (branch, d)
            if branch < len(chain.properties):  # a branch never takes a size it failed at
                assert times[d][v] is not None


@settings(max_examples=100, deadline=None)
@given(table, st.integers(0, 4))
def test_a_version_fastest_everywhere_is_the_whole_chain(rows, best) -> None:  # type: ignore[no-untyped-def]
    sizes = [s for s, _ in rows]
    times = [[0.01 if v == best % len(t) else (x or 1.0) for v, x in enumerate(t)]
             for _, t in rows]
    chain = choose_chain(times, values_of(sizes), CANDIDATES)
    assert chain.order == [best % len(times[0])] and chain.properties == []


def test_a_near_miss_does_not_strand_a_size_on_a_slow_version() -> None:
    """V1 is fastest at the smallest and the two largest sizes and 1.06x the fastest at the
    tall one, where V2 wins; V3 is slow everywhere. The tall size lies between the smallest
    and the largest by every property, so from the tightest tolerance V1's branch takes the
    largest two only, V2 takes the tall one, and the smallest falls to the else, V3, at 3x.
    The chain kept sends every size to a version within 1.06x of its fastest."""
    sizes = [(32, 32, 32), (2048, 64, 64), (4096, 128, 128), (4096, 256, 256)]
    times = [[1.0, 5.0, 3.0], [1.06, 1.0, 3.0], [1.0, 1.5, 3.0], [1.0, 1.5, 3.0]]
    values = values_of(sizes)
    tightest = _greedy(times, values, CANDIDATES, TOLERANCES)
    assert max(training_slowdowns(tightest, times, values)) == 3.0
    chain = choose_chain(times, values, CANDIDATES)
    assert max(training_slowdowns(chain, times, values)) <= 1.06 + 1e-12
    assert routed_version(chain, values[0]) == 0
