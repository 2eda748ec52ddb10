"""Layout inference for Trainium tiles (``Ax.neuron.sbuf/psum(layout=Ax.INFER)``,
:mod:`axe.backends.neuron.proposals`).  Oracles: the hand-written twins' layouts, NKI sources
and cost estimates; NumPy references run against the trn1 and trn2 models; the TensorE rules of
tests/test_neuron.py's hand layouts."""

import ml_dtypes
import numpy as np
import pytest
from tvm.script import tirx as T

import axe.lang as Ax
from axe.backends.neuron.proposals import partition_layouts
from axe.lang import KernelError, build_func, compile_kernel, explain
from axe.layout import F, P, S
from examples import gelu_affine
from kernels import rmsnorm, softmax
from kernels.inferred.gelu_affine_nki import gelu_affine_nki
from kernels.inferred.rmsnorm_nki import rmsnorm_nki
from kernels.inferred.softmax_nki import softmax_nki

TARGETS = ("trn1", "trn2")
BF16 = ml_dtypes.bfloat16


def _inputs(name, rng):
    if name == "softmax":
        return {"X": rng.standard_normal((softmax.ROWS, softmax.N)).astype(np.float16)}
    if name == "rmsnorm":
        return {"X": rng.standard_normal((rmsnorm.ROWS, rmsnorm.N)).astype(np.float16),
                "W": rng.standard_normal((1, rmsnorm.N)).astype(np.float16)}
    n = gelu_affine.N
    return {"X": rng.standard_normal((gelu_affine.TRN_M, n)).astype(BF16),
            "G": rng.standard_normal((1, n)).astype(BF16), "B": rng.standard_normal((1, n)).astype(BF16)}


def _reference(name, d):
    x = d["X"].astype(np.float32)
    if name == "softmax":
        e = np.exp(x - x.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)
    if name == "rmsnorm":
        return x / np.sqrt((x * x).mean(1, keepdims=True) + rmsnorm.EPS) * d["W"].astype(np.float32)
    gelu = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))     # tanh form
    return gelu * d["G"].astype(np.float32) + d["B"].astype(np.float32)


TWINS = {"softmax": (softmax_nki, softmax.softmax), "rmsnorm": (rmsnorm_nki, rmsnorm.rmsnorm),
         "gelu_affine": (gelu_affine_nki, gelu_affine.gelu_affine)}


def _onchip_layouts(k, target):
    """{tile name: layout} of every SBUF/PSUM operand the build's operator calls see."""
    _, ctx = build_func(k, target)
    return {t.name: t.layout for r in ctx.records for t in r.call.operands.values() if t.mem in ("sbuf", "psum")}


@pytest.mark.parametrize("name", sorted(TWINS))
def test_inferred_layouts_are_the_hand_ones(name):
    inferred, hand = TWINS[name]
    got, want = _onchip_layouts(inferred, "trn1"), _onchip_layouts(hand, "trn1")
    assert set(got) == set(want) and got == want


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(TWINS))
def test_inferred_twins_match_numpy_and_the_hand_cost(name, target):
    inferred, hand = TWINS[name]
    d = _inputs(name, np.random.default_rng(7))
    out, cost = compile_kernel(inferred, target).run(**d)
    ref = _reference(name, d)
    assert np.abs(out["Y"].astype(np.float32) - ref).max() <= 2e-2 * np.abs(ref).max()
    hand_out, hand_cost = compile_kernel(hand, target).run(**d)
    np.testing.assert_array_equal(out["Y"], hand_out["Y"])
    assert cost == hand_cost


def test_explain_names_the_operator_that_fixed_each_tile():
    text = explain(softmax_nki, "trn1").split("\n\n")[1]
    assert text.startswith("inferred layouts")
    for tile, why in (("x", "nl.load"), ("xf", "max along the free axis"), ("mx", "max along the free axis"),
                      ("e", "sum along the free axis"), ("sm", "sum along the free axis")):
        line = next(l for l in text.splitlines() if l.strip().startswith(f"{tile}["))
        assert "S[(128,1):(1@P,1@F)]" in line or "S[(128,1024):(1@P,1@F)]" in line
        assert why in line, line


