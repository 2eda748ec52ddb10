"""Small axe kernels that each exercise named schedules (build side: imports TVM).

Each entry of :data:`KERNELS` is ``(kernel, chosen)``: the :class:`axe.lang.Kernel` and the
schedules dispatch must choose for its operator calls, in order (``cases_schedules.py`` builds
them and refuses an artifact whose choice differs, so a GPU check always tests the schedule it
names).
"""

from tvm.script import tirx as T

import axe.lang as Ax
from axe.backends.cuda.schedules.ldmatrix import atom
from axe.layout import S, Swizzle, SwizzledLayout, tile, tx

F16, F32 = "float16", "float32"
SW128 = SwizzledLayout(S[(64, 64)], Swizzle(3, 3, 3))
#: 4 warps × 16 ldmatrix atoms over 64×64: warp w holds atom rows 2w, 2w+1
ATOMS = tile(S[(4, 2, 8):(1 @ tx, 8, 1)], (8, 8), atom("tx"), (8, 8))
#: 64×64 over 128 threads, 8 contiguous elements (16 bytes of fp16) per thread and pass
ROWS8 = S[(4, 16, 8, 8):(16, 8 @ tx, 1 @ tx, 1)]
#: a 1024-element row over 128 threads, 8 contiguous each
ROW1024 = S[(128, 8):(1 @ tx, 1)]
#: thread t holds row t of 128×16, and its reduction
ROW_PER_THREAD, ONE_PER_THREAD = S[(128, 16):(1 @ tx, 1)], S[128:1 @ tx]
#: 16×256 over 128 threads: a warp per row, 8 contiguous per lane, 4 rows per thread
WIDE = S[(4, 4, 32, 8):(32 @ tx, 8, 1 @ tx, 1)]


