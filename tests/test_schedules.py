"""Dispatch: layouts choose the schedule, refusals are explained, forcing and errors work."""

import os

import pytest

pytest.importorskip("tvm")
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")

from tvm.script import tirx as T  # noqa: E402

import axe.lang as Ax  # noqa: E402
from axe.schedules import DispatchError, all_schedules  # noqa: E402


def _kernel(reg_layout, schedule=None, reduce=False):
    @Ax.kernel(name="k")
    def k():
        @T.prim_func
        def k(A_: T.Buffer((32, 64), "float32"), B_: T.Buffer((32, 1), "float32")):
            bx, tx_ = Ax.launch(1, 128)
            A = Ax.param(A_)
            B = Ax.param(B_)
            r = Ax.registers((32, 64), "float32", reg_layout)
            if schedule is None:
                Ax.copy(r, A)
            else:
                Ax.copy(r, A, schedule=schedule)
            if reduce:
                s = Ax.registers((32, 1), "float32", "S[(4,8):(1@warp,1)]")
                Ax.reduce(s, r, "max", dims=1)
        return k
    return k


def test_contiguous_thread_run_chooses_vector():
    _, ctx = Ax.build_func(_kernel("S[(4,8,32,2):(1@warp,2,1@lane,1)]"))
    (rec,) = ctx.records
    assert rec.chosen == "vector" and "8-byte" in rec.plan


def test_strided_run_declines_vector_and_says_why():
    _, ctx = Ax.build_func(_kernel("S[(4,8,2,32):(1@warp,2,1,1@lane)]"))
    (rec,) = ctx.records
    assert rec.chosen == "per_thread"
    reasons = dict(rec.verdicts)
    assert "contiguous run" in reasons["vector"] and "global→shared" in reasons["cp_async"]


def test_forced_schedule_and_unfit_force():
    _, ctx = Ax.build_func(_kernel("S[(4,8,32,2):(1@warp,2,1@lane,1)]", schedule="per_thread"))
    assert ctx.records[0].chosen == "per_thread"
    with pytest.raises(Exception, match="contiguous run"):
        Ax.build_func(_kernel("S[(4,8,2,32):(1@warp,2,1,1@lane)]", schedule="vector"))


def test_warp_shuffle_reduce_over_lanes():
    art = Ax.compile_kernel(_kernel("S[(4,8,32,2):(1@warp,2,1@lane,1)]", reduce=True))
    assert [r.chosen for r in art.records] == ["vector", "warp_shuffle"]
    assert "shfl.sync.bfly" in art.ptx


def test_no_fit_names_line_layouts_and_reasons():
    @Ax.kernel(name="bad")
    def bad():
        @T.prim_func
        def bad(A_: T.Buffer((64,), "float32")):
            bx, tx_ = Ax.launch(1, 32)
            A = Ax.param(A_)
            r = Ax.registers((64,), "float32", "S[(2,32):(1,1@lane)]")
            s = Ax.registers((1,), "float32", "S[1:1]")
            Ax.copy(r, A)
            Ax.reduce(s, r, "sum", dims=0, schedule="cta_smem")
        return bad
    with pytest.raises(Exception) as err:
        Ax.build_func(bad)
    text = str(err.value)
    assert "test_schedules.py:" in text and "S[(2,32):(1,1@lane)]" in text
    assert "cta_smem" in text and "warp_shuffle suffices" in text


def test_every_schedule_states_its_requirements():
    scheds = all_schedules("cuda")
    names = {(s.op, s.name) for s in scheds}
    assert {("copy", "tma"), ("copy", "cp_async"), ("copy", "vector"), ("copy", "per_thread"),
            ("reduce", "warp_shuffle"), ("reduce", "cta_smem"), ("reduce", "in_thread"),
            ("elementwise", "per_thread")} <= names
    assert all(s.requires for s in scheds)


def test_tma_needs_barrier_and_swizzle_atom():
    from kernels import transpose
    assert DispatchError  # the error type is public
    out = Ax.explain(transpose.transpose, "sm_100a")
    assert "+ tma" in out and "swizzle 128" in out


def test_tma_store_chosen_and_its_refusals_explained():
    from kernels import transpose
    out = Ax.explain(transpose.transpose, "sm_90a")
    assert "+ tma_store" in out and "store box [64, 64] swizzle 128" in out and "wait_group.read" in out

    @Ax.kernel(name="bad_store")
    def bad_store():
        @T.prim_func
        def bad_store(B_: T.Buffer((64, 64), "float16"), B_map: T.handle("tensormap")):
            bx, tx_ = Ax.launch(1, 128)
            B = Ax.param(B_, tensormap=B_map)
            bar = Ax.cuda.mbarrier(count=1)
            t = Ax.shared((64, 64), "float16", "S[(64,64):(1,64)]", name="t")
            Ax.copy(B, t, schedule="tma_store", barrier=bar)
        return bad_store
    with pytest.raises(Exception, match="drop barrier="):
        Ax.build_func(bad_store)


def _slots_kernel(pitch):
    """A TMA load of 16 floats into slot ``s`` (a run-time index) of a (4, pitch) shared buffer."""
    @Ax.kernel(name="slots")
    def slots():
        @T.prim_func
        def slots(A_: T.Buffer((4, 16), "float32"), A_map: T.handle("tensormap")):
            bx, tx_ = Ax.launch(1, 128)
            A = Ax.param(A_, tensormap=A_map)
            bar = Ax.cuda.mbarrier(count=1)
            t = Ax.shared((4, pitch), "float32", name="t")
            for s in T.serial(4):
                Ax.copy(t[s:s + 1, 0:16], A[s:s + 1, :], schedule="tma", barrier=bar)
        return slots
    return slots


def test_tma_refuses_shared_boxes_off_128_bytes():
    """TMA writes shared memory at 128-byte aligned addresses: slots of 16 floats (64 bytes) are
    refused, naming the buffer and the offset's modulus; slots of 32 floats are taken."""
    with pytest.raises(Exception, match=r"shared t: a TMA box starts at element offset .*16·k \+ 0 elements of 4 bytes"):
        Ax.build_func(_slots_kernel(16))
    _, ctx = Ax.build_func(_slots_kernel(32))
    assert [r.chosen for r in ctx.records] == ["tma"]
