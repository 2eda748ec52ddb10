"""Single-tile Blackwell (sm_100a) kernels for the tcgen05 schedules (imports TVM: build side only).

- ``tcgen05_tile(N, K, b_major, sw, a_tmem)``: one CTA of 128 threads: TMA loads A (128×K) and B
  into ``sw``-byte-swizzled shared tiles; C (128×N fp32) is allocated in tensor memory; one
  elected thread of warp 0 runs ``Ax.gemm`` (tcgen05.mma, completion committed to an mbarrier);
  the warpgroup reads C with ``Ax.copy`` (tcgen05.ld, one row per thread) and stores it.
  ``b_major="K"`` passes the transposed view of an N×K tile; ``a_tmem``: A is first copied from
  shared into TMEM (tcgen05.cp) and the MMA reads it there (ts form).
  (The cta_group::2 pair kernel is the GEMM of kernels/gemm.py with cluster=2 on sm_100a.)
"""

from tvm.script import tirx as T

import axe.lang as Ax
from axe.layout import S

from _kernels_gemm_ops import tile_setup, tma_tiles


def tcgen05_tile(N=128, K=64, b_major="K", sw=128, a_tmem=False, dtype="float16", name=None):
    from axe.layout.coord import tx as TX
    M = 128
    rows = S[(M, N):(1 @ TX, 1)]
    bshape = (N, K) if b_major == "K" else (K, N)

    @Ax.kernel(name=name or f"tcgen05_{'ts' if a_tmem else 'ss'}_b{b_major.lower()}_sw{sw}")
    def k():
        @T.prim_func
        def k(A_: T.Buffer((M, K), dtype), B_: T.Buffer(bshape, dtype), C_: T.Buffer((M, N), "float32"),
              A_map: T.handle("tensormap"), B_map: T.handle("tensormap")):
            bx, tx = Ax.launch(1, 128)
            A, B, Cg, bars, As, Bs = tile_setup(A_, B_, C_, A_map, B_map, M, K, bshape, dtype, sw, 3)
            acc = Ax.cuda.tmem((M, N), "float32", name="acc", last=False)
            At = Ax.cuda.tmem((M, K), dtype, name="At")      # unused unless a_tmem
            tma_tiles(As, A, Bs, B, bars)
            with Ax.warps(0, 1):
                with Ax.cuda.elect_one():
                    Bv = Ax.permute(Bs, (1, 0)) if b_major == "K" else Bs
                    if a_tmem:
                        Ax.copy(At, As)
                        Ax.gemm(acc, At, Bv, accumulate=False, barrier=bars[2])
                    else:
                        Ax.gemm(acc, As, Bv, accumulate=False, barrier=bars[2])
            Ax.cuda.mbarrier_wait(bars, 0, 2)
            with Ax.warpgroups(0):
                R = Ax.registers((M, N), "float32", rows, name="R")
                Ax.copy(R, acc)
                Ax.copy(Cg, R)
            Ax.cuda.tmem_free(At)
            Ax.cuda.tmem_free(acc)
        return k
    return k
