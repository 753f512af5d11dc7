import dataclasses
import json
import math
from contextlib import contextmanager

import numpy as np
import pytest

from partita.ir.builder import KernelBuilder
from partita.ir.kernel import Array, Kernel, LogicalDim
from partita.ir.operands import Affine, Index, Instruction, Reduce, Value
from partita.ir.types import DType, KernelError
from partita.kernels import get_spec, kernel

FP32 = DType.FP32


@contextmanager
def raises_naming(*names: str):
    """A KernelError must be raised, and its message must contain every one of ``names``."""
    with pytest.raises(KernelError) as info:
        yield info
    for name in names:
        assert name in str(info.value), f"{name!r} not in message {str(info.value)!r}"


def base_builder():
    """Sizes, arrays and dimensions that are valid on their own; cases below add a bad object."""
    b = KernelBuilder("t")
    n = b.size("n", 8)
    x = b.array("x", None, [n])
    y = b.array("y", None, [n], role="out")
    return b, x, y, b.dim("i", n), b.dim("j", n)


def affine(i, c=1, k=0):
    return c * Affine.of(i) + k


BAD = {
    "dup size/array": (lambda b, x, y, i, j: b.size("x", 4), ["'x'"]),
    "dup array/dim": (lambda b, x, y, i, j: b.dim("y", 4), ["'y'"]),
    "unknown size in shape": (lambda b, x, y, i, j: b.array("z", None, ["nn"]), ["'z'", "'nn'"]),
    "unknown size of dim": (lambda b, x, y, i, j: b.dim("k", "nn"), ["'k'", "'nn'"]),
    "zero size param": (lambda b, x, y, i, j: b.size("m", 0), ["'m'"]),
    "negative extent": (lambda b, x, y, i, j: b.array("z", None, [4, -2]), ["'z'", "-2"]),
    "zero dim size": (lambda b, x, y, i, j: b.dim("k", 0), ["'k'"]),
    "order repeats": (lambda b, x, y, i, j: b.array("z", None, [4, 4], layout=(0, 0)), ["'z'"]),
    "order too long": (lambda b, x, y, i, j: b.array("z", None, [4], layout=(0, 1)), ["'z'"]),
    "layout string": (lambda b, x, y, i, j: b.array("z", None, [4], layout="diag"),
                      ["'z'", "'diag'"]),
    "elem stride 0": (lambda b, x, y, i, j: b.array("z", None, [4], elem_stride=0), ["'z'"]),
    "empty tiles": (lambda b, x, y, i, j: b.dim("k", 8, [[]]), ["'k'"]),
    "zero tile": (lambda b, x, y, i, j: b.dim("k", 8, [[0, 2]]), ["'k'"]),
    "negative tile": (lambda b, x, y, i, j: b.dim("k", 8, [[4], [-1]]), ["'k'"]),
    "no divisor": (lambda b, x, y, i, j: b.dim("k", 7, [[2, 4]]), ["'k'"]),
    "above cap": (lambda b, x, y, i, j: b.dim("k", 8, [[2, 4]], max_factor=1), ["'k'"]),
    "above size": (lambda b, x, y, i, j: b.dim("k", 2, [[4, 8]], divisible=False), ["'k'"]),
    "unknown op": (lambda b, x, y, i, j: b.op("pow", 1.0, 2.0, dims=[i], name="p"),
                   ["'p'", "'pow'"]),
    "arity": (lambda b, x, y, i, j: b.op("add", 1.0, dims=[i], name="s"), ["'s'", "add"]),
    "unknown inst dim": (lambda b, x, y, i, j: b.mov(0.0, dims=["q"], name="m"), ["'m'", "'q'"]),
    "index of unknown dim": (lambda b, x, y, i, j: b.mov(Index("q"), dims=[i], dtype="int32",
                                                         name="m"), ["'m'", "'q'"]),
    "index of foreign dim": (lambda b, x, y, i, j: b.mov(Index("j"), dims=[i], dtype="int32",
                                                         name="m"), ["'m'", "'j'"]),
    "value of unknown inst": (lambda b, x, y, i, j: b.mov(Value("ghost"), dims=[i], name="m"),
                              ["'m'", "'ghost'"]),
    "reduce of unknown inst": (lambda b, x, y, i, j: b.add(1.0, Reduce("ghost", ("i",)),
                                                           dims=[i], name="m"),
                               ["'m'", "'ghost'"]),
    "reduce over foreign dim": (lambda b, x, y, i, j: b.add(
        1.0, b.reduce(b.mov(0.0, dims=[i]), [j]), dims=[i], name="m"), ["'m'", "'j'"]),
    "const dtype": (lambda b, x, y, i, j: b.add(1.0, b.const(2.0, "float64"), dims=[i],
                                                name="s"), ["'s'", "float64", "float32"]),
    "scalar dtype": (lambda b, x, y, i, j: b.mul(b.scalar("alpha", "int32"), 2.0, dims=[i],
                                                 name="s"), ["'s'", "int32"]),
    "store into input": (lambda b, x, y, i, j: b.store(x, [i], 1.0, name="bad"),
                         ["'bad'", "'x'"]),
    "too few indices": (lambda b, x, y, i, j: b.load(b.array("z", None, [8, 8]), [i],
                                                     name="ld"), ["'ld'", "'z'"]),
    "foreign dim in access": (lambda b, x, y, i, j: b.load(x, [i], dims=[j], name="ld"),
                              ["'ld'", "'i'"]),
    "x[i + 1]": (lambda b, x, y, i, j: b.load(x, [affine(i, 1, 1)], name="ld"),
                 ["'ld'", "'x'"]),
    "x[2 * i]": (lambda b, x, y, i, j: b.load(x, [affine(i, 2)], name="ld"), ["'ld'", "'x'"]),
    "x[-i]": (lambda b, x, y, i, j: b.load(x, [affine(i, -1)], name="ld"), ["'ld'", "'x'"]),
    "x[8]": (lambda b, x, y, i, j: b.load(x, [8], dims=[i], name="ld"), ["'ld'", "'x'"]),
    "dynamic x[i + 1]": (lambda b, x, y, i, j: b.load(
        b.array("z", None, [b.size("d")]), [affine(b.dim("k", "d"), 1, 1)], name="ld"),
        ["'ld'", "'z'", "'d'"]),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_definition_raises_naming_the_object(case):
    add, names = BAD[case]
    b, *objects = base_builder()
    with raises_naming(*names):
        add(b, *objects)
        b.build()


def test_base_builder_and_good_accesses_are_valid():
    b, _, _, i, _ = base_builder()
    z = b.array("z", None, [17])
    b.load(z, [affine(i, 2, 1)], name="odd")
    b.load(z, [affine(i, -1, 16)], name="rev")
    d = b.dim("k", b.size("d"), [[1, 4]])
    b.load(b.array("w", None, ["d"]), [d], name="dyn")
    rows = b.array("v", None, ["d", "n"])
    b.load(rows, [d, affine(i, 1, 0)], name="col")
    b.load(b.array("u", None, ["n", "d"]), [affine(i, 1, 0), d], name="row")
    k = b.build()
    assert k.strip_factors("k") == (1, 4)
    # A dynamic extent is in the way of an axis' stride only when it is a faster axis'.
    assert k.element_stride("dyn", "k") == 1
    assert k.element_stride("row", "k") == 1
    assert k.element_stride("col", "k") == 8
    assert k.element_stride("col", "i") == 1
    assert k.element_stride("row", "i") is None


def test_duplicate_instruction_and_load_dtype():
    a = Instruction("a", "mov", (Index("i"),), ("i",), DType.INT32)
    with raises_naming("'a'"):
        Kernel("dup", (), (), (), (LogicalDim("i", 4),), (a, a))
    b, x, _, i, _ = base_builder()
    b.load(x, [i], name="ld")
    k = b.build()
    ld = dataclasses.replace(k.inst("ld"), dtype=DType.FP64)
    with raises_naming("'ld'", "'x'", "float64"):
        dataclasses.replace(k, instructions=(ld,))


def mapped_pair(size_i=8, size_j=8, tiles_i=(), tiles_j=(), mapping=None, **dim_kw):
    b = KernelBuilder("t")
    x = b.array("x", None, [size_i])
    y = b.array("y", None, [size_j], role="out")
    i, j = b.dim("i", size_i, tiles_i, **dim_kw), b.dim("j", size_j, tiles_j)
    ld = b.load(x, [i], name="ld")
    b.store(y, [j], b.value(ld, mapping or {i: j}), name="st")
    return b


def test_mapping_errors():
    assert mapped_pair().build().dim_pairs == (("i.0", "j.0"),)
    with raises_naming("'st'", "'i'", "'j'"):
        mapped_pair(size_j=4).build()
    with raises_naming("'st'", "'i'", "'j'"):
        mapped_pair(tiles_i=[[1, 2]], tiles_j=[[1, 4]]).build()
    with raises_naming("'st'", "'j'", "'ld'"):
        mapped_pair(mapping={"j": "j"}).build()  # the producer does not iterate j
    with raises_naming("'st'", "'i'"):
        mapped_pair(mapping={"i": "i"}).build()  # the consumer does not iterate i


def test_mapping_between_dims_of_different_divisibility():
    b = mapped_pair(7, 7, tiles_i=[[1, 2, 4]], tiles_j=[[1, 2, 4]], divisible=False)
    # i may be split by 1, 2 or 4, j only by 1, yet their tile dimensions are paired
    with raises_naming("'st'", "'i'", "'j'"):
        b.build()


def test_dependency_cycle():
    a = Instruction("a", "mov", (Value("b"),), ("i",), FP32)
    b = Instruction("b", "mov", (Value("a"),), ("i",), FP32)
    with raises_naming("a -> b -> a"):
        Kernel("cyc", (), (), (), (LogicalDim("i", 4),), (a, b))


# --------------------------------------------------------------------- builder structure


def small_kernel(m=8, n=16):
    """``s[i] = sum_j x[i, j]`` with separate nests for init and store."""
    b = KernelBuilder("rowsum")
    m_, n_ = b.size("m", m), b.size("n", n)
    x = b.array("x", None, [m_, n_])
    s = b.array("s", None, [m_], role="out")
    i = b.dim("i", m_, [[1, 2, 4]])
    j = b.dim("j", n_, [[1, 2, 4, 8], [1, 2]], max_factor=8)
    i_init, i_st = b.mapped_dim(i, "i_init"), b.mapped_dim(i, "i_st")
    ld = b.load(x, [i, j], name="ld")
    init = b.mov(0.0, dims=[i_init], name="init")
    acc = b.add(ld, b.reduce(init, [j], {i_init: i}), dims=[i, j], name="acc")
    b.store(s, [i_st], b.value(acc, {i: i_st}), name="st")
    return b.build()


def test_structure_of_small_kernel():
    k = small_kernel()
    assert [d.name for d in k.dims] == [
        "i.0", "i.1", "j.0", "j.1", "j.2", "i_init.0", "i_init.1", "i_st.0", "i_st.1"]
    assert k.dim("j.2").sizes == (1, 2) and k.dim("j.0").sizes is None
    assert k.dims_of("j") == ("j.0", "j.1", "j.2")
    assert k.iteration_dims("acc") == ("i.0", "i.1", "j.0", "j.1", "j.2")
    assert k.iteration_dims("st") == ("i_st.0", "i_st.1")
    assert set(k.dim_pairs) == {("i_init.0", "i.0"), ("i_init.1", "i.1"),
                                ("i.0", "i_st.0"), ("i.1", "i_st.1")}
    assert k.reduction_dims == {"j.0", "j.1", "j.2"}
    assert k.reducing_insts == {"acc"}
    assert set(k.dependencies) == {
        ("acc", "ld"), ("acc", "init"),
        ("j.0", "init"), ("j.1", "init"), ("j.2", "init"),
        ("st", "acc"), ("st", "j.0"), ("st", "j.1"), ("st", "j.2"),
    }
    assert len(k.dependencies) == len(set(k.dependencies))
    assert set(k.statements) == {"ld", "init", "acc", "st", *(d.name for d in k.dims)}


def test_strip_factors():
    k = small_kernel()
    assert k.strip_factors("i") == (1, 2, 4)
    assert k.strip_factors("j") == (1, 2, 4, 8)  # 16 is above max_factor
    b = KernelBuilder("t")
    b.dim("d", 10, [[1, 4, 8], [1, 2]])
    b.dim("nd", 10, [[1, 4, 8], [1, 2]], divisible=False)
    k = b.build()
    assert k.strip_factors("d") == (1, 2)
    assert k.strip_factors("nd") == (1, 2, 4, 8)  # 16 is larger than the size


def test_mergeable():
    k = small_kernel()
    assert k.logical_class == {"i": "i", "j": "j", "i_init": "i", "i_st": "i"}
    assert k.mergeable("i.1", "i_init.1")
    assert k.mergeable("i_init.0", "i_st.0")
    assert not k.mergeable("i.0", "i_init.1")  # different levels
    assert not k.mergeable("i.1", "j.1")  # not connected by a mapping
    assert not k.mergeable("i.0", "i.0")


@pytest.mark.parametrize("layout, elem_stride, expect_i, expect_j", [
    ("row", 1, 16, 1),
    ("col", 1, 1, 8),
    ("row", 32, 16 * 32, 32),
    ("col", 32, 32, 8 * 32),
])
def test_element_stride(layout, elem_stride, expect_i, expect_j):
    b = KernelBuilder("t")
    x = b.array("x", None, [8, 16], layout=layout, elem_stride=elem_stride)
    i, j = b.dim("i", 8), b.dim("j", 16)
    b.load(x, [i, j], name="ld")
    b.load(x, [i, 2 * Affine.of(i)], dims=[i, j], name="diag")
    b.mov(0.0, dims=[i], name="m")
    k = b.build()
    assert k.element_stride("ld", "i") == expect_i
    assert k.element_stride("ld", "j") == expect_j
    assert k.element_stride("diag", "j") == 0
    assert k.element_stride("diag", "i") == expect_i + 2 * expect_j
    assert k.element_stride("m", "i") is None


@pytest.mark.parametrize("shape, order, elem_stride", [
    ((3, 5), (0, 1), 1), ((3, 5), (1, 0), 1), ((3, 5), (0, 1), 32), ((3, 5), (1, 0), 32),
    ((2, 3, 4), (0, 1, 2), 1), ((2, 3, 4), (2, 0, 1), 3), ((2, 3, 4), (1, 2, 0), 1),
])
def test_array_lmad_matches_numpy(shape, order, elem_stride):
    arr = Array("a", DType.FP64, shape, order, elem_stride)
    view = arr.lmad({})
    # numpy: allocate the axes in memory order, widen the fastest by the stride, slice it
    mem_shape = [shape[a] for a in order]
    mem_shape[-1] *= elem_stride
    base = np.empty(mem_shape)[..., ::elem_stride]
    np_view = base.transpose(np.argsort(order))
    assert np_view.shape == shape
    assert view.shape == shape
    assert view.strides == tuple(s // np_view.itemsize for s in np_view.strides)
    last = sum((c - 1) * st for c, st in zip(np_view.shape, np_view.strides, strict=True))
    assert arr.footprint({}) == last // np_view.itemsize + 1
    if order in ((0, 1), (1, 0)) and elem_stride == 1:
        nd = np.empty(shape, order="C" if order == (0, 1) else "F")
        assert view.strides == tuple(s // nd.itemsize for s in nd.strides)


def test_array_lmad_with_named_sizes():
    arr = Array("a", FP32, ("m", 4), (0, 1))
    assert arr.lmad({"m": 3}).dims == ((3, 4), (4, 1))
    assert arr.footprint({"m": 3}) == 12
    with raises_naming("'m'"):
        arr.lmad({})


def test_structural_hash_and_json():
    k1, k2 = small_kernel(), small_kernel()
    assert k1 == k2 and hash(k1) == hash(k2)
    assert k1.structural_hash == k2.structural_hash
    k3 = small_kernel(n=32)
    assert k3.structural_hash != k1.structural_hash
    assert small_kernel(m=4).structural_hash != k1.structural_hash
    text = json.dumps(k1.to_json())
    assert json.loads(text)["name"] == "rowsum"
    assert "rowsum" in k1.describe()


# --------------------------------------------------------------------- library kernels


def test_library_kernels_build():
    k = kernel("axpy", n=1024)
    assert {a.name for a in k.arrays} == {"x", "y"}
    assert k.size_values == {"n": 1024}
    assert k.element_stride("ld_x", "i") == 1
    k = kernel("matmul", m=8, n=4, k=16, transpose_a=1, transpose_b=1, stride_a=32,
               dtype="float64")
    a, bb = k.array("A"), k.array("B")
    assert a.order == (1, 0) and a.elem_stride == 32 and a.dtype is DType.FP64
    assert bb.order == (1, 0) and bb.elem_stride == 1
    assert k.element_stride("ld_a", "i_a") == 32
    assert k.element_stride("ld_a", "r_a") == 8 * 32
    assert k.element_stride("ld_b", "r_b") == 1
    assert k.reducing_insts == {"acc"}
    assert k.reduction_dims == set(k.dims_of("r"))
    k = kernel("batched_matmul", b=4, m=8, n=8, k=16, reuse_b=1)
    assert k.array("B").shape == ("k", "n")
    assert "p_b" in k.inst("ld_b").dims
    assert k.element_stride("ld_b", "p_b") == 0
    assert kernel("batched_matmul", b=4, m=8, n=8, k=16).array("B").shape == ("b", "k", "n")
    assert kernel("matmul", m="64", n=32, k=16).size_values["m"] == 64


@pytest.mark.parametrize("name, params, needle", [
    ("nope", {}, "'nope'"),
    ("matmul", {"q": 3}, "'q'"),
    ("matmul", {"m": 0}, "m"),
    ("matmul", {"m": "abc"}, "m"),
    ("matmul", {"m": 2.5}, "m"),
    ("matmul", {"transpose_a": 2}, "transpose_a"),
    ("matmul", {"stride_a": 0}, "stride_a"),
    ("matmul", {"dtype": "int8"}, "dtype"),
    ("axpy", {"n": -1}, "n"),
])
def test_library_parameter_errors(name, params, needle):
    with raises_naming(needle):
        kernel(name, **params)


def test_references_and_counts():
    rng = np.random.default_rng(0)
    spec = get_spec("axpy")
    x, y = rng.standard_normal(10), rng.standard_normal(10)
    np.testing.assert_allclose(spec.reference(2.5, x, y)["y"], 2.5 * x + y)
    assert spec.flops(n=10, dtype="float32") == 20
    assert spec.bytes(n=10, dtype="float32") == 3 * 10 * 4
    assert spec.outputs == ("y",)

    spec = get_spec("matmul")
    m, n, k = 3, 4, 5
    a2, b2 = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    expect = np.array([[sum(a2[r, t] * b2[t, c] for t in range(k)) for c in range(n)]
                       for r in range(m)])
    np.testing.assert_allclose(spec.reference(a2, b2)["C"], expect)
    params = spec.resolve({"m": m, "n": n, "k": k, "dtype": "float64"})
    assert spec.flops(**params) == 2 * m * n * k
    assert spec.bytes(**params) == (m * k + k * n + m * n) * 8
    built = spec.build(**params)
    acc = built.inst("acc")
    assert acc.op == "fma"
    iterations = math.prod(built.static_size(built.logical(d).size) for d in acc.dims)
    assert spec.flops(**params) == 2 * iterations
    assert spec.bytes(**params) == sum(a.footprint(built.size_values) * a.dtype.itemsize
                                       for a in built.arrays)

    spec = get_spec("batched_matmul")
    bt = 3
    a3, b3 = rng.standard_normal((bt, m, k)), rng.standard_normal((bt, k, n))
    c3 = spec.reference(a3, b3)["C"]
    for p in range(bt):
        np.testing.assert_allclose(c3[p], a3[p] @ b3[p])
    np.testing.assert_allclose(spec.reference(a3, b2)["C"][1], a3[1] @ b2)
    for reuse in (0, 1):
        params = spec.resolve({"b": bt, "m": m, "n": n, "k": k, "reuse_b": reuse})
        built = spec.build(**params)
        assert spec.flops(**params) == 2 * bt * m * n * k
        assert spec.bytes(**params) == sum(a.footprint(built.size_values) * 4
                                           for a in built.arrays)
