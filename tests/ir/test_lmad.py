import itertools
import json
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from partita.ir import lmad as lmad_module
from partita.ir.lmad import LMAD, disjoint


def brute_points(lm: LMAD) -> set[int]:
    return {
        lm.offset + sum(i * s for i, s in zip(idx, lm.strides, strict=True))
        for idx in itertools.product(*(range(c) for c in lm.shape))
    }


def row_major_addresses(lm: LMAD) -> list[int]:
    return [lm.index(*y) for y in np.ndindex(*lm.shape)]


def check_against_view(lm: LMAD, view: np.ndarray) -> None:
    assert lm.shape == view.shape
    for y in np.ndindex(*view.shape):
        assert lm.index(*y) == int(view[y])


@st.composite
def lmads(draw, min_rank: int = 1, max_rank: int = 3, max_count: int = 5) -> LMAD:
    rank = draw(st.integers(min_rank, max_rank))
    dims = tuple((draw(st.integers(0, max_count)), draw(st.integers(-6, 6))) for _ in range(rank))
    return LMAD(draw(st.integers(-10, 10)), dims)


# ---------------------------------------------------------------------- examples


def test_points_example():
    lm = LMAD(2, ((3, 5), (4, 1)))
    assert lm.points() == [2, 3, 4, 5, 7, 8, 9, 10, 12, 13, 14, 15]
    assert str(lm) == "2+{(3:5),(4:1)}"


def test_fix_example():
    assert LMAD(10, ((4, 4), (4, 1))).fix(0, 1) == LMAD(14, ((4, 1),))
    assert LMAD(10, ((4, 4), (4, 1))).fix(1, 1) == LMAD(11, ((4, 4),))


def test_row_and_col_major():
    assert LMAD.row_major((2, 3, 4)) == LMAD(0, ((2, 12), (3, 4), (4, 1)))
    assert LMAD.col_major((2, 3, 4)) == LMAD(0, ((2, 1), (3, 2), (4, 6)))
    assert LMAD.row_major((2, 3), offset=5) == LMAD(5, ((2, 3), (3, 1)))
    assert LMAD.row_major(()) == LMAD(0, ())
    assert LMAD.row_major((2, 3, 4)).points() == list(range(24))
    assert LMAD.col_major((2, 3, 4)).points() == list(range(24))


def test_basic_properties():
    lm = LMAD(3, ((2, 12), (3, -4), (4, 1)))
    assert lm.rank == 3
    assert lm.shape == (2, 3, 4)
    assert lm.strides == (12, -4, 1)
    assert lm.num_points == 24
    assert LMAD(0, ((2, 1), (0, 3))).num_points == 0
    assert LMAD(7, ()).num_points == 1
    assert LMAD(7, ()).points() == [7]


def test_normalize_negative_stride():
    lm = LMAD(16, ((4, -2),))
    assert lm.normalize() == LMAD(10, ((4, 2),))
    assert lm.points() == lm.normalize().points() == [10, 12, 14, 16]


def test_normalize_drops_unit_dims_and_sorts():
    lm = LMAD(0, ((4, 1), (1, 100), (3, -8)))
    norm = lm.normalize()
    assert norm == LMAD(-16, ((3, 8), (4, 1)))
    assert norm.points() == lm.points()


def test_erratum_one_dimensional_overlap():
    a = LMAD(0, ((3, 5),))
    b = LMAD(10, ((1, 1),))
    assert 10 in a.points()
    assert not disjoint(a, b)
    assert not disjoint(b, a)


def test_disjoint_simple_cases():
    assert disjoint(LMAD(0, ((4, 1),)), LMAD(4, ((4, 1),)))
    assert disjoint(LMAD(0, ((4, 2),)), LMAD(1, ((4, 2),)))  # interleaved: gcd test
    assert disjoint(LMAD(0, ((0, 1),)), LMAD(0, ((4, 1),)))  # empty
    assert not disjoint(LMAD(0, ((4, 1),)), LMAD(3, ((4, 1),)))
    assert disjoint(LMAD(5, ()), LMAD(6, ()))
    assert not disjoint(LMAD(5, ()), LMAD(5, ()))