def tma_copy(swizzled: bool):
    """B = A (256×128 fp16) through a shared tile: TMA load on an mbarrier, TMA store."""
    rows, cols = (64, 64) if swizzled else (32, 128)
    layout = SW128 if swizzled else S[(rows, cols)]

    @Ax.kernel(name="sched_tma" + ("_swizzle" if swizzled else "_plain"))
    def k():
        @T.prim_func
        def k(A_: T.Buffer((256, 128), F16), B_: T.Buffer((256, 128), F16),
              A_map: T.handle("tensormap"), B_map: T.handle("tensormap")):
            (bx, by), tx_ = Ax.launch([128 // cols, 256 // rows], 128)
            A = Ax.param(A_, tensormap=A_map)
            B = Ax.param(B_, tensormap=B_map)
            bar = Ax.cuda.mbarrier(count=1)
            t = Ax.shared((rows, cols), F16, layout, name="t")
            Ax.copy(t, A[by * rows:(by + 1) * rows, bx * cols:(bx + 1) * cols], barrier=bar)
            Ax.cuda.mbarrier_wait(bar, 0)
            Ax.copy(B[by * rows:(by + 1) * rows, bx * cols:(bx + 1) * cols], t)
        return k
    return k


@Ax.kernel(name="sched_ldmatrix")
def ldmatrix():
    """B = A and C = A.T (64×64 fp16): A → shared (vector st.shared), ldmatrix.x4 and
    ldmatrix.x4.trans into atom-tiled registers, 4-byte global stores."""
    @T.prim_func
    def k(A_: T.Buffer((64, 64), F16), B_: T.Buffer((64, 64), F16), C_: T.Buffer((64, 64), F16)):
        bx, tx_ = Ax.launch(1, 128)
        A, B, C = Ax.param(A_), Ax.param(B_), Ax.param(C_)
        t = Ax.shared((64, 64), F16, SW128, name="t")
        Ax.copy(t, A, schedule="vector")
        Ax.sync()
        R = Ax.registers((64, 64), F16, ATOMS, name="R")
        Ax.copy(R, t)
        Ax.copy(B, R)
        Q = Ax.registers((64, 64), F16, ATOMS, name="Q")
        Ax.copy(Q, Ax.permute(t, (1, 0)))
        Ax.copy(C, Q)
    return k


@Ax.kernel(name="sched_stmatrix")
def stmatrix():
    """B = A and C = A (64×64 fp16) through shared tiles written by stmatrix.x4 (row-major,
    swizzled) and stmatrix.x4.trans (column-major); read back by vector and scalar copies."""
    @T.prim_func
    def k(A_: T.Buffer((64, 64), F16), B_: T.Buffer((64, 64), F16), C_: T.Buffer((64, 64), F16)):
        bx, tx_ = Ax.launch(1, 128)
        A, B, C = Ax.param(A_), Ax.param(B_), Ax.param(C_)
        R = Ax.registers((64, 64), F16, ATOMS, name="R")
        Ax.copy(R, A)
        t = Ax.shared((64, 64), F16, SW128, name="t")
        Ax.copy(t, R)
        c = Ax.shared((64, 64), F16, SwizzledLayout(S[(64, 64):(1, 64)], Swizzle(3, 3, 3)), name="c")
        Ax.copy(c, R)
        Ax.sync()
        Ax.copy(B, t)
        Ax.copy(C, c)
    return k


@Ax.kernel(name="sched_cp_async")
def cp_async():
    """B = A (128×64 fp16): cp.async.cg 16-byte global→shared (commit, wait_group 0), then
    shared→registers→global with 16-byte vectors."""
    @T.prim_func
    def k(A_: T.Buffer((128, 64), F16), B_: T.Buffer((128, 64), F16)):
        bx, tx_ = Ax.launch(2, 128)
        A, B = Ax.param(A_), Ax.param(B_)
        t = Ax.shared((64, 64), F16, S[(64, 64)], name="t")
        Ax.copy(t, A[bx * 64:(bx + 1) * 64, :])
        Ax.sync()
        R = Ax.registers((64, 64), F16, ROWS8, name="R")
        Ax.copy(R, t)
        Ax.copy(B[bx * 64:(bx + 1) * 64, :], R)
    return k


@Ax.kernel(name="sched_vector")
def vector():
    """B = A (64×64 fp16) global→registers→global (ld/st.global.v4) and C = A
    global→shared→global (vector ld.global/st.shared, ld.shared/st.global)."""
    @T.prim_func
    def k(A_: T.Buffer((64, 64), F16), B_: T.Buffer((64, 64), F16), C_: T.Buffer((64, 64), F16)):
        bx, tx_ = Ax.launch(1, 128)
        A, B, C = Ax.param(A_), Ax.param(B_), Ax.param(C_)
        R = Ax.registers((64, 64), F16, ROWS8, name="R")
        Ax.copy(R, A)
        Ax.copy(B, R)
        t = Ax.shared((64, 64), F16, S[(64, 64)], name="t")
        Ax.copy(t, A, schedule="vector")
        Ax.sync()
        Ax.copy(C, t)
    return k


@Ax.kernel(name="sched_per_thread")
def per_thread():
    """B = A (32×64 fp32) with a register layout whose per-thread run is strided on memory
    (vector declines): scalar owner-computes copies both ways."""
    @T.prim_func
    def k(A_: T.Buffer((32, 64), F32), B_: T.Buffer((32, 64), F32)):
        bx, tx_ = Ax.launch(1, 128)
        A, B = Ax.param(A_), Ax.param(B_)
        R = Ax.registers((32, 64), F32, "S[(4,8,2,32):(1@warp,2,1,1@lane)]", name="R")
        Ax.copy(R, A)
        Ax.copy(B, R)
    return k


def _reduce3(X, r, sums, maxs, mins, Ysum, Ymax, Ymin):
    Ax.copy(r, X)
    for dst, kind, out in ((sums, "sum", Ysum), (maxs, "max", Ymax), (mins, "min", Ymin)):
        Ax.reduce(dst, r, kind, dims=1)
        Ax.copy(out, dst)


@Ax.kernel(name="sched_reduce_warp")
def reduce_warp():
    """Row sums, maxima and minima of X (32×64 fp32): rows on warps × registers, columns on
    lanes × 2 registers, so each reduce is in-register partials + shfl.sync.bfly."""
    @T.prim_func
    def k(X_: T.Buffer((32, 64), F32), Ys_: T.Buffer((32, 1), F32), Yx_: T.Buffer((32, 1), F32),
          Yn_: T.Buffer((32, 1), F32)):
        bx, tx_ = Ax.launch(1, 128)
        r = Ax.registers((32, 64), F32, "S[(4,8,32,2):(1@warp,2,1@lane,1)]", name="r")
        out = [Ax.registers((32, 1), F32, "S[(4,8):(1@warp,1)]", name=n) for n in ("s", "x", "n")]
        _reduce3(Ax.param(X_), r, *out, Ax.param(Ys_), Ax.param(Yx_), Ax.param(Yn_))
    return k


@Ax.kernel(name="sched_reduce_cta")
def reduce_cta():
    """Row sums, maxima and minima of X (16×1024 fp32), one CTA per row: 8 contiguous
    elements per thread, shuffles within warps, one partial per warp through shared memory."""
    @T.prim_func
    def k(X_: T.Buffer((16, 1024), F32), Ys_: T.Buffer((16, 1), F32), Yx_: T.Buffer((16, 1), F32),
          Yn_: T.Buffer((16, 1), F32)):
        bx, tx_ = Ax.launch(16, 128)
        r = Ax.registers((1, 1024), F32, ROW1024, name="r")
        out = [Ax.registers((1, 1), F32, "S[1:1]", name=n) for n in ("s", "x", "n")]
        _reduce3(Ax.param(X_)[bx:bx + 1, :], r, *out, Ax.param(Ys_)[bx:bx + 1, :],
                 Ax.param(Yx_)[bx:bx + 1, :], Ax.param(Yn_)[bx:bx + 1, :])
    return k


@Ax.kernel(name="sched_reduce_thread")
def reduce_thread():
    """Row sums, maxima and minima of X (128×16 fp32): thread t holds row t, so each reduce
    stays in one thread's registers."""
    @T.prim_func
    def k(X_: T.Buffer((128, 16), F32), Ys_: T.Buffer((128, 1), F32), Yx_: T.Buffer((128, 1), F32),
          Yn_: T.Buffer((128, 1), F32)):
        bx, tx_ = Ax.launch(1, 128)
        r = Ax.registers((128, 16), F32, ROW_PER_THREAD, name="r")
        out = [Ax.registers((128, 1), F32, ONE_PER_THREAD, name=n) for n in ("s", "x", "n")]
        _reduce3(Ax.param(X_), r, *out, Ax.param(Ys_), Ax.param(Yx_), Ax.param(Yn_))
    return k


@Ax.kernel(name="sched_elementwise")
def elementwise():
    """From X, Y (16×256 fp16), in registers: U = exp(X) (unary), V = X + Y (binary),
    W = float(X) (cast), Z = float(X) * float(Y) + 1 (one fused pass)."""
    @T.prim_func
    def k(X_: T.Buffer((16, 256), F16), Y_: T.Buffer((16, 256), F16), U_: T.Buffer((16, 256), F16),
          V_: T.Buffer((16, 256), F16), W_: T.Buffer((16, 256), F32), Z_: T.Buffer((16, 256), F32)):
        bx, tx_ = Ax.launch(1, 128)
        x = Ax.registers((16, 256), F16, WIDE, name="x")
        y = Ax.registers((16, 256), F16, WIDE, name="y")
        u = Ax.registers((16, 256), F16, WIDE, name="u")
        v = Ax.registers((16, 256), F16, WIDE, name="v")
        w = Ax.registers((16, 256), F32, WIDE, name="w")
        z = Ax.registers((16, 256), F32, WIDE, name="z")
        Ax.copy(x, Ax.param(X_))
        Ax.copy(y, Ax.param(Y_))
        Ax.unary(u, x, "exp")
        Ax.binary(v, x, y, "add")
        Ax.cast(w, x)
        Ax.elementwise(z, lambda a, b: T.Cast(F32, a) * T.Cast(F32, b) + T.float32(1), x, y)
        Ax.copy(Ax.param(U_), u)
        Ax.copy(Ax.param(V_), v)
        Ax.copy(Ax.param(W_), w)
        Ax.copy(Ax.param(Z_), z)
    return k


KERNELS = {
    "sched_tma_swizzle": (tma_copy(True), ["tma", "tma_store"]),
    "sched_tma_plain": (tma_copy(False), ["tma", "tma_store"]),
    "sched_ldmatrix": (ldmatrix, ["vector", "ldmatrix", "vector", "ldmatrix", "vector"]),
    "sched_stmatrix": (stmatrix, ["vector", "stmatrix", "stmatrix", "vector", "per_thread"]),
    "sched_cp_async": (cp_async, ["cp_async", "vector", "vector"]),
    "sched_vector": (vector, ["vector"] * 4),
    "sched_per_thread": (per_thread, ["per_thread", "per_thread"]),
    "sched_reduce_warp": (reduce_warp, ["vector"] + ["warp_shuffle", "vector"] * 3),
    "sched_reduce_cta": (reduce_cta, ["vector"] + ["cta_smem", "per_thread"] * 3),
    "sched_reduce_thread": (reduce_thread, ["vector"] + ["in_thread", "per_thread"] * 3),
    "sched_elementwise": (elementwise, ["vector", "vector"] + ["per_thread"] * 4 + ["vector"] * 4),
}
