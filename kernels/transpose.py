"""Tiled transpose in axe, ``B = A.T`` for A of shape (M, N), fp16, one 64×64 tile per CTA.

``transpose`` (the main kernel) keeps every access 16 bytes wide and conflict-free: TMA loads
the tile of A into a 128-byte-swizzled shared tile; ``ldmatrix.x4.trans`` reads its transposed
view into registers laid out as a tiling of the 8×8 ldmatrix atom; ``stmatrix.x4`` writes those
registers, untransposed, into a second swizzled tile, which a TMA store writes to B.  Shared
traffic is 16-byte rows of 8 distinct swizzle chunks per phase; global traffic is TMA only.

``transpose_one_tile`` does the same in one shared tile (a barrier between the reads and
the writes).  ``transpose_vector`` reads the transposed view with scalar (2-byte, 8-way bank-conflicted)
shared loads into 8-contiguous-element registers and stores 16-byte vectors;
``transpose_ldmatrix`` reads it with ``ldmatrix.x4.trans`` and stores the atom's 2 contiguous
elements per thread (4-byte global stores).  Both are kept to compare schedules.
"""

from tvm.script import tirx as T

import axe.lang as Ax
from axe.layout import S, Swizzle, SwizzledLayout

M, N, TILE, THREADS = 256, 512, 64, 128

#: the shared tiles: row-major 64×64 fp16 under TMA's 128-byte swizzle
SMEM = SwizzledLayout(S[(TILE, TILE)], Swizzle(3, 3, 3))


def _regs():
    """16 rows × 8 chunks of 8 contiguous elements per pass, 4 passes (8 KiB / 128 threads)."""
    from axe.layout import tx
    return S[(4, 16, 8, 8):(8, 8 @ tx, 1 @ tx, 1)]


def _atom_regs():
    """``S[(4,2,8):(1@tx,8,1)] ⊗ atom``: warp w holds atom rows 2w, 2w+1, all 8 atom columns."""
    from axe.layout import tile, tx
    return tile(S[(4, 2, 8):(1 @ tx, 8, 1)], (8, 8), Ax.cuda.ldmatrix_atom("tx"), (8, 8))


def reference(A):
    return {"B": A.t().contiguous()}


def inputs(device="cuda"):
    import torch
    return {"A": torch.randn(M, N, dtype=torch.float16, device=device),
            "B": torch.zeros(N, M, dtype=torch.float16, device=device)}


def _transpose_to_registers(regs):
    """Load a tile, read it transposed into registers ``regs``, store the registers to B."""
    @T.prim_func
    def transpose(A_: T.Buffer((M, N), "float16"), B_: T.Buffer((N, M), "float16"),
                  A_map: T.handle("tensormap")):
        (bx, by), tx = Ax.launch([N // TILE, M // TILE], THREADS)
        A = Ax.param(A_, tensormap=A_map)
        B = Ax.param(B_)
        bar = Ax.cuda.mbarrier(count=1)
        tile = Ax.shared((TILE, TILE), "float16", SMEM, name="tile")
        Ax.copy(tile, A[by * TILE:(by + 1) * TILE, bx * TILE:(bx + 1) * TILE], barrier=bar)
        Ax.cuda.mbarrier_wait(bar, 0)
        R = Ax.registers((TILE, TILE), "float16", regs, name="R")
        Ax.copy(R, Ax.permute(tile, (1, 0)))
        Ax.copy(B[bx * TILE:(bx + 1) * TILE, by * TILE:(by + 1) * TILE], R)
    return transpose


_KERNEL = dict(reference=reference, inputs=inputs, outputs=("B",), grid=(N // TILE, M // TILE), threads=THREADS)


def _wide(k):
    """A (64, 64k) tile of A: k 128-byte-swizzled 64×64 TMA atoms side by side."""
    return SMEM if k == 1 else SwizzledLayout(S[(TILE, k, TILE):(TILE, TILE * TILE, 1)], Swizzle(3, 3, 3))


def _transpose_through_tma(one_tile: bool, k: int = 1):
    """TMA load of a 64×64k tile, ldmatrix.trans, stmatrix into ``out`` (or back into ``tile``),
    TMA store of the 64k×64 tile of B."""
    W = TILE * k
    regs = _atom_regs() if k == 1 else _wide_atom_regs(k)

    @T.prim_func
    def transpose(A_: T.Buffer((M, N), "float16"), B_: T.Buffer((N, M), "float16"),
                  A_map: T.handle("tensormap"), B_map: T.handle("tensormap")):
        (bx, by), tx = Ax.launch([N // W, M // TILE], THREADS)
        A = Ax.param(A_, tensormap=A_map)
        B = Ax.param(B_, tensormap=B_map)
        bar = Ax.cuda.mbarrier(count=1)
        tile = Ax.shared((TILE, W), "float16", _wide(k), name="tile")
        Ax.copy(tile, A[by * TILE:(by + 1) * TILE, bx * W:(bx + 1) * W], barrier=bar)
        Ax.cuda.mbarrier_wait(bar, 0)
        R = Ax.registers((W, TILE), "float16", regs, name="R")
        Ax.copy(R, Ax.permute(tile, (1, 0)))
        if one_tile:
            Ax.sync()
            Ax.copy(tile, R)
            Ax.copy(B[bx * TILE:(bx + 1) * TILE, by * TILE:(by + 1) * TILE], tile)
        else:
            out = Ax.shared((W, TILE), "float16", SwizzledLayout(S[(W, TILE)], Swizzle(3, 3, 3)), name="out")
            Ax.copy(out, R)
            Ax.copy(B[bx * W:(bx + 1) * W, by * TILE:(by + 1) * TILE], out)
    return transpose


def _wide_atom_regs(k):
    """``S[(4,2k,8):(1@tx,8,1)] ⊗ atom`` over (64k, 64): warp w holds atom rows 2kw … 2kw+2k-1."""
    from axe.layout import tile, tx
    return tile(S[(4, 2 * k, 8):(1 @ tx, 8, 1)], (8 * k, 8), Ax.cuda.ldmatrix_atom("tx"), (8, 8))


@Ax.kernel(**_KERNEL)
def transpose():
    return _transpose_through_tma(one_tile=False)


@Ax.kernel(**_KERNEL)
def transpose_one_tile():
    """As ``transpose`` with one shared tile (8 KiB per CTA instead of 16): the registers go
    back into the tile they came from once every warp has read it."""
    return _transpose_through_tma(one_tile=True)


@Ax.kernel(reference=reference, inputs=inputs, outputs=("B",), grid=(N // (2 * TILE), M // TILE), threads=THREADS)
def transpose_wide():
    """As ``transpose`` with a 64×128 tile per CTA (two TMA atoms in, one 128×64 box out):
    twice the bytes in flight per CTA, half the CTAs."""
    return _transpose_through_tma(one_tile=False, k=2)


@Ax.kernel(**_KERNEL)
def transpose_vector():
    return _transpose_to_registers(_regs())


@Ax.kernel(**_KERNEL)
def transpose_ldmatrix():
    return _transpose_to_registers(_atom_regs())