def test_disjoint_large_tiles():
    # Two column blocks of a 1024x1024 row-major matrix.
    mat = LMAD.row_major((1024, 1024))
    left = mat.slice(1, 0, 512)
    right = mat.slice(1, 512, 512)
    assert disjoint(left, right)
    assert disjoint(right, left)
    # Overlapping column blocks.
    mid = mat.slice(1, 256, 512)
    assert not disjoint(left, mid)
    # Even and odd rows: same strides, interleaved.
    even = mat.slice(0, 0, 512, 2)
    odd = mat.slice(0, 1, 512, 2)
    assert disjoint(even, odd)
    assert not disjoint(even, mat.slice(0, 2, 100, 4))
    # Different stride vectors that share a point.
    col = mat.fix(1, 7)
    row = mat.fix(0, 300)
    assert not disjoint(col, row)
    # A column and a row block that misses it.
    assert disjoint(col, mat.fix(0, 300).slice(0, 8, 1000))


def test_strided_view_span_and_extent():
    lm = LMAD(0, ((1024, 32 * 1024), (1024, 32)))
    assert lm.span() == (0, 1023 * 32 * 1024 + 1023 * 32)
    assert lm.extent() == 1023 * 32 * 1024 + 1023 * 32 + 1
    assert lm.num_points == 1024 * 1024
    assert lm.is_injective()
    assert not lm.is_contiguous()
    neg = LMAD(100, ((3, -10), (2, 4)))
    assert neg.span() == (80, 104)
    assert neg.extent() == 25


def test_span_of_empty_raises():
    with pytest.raises(ValueError):
        LMAD(0, ((0, 1),)).span()
    with pytest.raises(ValueError):
        LMAD(0, ((3, 1), (0, 1))).extent()


def test_contiguous_and_injective():
    assert LMAD.row_major((2, 3, 4)).is_contiguous()
    assert LMAD.col_major((2, 3, 4)).is_contiguous()
    assert LMAD(5, ((4, -1),)).is_contiguous()
    assert not LMAD(0, ((4, 2),)).is_contiguous()
    assert not LMAD(0, ((2, 1), (2, 1))).is_contiguous()
    assert not LMAD(0, ((2, 1), (2, 1))).is_injective()
    assert not LMAD(0, ((3, 0),)).is_injective()
    assert LMAD(0, ((3, 0), (1, 5))).fix(0, 0).is_injective()
    # Fails the stride test but is injective: {0,3} + {0,2,4} has 6 distinct sums.
    lm = LMAD(0, ((2, 3), (3, 2)))
    assert lm.is_injective()
    assert len(lm.points()) == 6
    # Large and non-injective.
    assert not LMAD(0, ((1 << 10, 1), (1 << 10, 1))).is_injective()


def test_transforms_against_numpy():
    shape = (4, 5, 6)
    arr = np.arange(np.prod(shape)).reshape(shape)
    lm = LMAD.row_major(shape)
    check_against_view(lm, arr)
    check_against_view(lm.slice(1, 1, 3), arr[:, 1:4, :])
    check_against_view(lm.slice(2, 0, 3, 2), arr[:, :, 0:6:2])
    check_against_view(lm.slice(0, 3, 4, -1), arr[::-1, :, :])
    check_against_view(lm.slice(2, 5, 2, -3), arr[:, :, 5::-3])
    check_against_view(lm.fix(1, 2), arr[:, 2, :])
    check_against_view(lm.permute((2, 0, 1)), np.transpose(arr, (2, 0, 1)))
    check_against_view(lm.transpose(), arr.T)
    check_against_view(
        lm.slice(1, 1, 2, 2).permute((1, 2, 0)).fix(0, 1),
        np.transpose(arr[:, 1:4:2, :], (1, 2, 0))[1],
    )
    mat = LMAD.row_major((3, 7))
    mat_arr = np.arange(21).reshape(3, 7)
    check_against_view(mat.transpose(), mat_arr.T)


def test_as_strided_agrees():
    base = np.arange(200)
    lm = LMAD(7, ((4, 20), (5, 3)))
    isz = base.itemsize
    view = np.lib.stride_tricks.as_strided(
        base[lm.offset :], shape=lm.shape, strides=tuple(s * isz for s in lm.strides)
    )
    check_against_view(lm, view)
    assert sorted(set(view.ravel().tolist())) == lm.points()


def test_reshape_examples():
    lm = LMAD.row_major((2, 3, 4))
    assert lm.reshape((6, 4)) == LMAD.row_major((6, 4))
    assert lm.reshape((24,)) == LMAD.row_major((24,))
    assert lm.reshape((2, 12)) == LMAD.row_major((2, 12))
    assert lm.reshape((4, 3, 2)) == LMAD.row_major((4, 3, 2))
    # Column slice of a matrix: rows cannot merge with columns.
    sub = LMAD.row_major((4, 8)).slice(1, 0, 4)
    assert sub.reshape((16,)) is None
    assert sub.reshape((4, 2, 2)) == LMAD(0, ((4, 8), (2, 2), (2, 1)))
    # Transposed views are not row-major contiguous.
    assert LMAD.row_major((3, 4)).transpose().reshape((12,)) is None
    with pytest.raises(ValueError):
        lm.reshape((5, 5))


