"""Row-wise softmax in axe: ``y = exp(x - max(x)) / sum(exp(x - max(x)))``, one CTA per row.

Each of 128 threads holds 8 contiguous fp16 of a 1024-wide row (16-byte loads); the CTA takes
the row maximum (warp shuffles + shared memory), one fused pass computes ``exp(x - max)`` in
fp32, the CTA sums it, and a second fused pass scales by the reciprocal and casts back to fp16
for 16-byte stores.
"""

from tvm.script import tirx as T

import axe.lang as Ax
from axe.layout import S, tx

ROWS, N, THREADS = 256, 1024, 128
ROW = S[(THREADS, N // THREADS):(1 @ tx, 1)]      # over shape (1, N)
ONE = S[1:1]


def reference(X):
    import torch
    return {"Y": torch.softmax(X.float(), dim=-1).half()}


def inputs(device="cuda"):
    import torch
    return {"X": torch.randn(ROWS, N, dtype=torch.float16, device=device),
            "Y": torch.zeros(ROWS, N, dtype=torch.float16, device=device)}


@Ax.kernel(reference=reference, inputs=inputs, outputs=("Y",), grid=(ROWS,), threads=THREADS)
def softmax():
    @T.prim_func
    def softmax(X_: T.Buffer((ROWS, N), "float16"), Y_: T.Buffer((ROWS, N), "float16")):
        bx, tx_ = Ax.launch(ROWS, THREADS)
        X = Ax.param(X_)
        Y = Ax.param(Y_)
        x = Ax.registers((1, N), "float16", ROW, name="x")
        xf = Ax.registers((1, N), "float32", ROW, name="xf")
        e = Ax.registers((1, N), "float32", ROW, name="e")
        mx = Ax.registers((1, 1), "float32", ONE, name="mx")
        sm = Ax.registers((1, 1), "float32", ONE, name="sm")
        Ax.copy(x, X[bx:bx + 1, :])
        Ax.cast(xf, x)
        Ax.reduce(mx, xf, "max", dims=1)
        Ax.elementwise(e, lambda v, m: T.exp(v - m), xf, mx)
        Ax.reduce(sm, e, "sum", dims=1)
        Ax.elementwise(x, lambda v, s: T.Cast("float16", v * (T.float32(1) / s)), e, sm)
        Ax.copy(Y[bx:bx + 1, :], x)
    return softmax