def _gemm(M, N, K, a=Ax.INFER, b=Ax.INFER, c=Ax.INFER, reduce_a=False):
    @Ax.kernel(name="mm", outputs=("C",), targets=TARGETS)
    def k():
        @T.prim_func
        def mm(A_: T.Buffer((M, K), "float16"), B_: T.Buffer((K, N), "float16"), C_: T.Buffer((M, N), "float16")):
            Ax.neuron.core()
            A, B, C = Ax.param(A_), Ax.param(B_), Ax.param(C_)
            sa = Ax.neuron.sbuf((M, K), "float16", a, name="a")
            sb = Ax.neuron.sbuf((K, N), "float16", b, name="b")
            acc = Ax.neuron.psum((M, N), "float32", c, name="acc")
            out = Ax.neuron.sbuf((M, N), "float16", c, name="out")
            Ax.copy(sa, A[0:M, 0:K])
            Ax.copy(sb, B[0:K, 0:N])
            Ax.gemm(acc, sa, sb)
            if reduce_a:        # a free-axis max over K needs K on F, the gemm needs it on P
                r = Ax.neuron.sbuf((M, 1), "float16", Ax.INFER, name="r")
                Ax.reduce(r, sa, "max", dims=1)
                Ax.copy(C[0:M, 0:1], r)
            Ax.cast(out, acc)
            Ax.copy(C[0:M, 0:N], out)
        return mm
    return k


def test_gemm_tiles_take_tensore_layouts():
    """The hand layouts tests/test_neuron.py's TensorE cases accept: K on P in A and B, M on P of C."""
    got = _onchip_layouts(_gemm(128, 512, 128), "trn1")
    assert got == {"a": S[(128, 128):(1 @ F, 1 @ P)], "b": S[(128, 512):(1 @ P, 1 @ F)],
                   "acc": S[(128, 512):(1 @ P, 1 @ F)], "out": S[(128, 512):(1 @ P, 1 @ F)]}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("M, N, K", [(128, 512, 128), (256, 512, 256), (128, 1024, 128)])
def test_inferred_gemm_matches_numpy(M, N, K, target):
    rng = np.random.default_rng(M + N + K)
    A = rng.standard_normal((M, K)).astype(np.float16)
    B = rng.standard_normal((K, N)).astype(np.float16)
    out, cost = compile_kernel(_gemm(M, N, K), target).run(A=A, B=B)
    ref = A.astype(np.float32) @ B.astype(np.float32)
    assert np.abs(out["C"].astype(np.float32) - ref).max() <= 2e-3 * np.abs(ref).max()
    assert cost.counts["nisa.nc_matmul"] == (M // 128) * (K // 128) * (N // 512)


def test_a_conflict_names_both_operators():
    """a's K on P (the gemm) leaves the max over K no VectorE form: r, the max, names both."""
    with pytest.raises(KernelError, match=r"tile r\[128, 1\] \(sbuf\): no operator fixes its layout: copy at "
                                          r".* but then reduce at .* does not \(a .* fixed by gemm at "):
        build_func(_gemm(128, 512, 128, reduce_a=True), "trn1")


def test_a_tile_no_operator_touches_is_named():
    @Ax.kernel(name="lonely", outputs=("Y",), targets=TARGETS)
    def k():
        @T.prim_func
        def lonely(X_: T.Buffer((128, 64), "float32"), Y_: T.Buffer((128, 64), "float32")):
            Ax.neuron.core()
            X, Y = Ax.param(X_), Ax.param(Y_)
            x = Ax.neuron.sbuf((128, 64), "float32", name="x")
            unused = Ax.neuron.sbuf((128, 64), "float32", Ax.INFER, name="unused")  # noqa: F841
            Ax.copy(x, X)
            Ax.copy(Y, x)
        return lonely
    with pytest.raises(KernelError, match=r"tile unused\[128, 64\] \(sbuf\): no operator fixes its layout"):
        build_func(k, "trn1")


@pytest.mark.parametrize("shape", [(128, 64), (1, 512), (256, 96), (64, 384), (300, 64), (200, 300)])
def test_partition_layouts_hold_each_element_once_within_128_partitions(shape):
    """Brute force over every element: each candidate maps the shape one-to-one onto (P, F) within
    128 partitions, and one dim is a whole multiple of 128 rows or fits in one block."""
    cands = partition_layouts(shape)
    placeable = [d for d in (0, 1) if shape[d] <= 128 or shape[d] % 128 == 0]
    assert len(cands) == len(placeable) or (shape[0] == 1 and len(cands) >= 1)
    for L in cands:
        assert L.span("P") <= 128
        seen = {(c["P"], c["F"]) for x in range(L.size) for c in [L.shard_coord(x)]}
        assert len(seen) == shape[0] * shape[1]
