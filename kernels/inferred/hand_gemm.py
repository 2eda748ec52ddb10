"""The hand-written twin of :mod:`kernels.inferred.gemm`: ``C = A·Bᵀ`` (A M×K, B N×K fp16, C fp32),
one 64×128 tile of C per CTA, one warpgroup, a single-stage k-loop: TMA loads the 64×64 tiles of
A and B (K-major, 128-byte swizzle) on one mbarrier each, ``wgmma.m64n128k16`` accumulates into
the fp32 fragment, a CTA barrier frees the tiles for the next loads; the fragment is stored to C.

The layouts are written out here; the inferred twin declares none and gets these."""

from tvm.script import tirx as T

import axe.lang as Ax
from axe.layout import S, Swizzle, SwizzledLayout

M, N, K = 256, 512, 512           # the sizes of ``gemm``; ``make(m, n, k)`` builds others
BM, BN, BK, THREADS = 64, 128, 64, 128

#: the shared tiles: K-major rows of 64 fp16 (128 bytes) under TMA's 128-byte swizzle
SMEM_A = SwizzledLayout(S[(BM, BK)], Swizzle(3, 3, 3))
SMEM_B = SwizzledLayout(S[(BN, BK)], Swizzle(3, 3, 3))


def reference(A, B):
    return {"C": A.float() @ B.float().t()}


def inputs(device="cuda", m=M, n=N, k=K):
    import torch
    return {"A": torch.randn(m, k, dtype=torch.float16, device=device),
            "B": torch.randn(n, k, dtype=torch.float16, device=device),
            "C": torch.zeros(m, n, dtype=torch.float32, device=device)}


def k_step(A, B, As, Bs, acc, bars, m0, n0, kb, accumulate):
    """k-block kb: both tiles by TMA, wait for them, wgmma ``acc (+)= As·Bsᵀ``, then a barrier so
    that no warp's wgmma still reads the tiles when the next k-block's TMA overwrites them."""
    Ax.copy(As, A[m0:m0 + BM, kb * BK:(kb + 1) * BK], barrier=bars[0])
    Ax.copy(Bs, B[n0:n0 + BN, kb * BK:(kb + 1) * BK], barrier=bars[1])
    Ax.cuda.mbarrier_wait(bars, kb % 2, 0)
    Ax.cuda.mbarrier_wait(bars, kb % 2, 1)
    with Ax.warpgroups(0):
        Ax.gemm(acc, As, Ax.permute(Bs, (1, 0)), accumulate=accumulate)
    Ax.sync()


def tiled_gemm(tiles, name, m, n, k):
    """The ``m×n×k`` kernel around ``tiles()``, which declares ``(As, Bs, acc)``: the k-loop (the
    first k-block overwrites acc), then acc stored to C."""
    @Ax.kernel(name=name, reference=reference, inputs=lambda device="cuda": inputs(device, m, n, k),
               outputs=("C",), grid=(n // BN, m // BM), threads=THREADS)
    def kernel():
        @T.prim_func
        def gemm(A_: T.Buffer((m, k), "float16"), B_: T.Buffer((n, k), "float16"), C_: T.Buffer((m, n), "float32"),
                 A_map: T.handle("tensormap"), B_map: T.handle("tensormap")):
            (bx, by), tx = Ax.launch([n // BN, m // BM], THREADS)
            A = Ax.param(A_, tensormap=A_map)
            B = Ax.param(B_, tensormap=B_map)
            C = Ax.param(C_)
            bars = Ax.cuda.mbarrier(count=1, stages=2)
            As, Bs, acc = tiles()
            k_step(A, B, As, Bs, acc, bars, by * BM, bx * BN, 0, False)
            for kb in T.serial(1, k // BK):
                k_step(A, B, As, Bs, acc, bars, by * BM, bx * BN, kb, True)
            Ax.copy(C[by * BM:(by + 1) * BM, bx * BN:(bx + 1) * BN], acc)
        return gemm
    return kernel


def _tiles():
    return (Ax.shared((BM, BK), "float16", SMEM_A, name="As"), Ax.shared((BN, BK), "float16", SMEM_B, name="Bs"),
            Ax.registers((BM, BN), "float32", Ax.cuda.wgmma_fragment(BN, "tx"), name="acc"))


def make(m, n, k):
    """The hand-written kernel at ``m×n×k`` (multiples of the 64×128×64 tile)."""
    return tiled_gemm(_tiles, "gemm", m, n, k)


gemm = make(M, N, K)
