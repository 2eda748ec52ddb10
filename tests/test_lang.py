"""The kernel language: tensors with layouts, scopes and slices, both register forms compile."""

import os

import pytest

pytest.importorskip("tvm")
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")

from tvm.script import tirx as T  # noqa: E402

import axe.lang as Ax  # noqa: E402
from axe.layout import S, tx  # noqa: E402


def _ptx(k, target="sm_90a"):
    return Ax.compile_kernel(k, target)


@Ax.kernel()
def collective():
    """AXE-LAYOUT example 7, CTA-collective: S[(16,8,8):(8@tx,1@tx,1@reg)] over a 16×64 tile."""
    @T.prim_func
    def collective(A_: T.Buffer((64, 128), "float16"), B_: T.Buffer((64, 128), "float16")):
        bx, tx_ = Ax.launch(4, 128)
        A = Ax.param(A_)
        B = Ax.param(B_)
        R = Ax.registers((16, 64), "float16", "S[(16,8,8):(8@tx,1@tx,1@reg)]")
        Ax.copy(R, A[bx * 16:(bx + 1) * 16, 0:64])
        Ax.copy(B[bx * 16:(bx + 1) * 16, 0:64], R)
    return collective


@Ax.kernel()
def per_thread():
    """Example 7, per thread: S[(2,4):(4,1)] + ((tx//8)*128 + (tx%8)*8 + 2112) in thread scope."""
    @T.prim_func
    def per_thread(A_: T.Buffer((8192,), "float16"), B_: T.Buffer((8192,), "float16")):
        bx, tx_ = Ax.launch(1, 128)
        A = Ax.param(A_)
        B = Ax.param(B_)
        r = Ax.registers((2, 4), "float16", "S[(2,4):(4,1)]")
        with Ax.thread():
            Ax.copy(r, Ax.view(A, "S[(2,4):(4,1)]", base=(tx_ // 8) * 128 + (tx_ % 8) * 8 + 2112))
            Ax.copy(Ax.view(B, "S[(2,4):(4,1)]", base=(tx_ // 8) * 128 + (tx_ % 8) * 8 + 2112), r)
    return per_thread


def test_collective_register_form_compiles_to_vectors():
    art = _ptx(collective)
    assert [r.chosen for r in art.records] == ["vector", "vector"]
    assert "ld.global.v4" in art.ptx and "st.global.v4" in art.ptx


def test_per_thread_form_compiles_with_16_byte_vectors():
    art = _ptx(per_thread)
    assert all(r.chosen == "vector" for r in art.records)
    assert "16-byte" in art.records[0].plan   # the thread's 2×4 run is contiguous and 8-aligned
    assert "ld.global.v4" in art.ptx


@Ax.kernel()
def sliced():
    """Warps 0–3 produce into shared memory, warps 4–7 consume it (a scope slice)."""
    @T.prim_func
    def sliced(A_: T.Buffer((128, 64), "float16"), B_: T.Buffer((128, 64), "float16")):
        bx, tx_ = Ax.launch(1, 256)
        A = Ax.param(A_)
        B = Ax.param(B_)
        tile = Ax.shared((128, 64), "float16")
        with Ax.warps(0, 4):
            Ax.copy(tile, A)
        Ax.sync()
        with Ax.warps(4, 8):
            Ax.copy(B, tile)
    return sliced


def test_scope_slices_guard_and_rebase_threads():
    func, ctx = Ax.build_func(sliced)
    text = func.script()
    assert "tx_ >= 0 and tx_ < 128" in text and "tx_ >= 128 and tx_ < 256" in text
    assert [r.call.scope.threads for r in ctx.records] == [128, 128]
    assert ctx.records[0].chosen == "cp_async" and ctx.records[1].chosen == "vector"
    art = _ptx(sliced)
    assert "cp.async.cg.shared.global" in art.ptx


def test_tensor_slice_uses_layout_algebra():
    from axe.ops.tensor import Tensor
    from axe.layout import parse
    L = parse("S[(2,8,3,8):(192,8,64,1)]")
    t = Tensor(object(), L, (16, 24), "float16", "shared", name="t")
    sub = t[0:8, 8:24]
    assert sub.shape == (8, 16)
    assert sub.layout.offset["m"] == 64


def test_bad_layout_shape_is_refused():
    from axe.ops.tensor import Tensor
    with pytest.raises(ValueError, match="has 12 elements"):
        Tensor(object(), S[(4, 4)], (3, 4), "float16", "global", name="x")


def test_symbolic_slice_start_needs_one_layout_for_every_block():
    """A start bx*4 is any multiple of 4; [0,4) and [8,12) are S[4:1] but [4,8) wraps the inner
    iter, so no single layout serves every bx and the slice must be refused, not guessed."""
    import tvm
    from axe.layout import LayoutError, parse
    from axe.ops.tensor import Tensor
    bx = tvm.tirx.Var("bx", "int32")
    t = Tensor(object(), parse("S[(2,6):(100,1)]"), (12,), "float16", "shared", name="t")
    with pytest.raises(LayoutError, match="block 1 differs"):
        t.region([bx * 4], [4])
    ok = Tensor(object(), parse("S[(2,8):(100,1)]"), (16,), "float16", "shared", name="u").region([bx * 4], [4])
    assert ok.layout == parse("S[4:1]")
