"""Row-wise softmax in axe: ``y = exp(x - max(x)) / sum(exp(x - max(x)))``, one CTA per row.

Each of 128 threads holds 8 contiguous fp16 of a 1024-wide row (16-byte loads); the CTA takes
the row maximum (warp shuffles + shared memory), one fused pass computes ``exp(x - max)`` in
fp32, the CTA sums it, and a second fused pass scales by the reciprocal and casts back to fp16
for 16-byte stores.

Two builds share the row's body (:func:`_softmax_row`): ``softmax`` (module level, the static
``ROWS x N`` fp16 example that ``axe demo`` and ``tests/test_kernels.py`` build) and
:func:`dynamic` ``(n, dtype)``, one artifact for every number of rows ``M`` (grid ``M``),
which ``axe.torch.ops.softmax`` calls.

The static ``softmax`` is one source for sm_90a, sm_100a and trn1: what differs per target is
in :data:`TARGETS` — rows per step, where the on-chip tiles live and their layouts (registers
spread over 128 threads on a GPU; a 128-partition SBUF tile on trn1) — and the entry (a CTA per
row on a GPU, a loop over 128-row blocks on the one NeuronCore).
"""

from tvm.script import tirx as T

import axe.lang as Ax
from kernels.rmsnorm import row_layout, row_params
from axe.layout import S, tx

ROWS, N, THREADS = 256, 1024, 128
ROW = S[(THREADS, N // THREADS):(1 @ tx, 1)]      # over shape (1, N)
ONE = S[1:1]

#: per target family: rows per step, the on-chip tile allocator and the layouts of a row tile and
#: of a per-row scalar (None: the allocator's plain tile, rows on the partitions)
TARGETS = {
    "cuda": dict(rows=1, tile=Ax.registers, row=ROW, one=ONE),
    "neuron": dict(rows=128, tile=Ax.neuron.sbuf, row=None, one=None),
}


def reference(X):
    import torch
    return {"Y": torch.softmax(X.float(), dim=-1).half()}


def inputs(device="cuda"):
    import torch
    return {"X": torch.randn(ROWS, N, dtype=torch.float16, device=device),
            "Y": torch.zeros(ROWS, N, dtype=torch.float16, device=device)}


def _softmax_row(X, Y, row, n, dtype, layout, rows=1, tile=Ax.registers, one=ONE):
    """Softmax of rows ``[row, row + rows)`` of ``X`` into ``Y`` (tiles from ``tile``)."""
    x = tile((rows, n), dtype, layout, name="x")
    xf = tile((rows, n), "float32", layout, name="xf")
    e = tile((rows, n), "float32", layout, name="e")
    mx = tile((rows, 1), "float32", one, name="mx")
    sm = tile((rows, 1), "float32", one, name="sm")
    Ax.copy(x, X[row:row + rows, :])
    Ax.cast(xf, x)
    Ax.reduce(mx, xf, "max", dims=1)
    Ax.elementwise(e, lambda v, m: T.exp(v - m), xf, mx)
    Ax.reduce(sm, e, "sum", dims=1)
    Ax.elementwise(x, lambda v, s: T.Cast(dtype, v * (T.float32(1) / s)), e, sm)
    Ax.copy(Y[row:row + rows, :], x)


def _trn1():
    cfg = TARGETS["neuron"]

    @T.prim_func
    def softmax(X_: T.Buffer((ROWS, N), "float16"), Y_: T.Buffer((ROWS, N), "float16")):
        Ax.neuron.core()
        X = Ax.param(X_)
        Y = Ax.param(Y_)
        for r in T.parallel(ROWS // cfg["rows"]):
            _softmax_row(X, Y, r * cfg["rows"], N, "float16", cfg["row"], cfg["rows"], cfg["tile"], cfg["one"])
    return softmax


@Ax.kernel(reference=reference, inputs=inputs, outputs=("Y",), grid=(ROWS,), threads=THREADS)
def softmax():
    if Ax.current_build().family == "neuron":   # the build's target, known while the kernel is parsed
        return _trn1()

    @T.prim_func
    def softmax(X_: T.Buffer((ROWS, N), "float16"), Y_: T.Buffer((ROWS, N), "float16")):
        bx, tx_ = Ax.launch(ROWS, THREADS)
        X = Ax.param(X_)
        Y = Ax.param(Y_)
        _softmax_row(X, Y, bx, N, "float16", ROW)
    return softmax


def dynamic(n: int = N, dtype: str = "float16"):
    """The softmax kernel for rows of ``n`` ``dtype`` values (``n`` a multiple of 1024) and any
    number of rows ``M``: ``softmax_dyn(X: (M, n), Y: (M, n))``, grid ``M``; each CTA sees its
    row as a ``(1, n)`` buffer at element offset ``row * n``."""
    layout = row_layout(n, "softmax")
    if dtype not in ("float16", "bfloat16"):
        raise ValueError(f"softmax: dtype {dtype!r} must be float16 or bfloat16")

    @Ax.kernel(name="softmax_dyn", outputs=("Y",), threads=THREADS, dynamic=("M",))
    def softmax_dyn():
        @T.prim_func
        def softmax_dyn(x_: T.handle, y_: T.handle):
            X, Y = row_params(n, dtype, X_=x_, Y_=y_)
            _softmax_row(X, Y, 0, n, dtype, layout)
        return softmax_dyn
    return softmax_dyn
