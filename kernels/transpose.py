"""Tiled transpose in axe: TMA loads a 64×64 tile into a 128-byte-swizzled shared tile, the CTA
reads it transposed into registers and stores it with 16-byte coalesced vectors.

``transpose_ldmatrix`` reads the transposed view with ``ldmatrix.x4.trans`` instead: its
register layout is a tiling of the 8×8 ldmatrix atom (each thread then holds 2 contiguous
elements of a row, so the global store is 4-byte vectors).

``B = A.T`` for A of shape (M, N), fp16.
"""

from tvm.script import tirx as T

import axe.lang as Ax
from axe.layout import S, Swizzle, SwizzledLayout

M, N, TILE, THREADS = 256, 512, 64, 128

#: the shared tile: row-major 64×64 fp16 under TMA's 128-byte swizzle
SMEM = SwizzledLayout(S[(TILE, TILE)], Swizzle(3, 3, 3))
#: registers: 16 rows × 8 chunks of 8 contiguous elements per pass, 4 passes (8 KiB / 128 threads)


def _regs():
    from axe.layout import tx
    return S[(4, 16, 8, 8):(8, 8 @ tx, 1 @ tx, 1)]


def _atom_regs():
    """``S[(4,2,8):(1@tx,8,1)] ⊗ atom``: warp w holds atom rows 2w, 2w+1, all 8 atom columns."""
    from axe.backends.cuda.schedules.ldmatrix import atom
    from axe.layout import tile, tx
    return tile(S[(4, 2, 8):(1 @ tx, 8, 1)], (8, 8), atom("tx"), (8, 8))


def reference(A):
    return {"B": A.t().contiguous()}


def inputs(device="cuda"):
    import torch
    return {"A": torch.randn(M, N, dtype=torch.float16, device=device),
            "B": torch.zeros(N, M, dtype=torch.float16, device=device)}


def _transpose(regs):
    @T.prim_func
    def transpose(A_: T.Buffer((M, N), "float16"), B_: T.Buffer((N, M), "float16"),
                  A_map: T.handle("tensormap")):
        (bx, by), tx = Ax.launch([N // TILE, M // TILE], THREADS)
        A = Ax.param(A_, tensormap=A_map)
        B = Ax.param(B_)
        bar = Ax.mbarrier(count=1)
        tile = Ax.shared((TILE, TILE), "float16", SMEM, name="tile")
        Ax.copy(tile, A[by * TILE:(by + 1) * TILE, bx * TILE:(bx + 1) * TILE], barrier=bar)
        Ax.mbarrier_wait(bar, 0)
        R = Ax.registers((TILE, TILE), "float16", regs, name="R")
        Ax.copy(R, Ax.permute(tile, (1, 0)))
        Ax.copy(B[bx * TILE:(bx + 1) * TILE, by * TILE:(by + 1) * TILE], R)
    return transpose


@Ax.kernel(reference=reference, inputs=inputs, outputs=("B",), grid=(N // TILE, M // TILE), threads=THREADS)
def transpose():
    return _transpose(_regs())


@Ax.kernel(reference=reference, inputs=inputs, outputs=("B",), grid=(N // TILE, M // TILE), threads=THREADS)
def transpose_ldmatrix():
    return _transpose(_atom_regs())