def test_json_roundtrip():
    lm = LMAD(-3, ((3, 5), (4, -1)))
    d = lm.to_json()
    assert d == {"offset": -3, "dims": [[3, 5], [4, -1]]}
    assert LMAD.from_json(json.loads(json.dumps(d))) == lm
    assert hash(LMAD.from_json(d)) == hash(lm)
    with pytest.raises(ValueError):
        LMAD.from_json({"offset": 0})


def test_numpy_ints_are_coerced():
    lm = LMAD(np.int64(2), ((np.int32(3), np.int64(5)),))
    assert lm == LMAD(2, ((3, 5),))
    assert type(lm.offset) is int
    assert {lm, LMAD(2, [(3, 5)])} == {lm}


# ---------------------------------------------------------------------- bad input


def test_bad_construction_names_dimension():
    with pytest.raises(ValueError, match="dimension 1"):
        LMAD(0, ((3, 1), (-2, 1)))
    with pytest.raises(ValueError, match="dimension 0"):
        LMAD(0, ((2.5, 1),))
    with pytest.raises(ValueError, match="dimension 2"):
        LMAD(0, ((1, 1), (1, 1), (1, "x")))
    with pytest.raises(ValueError, match="dimension 0"):
        LMAD(0, ((1, 2, 3),))
    with pytest.raises(ValueError, match="offset"):
        LMAD(1.5, ())
    with pytest.raises(ValueError, match="dimension 1"):
        LMAD.row_major((2, -1))
    with pytest.raises(ValueError, match="dimension 1"):
        LMAD.col_major((2, -1))


def test_bad_index_names_dimension():
    lm = LMAD.row_major((2, 3))
    with pytest.raises(IndexError, match="dimension 1"):
        lm.index(0, 3)
    with pytest.raises(IndexError, match="dimension 0"):
        lm.index(-1, 0)
    with pytest.raises(IndexError, match="expected 2 indices"):
        lm.index(0)
    with pytest.raises(IndexError, match="dimension 0"):
        lm.fix(0, 2)
    with pytest.raises(IndexError, match="dimension 5"):
        lm.fix(5, 0)


def test_bad_slice_and_permute():
    lm = LMAD.row_major((4, 5))
    with pytest.raises(IndexError, match="dimension 1"):
        lm.slice(1, 3, 3)
    with pytest.raises(IndexError, match="dimension 0"):
        lm.slice(0, 1, 3, -1)
    with pytest.raises(ValueError, match="dimension 1"):
        lm.slice(1, 0, 2, 0)
    with pytest.raises(ValueError, match="dimension 0"):
        lm.slice(0, 0, -1)
    with pytest.raises(IndexError, match="dimension 2"):
        lm.slice(2, 0, 1)
    assert lm.slice(1, 5, 0).num_points == 0
    with pytest.raises(ValueError):
        lm.permute((0, 0))
    with pytest.raises(ValueError):
        lm.permute((0,))


# ---------------------------------------------------------------------- properties

PROPS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPS
@given(lmads())
def test_points_match_brute_force(lm):
    assert lm.points() == sorted(brute_points(lm))


@PROPS
@given(lmads())
def test_normalize_preserves_points(lm):
    norm = lm.normalize()
    assert norm.points() == lm.points()
    assert all(s >= 0 for s in norm.strides)
    assert all(c != 1 for c in norm.shape)
    assert list(norm.strides) == sorted(norm.strides, reverse=True)
    assert norm.normalize() == norm


@pytest.mark.slow
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lmads(), lmads())
def test_disjoint_is_sound(a, b):
    if disjoint(a, b):
        assert not (brute_points(a) & brute_points(b))


@pytest.mark.slow
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lmads(), lmads())
def test_disjoint_strided_test_is_sound(a, b):
    # Disable exact enumeration so the strided-interval test decides small cases too.
    with mock.patch.object(lmad_module, "_DISJOINT_ENUM_LIMIT", -1):
        result = disjoint(a, b)
    if result:
        assert not (brute_points(a) & brute_points(b))


