"""The kernel language's public names for what kernels used to import from schedules: each is the
implementation's own law (the same layout, the same TIR), and the CUDA ones are target-checked."""

import pytest

pytest.importorskip("tvm")

from tvm.script import tirx as T  # noqa: E402

import axe.lang as Ax  # noqa: E402
from axe.backends.cuda.schedules import ldmatrix, tcgen05, wgmma  # noqa: E402
from axe.schedules import emit  # noqa: E402
from axe.schedules.context import building  # noqa: E402


def test_cuda_fragments_are_the_schedules_fragments():
    with building("sm_90a"):
        assert Ax.cuda.wgmma_fragment(64, "tx") == wgmma.d_fragment(64, "tx")
        assert Ax.cuda.wgmma_fragment(128) == wgmma.d_fragment(128, "lane")
        assert Ax.cuda.ldmatrix_atom() == ldmatrix.atom() and Ax.cuda.ldmatrix_atom("tx") == ldmatrix.atom("tx")
    with building("sm_100a"):
        assert Ax.cuda.tcgen05_fragment("16x256b", 16, 128) == tcgen05.ld_fragment("16x256b", 16, 128)
        with pytest.raises(ValueError, match="rows is not 64 or 128"):
            Ax.cuda.tcgen05_fragment("16x256b", 16, 96)


def test_cuda_fragments_are_cuda_constructs():
    with building("trn1"), pytest.raises(Ax.TargetError, match=r"Ax.cuda.wgmma_fragment is a construct of the "
                                                               r"cuda backend; this build is for trn1"):
        Ax.cuda.wgmma_fragment(64)


def test_guard_and_computed_once_are_the_emitters():
    assert Ax.guard is emit.guard and Ax.computed_once is emit.computed_once
    assert Ax.computed_once(7) == 7                    # a Python int needs no cell


@Ax.kernel()
def guarded():
    @T.prim_func
    def guarded(A_: T.Buffer((128,), "int32"), n: T.int32):
        bx, tx = Ax.launch(1, 128)
        once = Ax.computed_once(n * 3 + 1)
        with Ax.guard(tx < n):
            A_[tx] = once
        with Ax.guard(None):
            A_[0] = once
    return guarded


def test_guard_and_computed_once_in_a_kernel():
    func, _ = Ax.build_func(guarded, "sm_90a")
    text = func.script()
    assert "if tx < n:" in text, text
    assert text.count("n * 3 + 1") == 1, text           # computed once, into its local cell
    assert text.count("if ") == 1, text                  # guard(None) adds no branch
