"""Single-tile GEMM kernels for the gemm schedules' GPU checks (imports TVM: build side only).

- ``wgmma_tile(b_major, K, N, a_regs)``: one CTA, one warpgroup: TMA loads A (64×K) and B into
  128-byte-swizzled shared tiles, ``Ax.gemm`` runs wgmma, C (64×N fp32) is stored from the D
  fragment.  ``b_major="K"`` takes B as its transpose Bt (N×K, K contiguous) and passes the
  transposed view; ``"MN"`` takes B (K×N, N contiguous) as is.  ``a_regs``: A is first copied
  into the register A fragment (rs form).
- ``mma_tile()``: one warp, 16×8×16: A and B to shared (vector copies), ldmatrix into the mma
  fragments (B through its transposed view), ``Ax.gemm`` runs mma.sync, C stored from registers.
"""

from tvm.script import tirx as T

import axe.lang as Ax
from axe.layout import S, Swizzle, SwizzledLayout

SW128 = Swizzle(3, 3, 3)


def swizzled_rows(rows, cols, sw=128):
    """A rows×cols 16-bit tile as TMA writes it with ``sw``-byte swizzle: boxes of sw/2 columns
    side by side (``sw=0``: boxes of 8 columns, i.e. unswizzled 8×16-byte core matrices)."""
    w = (sw or 16) // 2
    L = S[(rows, w)] if cols == w else S[(rows, cols // w, w):(w, rows * w, 1)]
    return SwizzledLayout(L, Swizzle(sw.bit_length() - 5, 3, 3)) if sw else L


def tile_setup(A_, B_, C_, A_map, B_map, M, K, bshape, dtype, sw, stages):
    """The single-tile kernels' common start (inside the prim_func, after ``Ax.launch``): the
    parameters (A and B through tensor maps), ``stages`` mbarriers and the ``sw``-swizzled shared
    tiles As (M×K) and Bs (``bshape``).  Returns ``(A, B, Cg, bars, As, Bs)``."""
    A = Ax.param(A_, tensormap=A_map)
    B = Ax.param(B_, tensormap=B_map)
    Cg = Ax.param(C_)
    bars = Ax.cuda.mbarrier(count=1, stages=stages)
    As = Ax.shared((M, K), dtype, swizzled_rows(M, K, sw), name="As")
    Bs = Ax.shared(bshape, dtype, swizzled_rows(*bshape, sw), name="Bs")
    return A, B, Cg, bars, As, Bs


def tma_tiles(As, A, Bs, B, bars):
    """TMA loads of A and B into As and Bs on barriers 0 and 1, and the waits for both."""
    Ax.copy(As, A, barrier=bars[0])
    Ax.copy(Bs, B, barrier=bars[1])
    Ax.cuda.mbarrier_wait(bars, 0, 0)
    Ax.cuda.mbarrier_wait(bars, 0, 1)


def wgmma_tile(b_major="K", K=64, N=128, a_regs=False, dtype="float16", sw=128, name=None):
    from axe.backends.cuda.schedules.wgmma import a_fragment, d_fragment
    from axe.layout import tile
    M = 64
    bshape = (N, K) if b_major == "K" else (K, N)

    @Ax.kernel(name=name or f"wgmma_{'rs' if a_regs else 'ss'}_b{b_major.lower()}")
    def k():
        @T.prim_func
        def k(A_: T.Buffer((M, K), dtype), B_: T.Buffer(bshape, dtype), C_: T.Buffer((M, N), "float32"),
              A_map: T.handle("tensormap"), B_map: T.handle("tensormap")):
            bx, tx = Ax.launch(1, 128)
            A, B, Cg, bars, As, Bs = tile_setup(A_, B_, C_, A_map, B_map, M, K, bshape, dtype, sw, 2)
            if sw != 0:
                tma_tiles(As, A, Bs, B, bars)
            else:
                # core-matrix tiles are not TMA boxes: ordinary copies, then the proxy fence
                Ax.copy(As, A)
                Ax.copy(Bs, B)
                T.evaluate(T.ptx.fence.proxy.async_.shared__cta())
                Ax.sync()
            with Ax.warpgroups(0):
                acc = Ax.registers((M, N), "float32", d_fragment(N, "tx"), name="acc")
                Bv = Ax.permute(Bs, (1, 0)) if b_major == "K" else Bs
                if a_regs:
                    Ar = Ax.registers((M, K), dtype, tile(S[K // 16:1], (1, K // 16), a_fragment("tx"), (64, 16)),
                                      name="Ar")
                    Ax.copy(Ar, As)
                    Ax.gemm(acc, Ar, Bv, accumulate=False)
                else:
                    Ax.gemm(acc, As, Bv, accumulate=False)
                Ax.copy(Cg, acc)
        return k
    return k


def mma_tile(dtype="float16"):
    from axe.backends.cuda.schedules.mma import a_fragment, b_fragment, c_fragment

    @Ax.kernel(name="mma_sync_tile")
    def k():
        @T.prim_func
        def k(A_: T.Buffer((16, 16), dtype), B_: T.Buffer((16, 8), dtype), C_: T.Buffer((16, 8), "float32")):
            bx, tx = Ax.launch(1, 32)
            A = Ax.param(A_)
            B = Ax.param(B_)
            Cg = Ax.param(C_)
            As = Ax.shared((16, 16), dtype, name="As")
            Bs = Ax.shared((16, 8), dtype, name="Bs")
            Ax.copy(As, A)
            Ax.copy(Bs, B)
            Ax.sync()
            with Ax.warps(0, 1):
                Ar = Ax.registers((16, 16), dtype, a_fragment(), name="Ar")
                Br = Ax.registers((16, 8), dtype, b_fragment(), name="Br")
                acc = Ax.registers((16, 8), "float32", c_fragment(), name="acc")
                Ax.copy(Ar, As)
                Ax.copy(Ax.permute(Br, (1, 0)), Ax.permute(Bs, (1, 0)))
                Ax.gemm(acc, Ar, Br, accumulate=False)
                Ax.copy(Cg, acc)
        return k
    return k
