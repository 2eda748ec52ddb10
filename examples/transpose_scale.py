"""Tiled transpose and scale through shared memory and TMA: ``B = alpha * A^T``.

A is M x N float16 (row-major), B is N x M float16, alpha a float32 run-time scalar. One CTA of
128 threads per 64 x 64 tile:

1. TMA loads A's tile into shared memory under the 128-byte swizzle (``Ax.copy(..., barrier=bar)``,
   ``Ax.cuda.mbarrier_wait``; docs/language.md section 7);
2. ``ldmatrix.x4.trans`` reads it transposed into registers laid out as a tiling of the 8x8
   ldmatrix atom (``regs()``); a register tile without that layout gets a scalar shared read;
3. the registers are scaled in float32 and written back with ``stmatrix.x4`` into a second
   swizzled tile;
4. a TMA store writes that tile to B's transposed position (the store's schedule fences the
   shared writes and syncs the CTA before its one thread issues it).

Build and inspect::

    export CUDA_PATH=/usr/local/cuda
    axe build examples/transpose_scale.py --target sm_90a -o build/examples
    axe explain examples/transpose_scale.py --target sm_90a
    python examples/transpose_scale.py      # builds, prints the tensor maps and the PTX it promises
"""
import torch
from tvm.script import tirx as T

import axe.lang as Ax
from axe.layout import S, Swizzle, SwizzledLayout, tile, tx

M, N, TILE = 4096, 2048, 64
SMEM = SwizzledLayout(S[(TILE, TILE)], Swizzle(3, 3, 3))       # what TMA writes and ldmatrix reads


def regs():
    """The register tile as a tiling of ldmatrix's 8x8 b16 atom (S[(8,4,2):(4@tx,1@tx,1)], one matrix
    over a warp's 32 lanes): 4 warps x 2 x 8 atoms cover 64 x 64, warp w holding rows 16w .. 16w+15.
    A helper, because Ax.cuda.ldmatrix_atom exists only while a kernel is parsed."""
    return tile(S[(4, 2, 8):(1 @ tx, 8, 1)], (TILE // 8, TILE // 8), Ax.cuda.ldmatrix_atom("tx"), (8, 8))


def reference(A, alpha):
    return {"B": (A.float().T * alpha).to(torch.float16).contiguous()}


def inputs(device="cuda"):
    return {"A": torch.randn(M, N, dtype=torch.float16, device=device),
            "B": torch.empty(N, M, dtype=torch.float16, device=device), "alpha": 0.5}


@Ax.kernel(outputs=("B",), reference=reference, inputs=inputs)
def transpose_scale():
    @T.prim_func
    def transpose_scale(A_: T.Buffer((M, N), "float16"), B_: T.Buffer((N, M), "float16"),
                        alpha: T.float32,
                        A_map: T.handle("tensormap"), B_map: T.handle("tensormap")):
        (bx, by), _ = Ax.launch([N // TILE, M // TILE], 128)
        A = Ax.param(A_, tensormap=A_map)                      # both reached by TMA
        B = Ax.param(B_, tensormap=B_map)
        bar = Ax.cuda.mbarrier(count=1)
        t = Ax.shared((TILE, TILE), "float16", SMEM, name="t")
        Ax.copy(t, A[by * TILE:(by + 1) * TILE, bx * TILE:(bx + 1) * TILE], barrier=bar)   # TMA load
        Ax.cuda.mbarrier_wait(bar, 0)
        r = Ax.registers((TILE, TILE), "float16", regs(), name="r")
        Ax.copy(r, Ax.permute(t, (1, 0)))                      # ldmatrix.x4.trans
        Ax.elementwise(r, lambda v: T.Cast("float16", T.Cast("float32", v) * alpha), r)
        o = Ax.shared((TILE, TILE), "float16", SMEM, name="o")
        Ax.copy(o, r)                                          # stmatrix.x4
        Ax.copy(B[bx * TILE:(bx + 1) * TILE, by * TILE:(by + 1) * TILE], o)               # TMA store
    return transpose_scale


#: what the PTX must hold: the TMA load and store, the barrier wait, ldmatrix.trans and stmatrix
PTX = ("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes",
       "cp.async.bulk.tensor.2d.global.shared::cta", "mbarrier.try_wait.parity",
       "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", "stmatrix.sync.aligned.m8n8.x4.shared.b16",
       "fence.proxy.async.shared::cta")

if __name__ == "__main__":
    art = Ax.compile_kernel(transpose_scale, "sm_90a")
    print(art.launch["grid"], art.launch["block"], [(m["param"], m["box"], m["swizzle"]) for m in art.launch["tensormaps"]])
    for needle in PTX:
        print(f"{art.ptx.count(needle):3d}  {needle}")
        assert needle in art.ptx