@PROPS
@given(lmads(max_rank=2, max_count=5), st.integers(-200, 200))
def test_disjoint_sound_on_large_sets(base, shift):
    # Scale up so both exceed the exact-enumeration limit and the strided test runs.
    a = LMAD(base.offset, (*base.dims, (100, 1), (50, 1000)))
    b = LMAD(base.offset + shift, ((100, 1), (50, 1000), *base.dims[::-1]))
    assume(a.num_points > 4096 and b.num_points > 4096)
    if disjoint(a, b):
        assert np.intersect1d(a.addresses(), b.addresses()).size == 0


@PROPS
@given(st.data())
def test_disjoint_shared_stride_tiles(data):
    rows, cols = 96, 80
    mat = LMAD.row_major((rows, cols))

    def tile():
        r0 = data.draw(st.integers(0, rows - 1))
        c0 = data.draw(st.integers(0, cols - 1))
        nr = data.draw(st.integers(1, rows - r0))
        nc = data.draw(st.integers(1, cols - c0))
        return mat.slice(0, r0, nr).slice(1, c0, nc)

    a, b = tile(), tile()
    overlap = np.intersect1d(a.addresses(), b.addresses()).size > 0
    # Rectangular tiles of one matrix: the test is exact here.
    assert disjoint(a, b) == (not overlap)


@PROPS
@given(lmads(), st.data())
def test_index_in_points(lm, data):
    assume(lm.num_points > 0)
    y = tuple(data.draw(st.integers(0, c - 1)) for c in lm.shape)
    assert lm.index(*y) in lm.points()


@PROPS
@given(lmads())
def test_injective_matches_brute_force(lm):
    distinct = len(brute_points(lm))
    if lm.is_injective():
        assert distinct == lm.num_points
    else:
        assert distinct < lm.num_points


@PROPS
@given(lmads())
def test_contiguous_matches_brute_force(lm):
    pts = sorted(brute_points(lm))
    dense = lm.num_points == 0 or (
        len(pts) == lm.num_points and pts == list(range(pts[0], pts[-1] + 1))
    )
    assert lm.is_contiguous() == dense


@PROPS
@given(lmads(), st.data())
def test_span_matches_points(lm, data):
    assume(lm.num_points > 0)
    pts = lm.points()
    assert lm.span() == (pts[0], pts[-1])
    assert lm.extent() == pts[-1] - pts[0] + 1


def _factorizations(n: int, max_len: int = 4) -> list[tuple[int, ...]]:
    if n == 1:
        return [(), (1,), (1, 1)]
    out = [(n,)]
    if max_len > 1:
        for d in range(1, n + 1):
            if n % d == 0:
                out += [(d, *rest) for rest in _factorizations(n // d, max_len - 1)]
    return out


@PROPS
@given(lmads(), st.data())
def test_reshape_preserves_row_major_order(lm, data):
    n = lm.num_points
    assume(n > 0)
    shape = data.draw(st.sampled_from(_factorizations(n)))
    new = lm.reshape(shape)
    if new is not None:
        assert new.shape == tuple(shape)
        assert row_major_addresses(new) == row_major_addresses(lm)


@PROPS
@given(st.lists(st.integers(1, 4), min_size=1, max_size=4), st.data())
def test_reshape_of_contiguous_always_works(shape, data):
    lm = LMAD.row_major(shape, offset=3)
    n = lm.num_points
    new_shape = data.draw(st.sampled_from(_factorizations(n)))
    new = lm.reshape(new_shape)
    assert new is not None
    assert row_major_addresses(new) == row_major_addresses(lm)


@PROPS
@given(lmads(), st.data())
def test_slice_fix_permute_match_numpy(lm, data):
    assume(lm.num_points > 0)
    lo, _ = lm.span()
    arr = np.arange(lo, lo + lm.extent())
    view = np.lib.stride_tricks.as_strided(
        arr[lm.offset - lo :], shape=lm.shape, strides=tuple(s * arr.itemsize for s in lm.strides)
    )
    check_against_view(lm, view)
    dim = data.draw(st.integers(0, lm.rank - 1))
    size = lm.shape[dim]
    start = data.draw(st.integers(0, size - 1))
    step = data.draw(st.sampled_from([1, 2, -1, -2]))
    max_count = (size - start - 1) // step + 1 if step > 0 else start // -step + 1
    count = data.draw(st.integers(0, max_count))
    idx = start + step * np.arange(count)
    check_against_view(lm.slice(dim, start, count, step), np.take(view, idx, axis=dim))
    check_against_view(lm.fix(dim, start), np.take(view, start, axis=dim))
    perm = data.draw(st.permutations(range(lm.rank)))
    check_against_view(lm.permute(perm), np.transpose(view, perm))
    check_against_view(lm.transpose(), view.T)
