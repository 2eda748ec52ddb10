"""One 64×128×64 tile ``C = A·Bᵀ`` through wgmma's register-A form, every tile inferred: the hand
twin is ``tests/gpu/_kernels_gemm_ops.wgmma_tile(a_regs=True)``.  wgmma fixes the accumulator,
register A (its A fragment) and B; ldmatrix then gives As the rows it reads (TMA's 128-byte
swizzle, which the TMA load also writes)."""

from tvm.script import tirx as T

import axe.lang as Ax

M, N, K = 64, 128, 64


@Ax.kernel()
def gemm_rs():
    @T.prim_func
    def gemm_rs(A_: T.Buffer((M, K), "float16"), B_: T.Buffer((N, K), "float16"), C_: T.Buffer((M, N), "float32"),
                A_map: T.handle("tensormap"), B_map: T.handle("tensormap")):
        _bx, _tx = Ax.launch(1, 128)
        A = Ax.param(A_, tensormap=A_map)
        B = Ax.param(B_, tensormap=B_map)
        C = Ax.param(C_)
        bars = Ax.cuda.mbarrier(count=1, stages=2)
        As = Ax.shared((M, K), "float16", Ax.INFER, name="As")
        Bs = Ax.shared((N, K), "float16", Ax.INFER, name="Bs")
        Ax.copy(As, A, barrier=bars[0])
        Ax.copy(Bs, B, barrier=bars[1])
        Ax.cuda.mbarrier_wait(bars, 0, 0)
        Ax.cuda.mbarrier_wait(bars, 0, 1)
        with Ax.warpgroups(0):
            acc = Ax.registers((M, N), "float32", name="acc")
            Ar = Ax.registers((M, K), "float16", name="Ar")
            Ax.copy(Ar, As)
            Ax.gemm(acc, Ar, Ax.permute(Bs, (1, 0)), accumulate=False)
            Ax.copy(C, acc)
    return gemm_rs
