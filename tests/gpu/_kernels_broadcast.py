"""The rotary-style kernels of ``cases_broadcast.py`` (build side: imports TVM)."""

from tvm.script import tirx as T

import axe.lang as Ax
from cases_broadcast import HALF, HEADS, TOKENS


def rope_kernel(name, x_layout, cs_layout, cs_shape, g_layout):
    """``(X: (TOKENS·HEADS, 2·HALF), C: (TOKENS, HALF), Sn: (TOKENS, HALF), G: (TOKENS·HEADS, 1)) -> Y``
    (X's shape), grid TOKENS, 256 threads: token bx's heads rotated by its cos/sin row held as
    ``cs_layout`` over ``cs_shape`` (which broadcasts to (HEADS, HALF)) and scaled by each head's
    gain (a (HEADS, 1) column held as ``g_layout``); a layout None is inferred."""
    f32 = "float32"

    def body(X_, C_, Sn_, G_, Y_, bx):
        X, C, Sn, G, Y = Ax.param(X_), Ax.param(C_), Ax.param(Sn_), Ax.param(G_), Ax.param(Y_)
        r0 = bx * HEADS
        x1 = Ax.registers((HEADS, HALF), f32, x_layout, name="x1")
        x2 = Ax.registers((HEADS, HALF), f32, x_layout, name="x2")
        c = Ax.registers(cs_shape, f32, cs_layout, name="cos")
        s = Ax.registers(cs_shape, f32, cs_layout, name="sin")
        g = Ax.registers((HEADS, 1), f32, g_layout, name="gain")
        Ax.copy(x1, X[r0:r0 + HEADS, 0:HALF])
        Ax.copy(x2, X[r0:r0 + HEADS, HALF:2 * HALF])
        Ax.copy(c, C[bx:bx + 1, 0:HALF])
        Ax.copy(s, Sn[bx:bx + 1, 0:HALF])
        Ax.copy(g, G[r0:r0 + HEADS, 0:1])
        y1 = Ax.registers((HEADS, HALF), f32, x_layout, name="y1")
        y2 = Ax.registers((HEADS, HALF), f32, x_layout, name="y2")
        Ax.elementwise(y1, lambda a, b, co, si, ga: (a * co - b * si) * ga, x1, x2, c, s, g)
        Ax.elementwise(y2, lambda a, b, co, si, ga: (b * co + a * si) * ga, x1, x2, c, s, g)
        Ax.copy(Y[r0:r0 + HEADS, 0:HALF], y1)
        Ax.copy(Y[r0:r0 + HEADS, HALF:2 * HALF], y2)

    @Ax.kernel(name=name, outputs=("Y",))
    def k():
        @T.prim_func
        def k(X_: T.Buffer((TOKENS * HEADS, 2 * HALF), f32), C_: T.Buffer((TOKENS, HALF), f32),
              Sn_: T.Buffer((TOKENS, HALF), f32), G_: T.Buffer((TOKENS * HEADS, 1), f32),
              Y_: T.Buffer((TOKENS * HEADS, 2 * HALF), f32)):
            bx, _ = Ax.launch([TOKENS], 256)
            body(X_, C_, Sn_, G_, Y_, bx)
        return k
    return k
