"""``B = A.T`` (fp16) as :func:`kernels.transpose.transpose`, with the shared tiles and the
registers inferred: TMA load, registers read from the transposed view, shared tile, TMA store."""

from tvm.script import tirx as T

import axe.lang as Ax
from kernels.transpose import inputs, reference

M, N, TILE, THREADS = 256, 512, 64, 128


@Ax.kernel(reference=reference, inputs=inputs, outputs=("B",), grid=(N // TILE, M // TILE), threads=THREADS)
def transpose():
    @T.prim_func
    def transpose(A_: T.Buffer((M, N), "float16"), B_: T.Buffer((N, M), "float16"),
                  A_map: T.handle("tensormap"), B_map: T.handle("tensormap")):
        (bx, by), tx = Ax.launch([N // TILE, M // TILE], THREADS)
        A = Ax.param(A_, tensormap=A_map)
        B = Ax.param(B_, tensormap=B_map)
        bar = Ax.cuda.mbarrier(count=1)
        tile = Ax.shared((TILE, TILE), "float16", Ax.INFER, name="tile")
        Ax.copy(tile, A[by * TILE:(by + 1) * TILE, bx * TILE:(bx + 1) * TILE], barrier=bar)
        Ax.cuda.mbarrier_wait(bar, 0)
        R = Ax.registers((TILE, TILE), "float16", name="R")
        Ax.copy(R, Ax.permute(tile, (1, 0)))
        out = Ax.shared((TILE, TILE), "float16", Ax.INFER, name="out")
        Ax.copy(out, R)
        Ax.copy(B[bx * TILE:(bx + 1) * TILE, by * TILE:(by + 1) * TILE], out)
    return transpose
