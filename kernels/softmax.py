"""Row-wise softmax in axe: ``y = exp(x - max(x)) / sum(exp(x - max(x)))``, one CTA per row.

Each of 128 threads holds 8 contiguous fp16 of a row (16-byte loads); the CTA takes
the row maximum (warp shuffles + shared memory), one fused pass computes ``exp(x - max)`` in
fp32, the CTA sums it, and a second fused pass scales by the reciprocal and casts back to fp16
for 16-byte stores.

Two builds share the row's body (:func:`_softmax_row`): ``softmax`` (module level, the static
``ROWS x N`` fp16 example that ``axe demo`` and ``tests/test_kernels.py`` build) and
:func:`dynamic` ``(n, dtype)``, one artifact for every number of rows ``M`` (grid ``M``) and
any row length ``n`` that is a multiple of 8, which ``axe.torch.ops.softmax`` calls (launched
programmatically by :func:`kernels.rmsnorm.row_params`).  A row is
held as :func:`kernels.rmsnorm.row_tile` says; its padding holds -inf, which is never the
maximum of a row with a finite value and whose exponential adds 0 to the sum.

The static ``softmax`` is one source for sm_90a, sm_100a and trn1: what differs per target is
in :data:`TARGETS` — rows per step, where the on-chip tiles live and their layouts (registers
spread over 128 threads on a GPU; a 128-partition SBUF tile on trn1) — and the entry (a CTA per
row on a GPU, a loop over 128-row blocks on the one NeuronCore).
"""

from tvm.script import tirx as T

import axe.lang as Ax
from kernels.rmsnorm import RowTile, check_dtype, load_row, row_params, row_tile, store_row
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


def _softmax_row(X, Y, row, rt: RowTile, dtype, rows=1, tile=Ax.registers, one=ONE):
    """Softmax of rows ``[row, row + rows)`` of ``X`` into ``Y``, held as ``rt`` says (tiles from
    ``tile``)."""
    x = tile((rows, rt.padded), dtype, rt.layout, name="x")
    xf = tile((rows, rt.padded), "float32", rt.layout, name="xf")
    e = tile((rows, rt.padded), "float32", rt.layout, name="e")
    mx = tile((rows, 1), "float32", one, name="mx")
    sm = tile((rows, 1), "float32", one, name="sm")
    load_row(x, X, rt, T.Cast(dtype, T.reinterpret("float32", T.uint32(0xFF800000))), rows, row)
    Ax.cast(xf, x)
    Ax.reduce(mx, xf, "max", dims=1)
    Ax.elementwise(e, lambda v, m: T.exp(v - m), xf, mx)
    Ax.reduce(sm, e, "sum", dims=1)
    Ax.elementwise(x, lambda v, s: T.Cast(dtype, v * (T.float32(1) / s)), e, sm)
    store_row(Y, x, rt, rows, row)


def _trn1():
    cfg = TARGETS["neuron"]

    @T.prim_func
    def softmax(X_: T.Buffer((ROWS, N), "float16"), Y_: T.Buffer((ROWS, N), "float16")):
        Ax.neuron.core()
        X = Ax.param(X_)
        Y = Ax.param(Y_)
        for r in T.parallel(ROWS // cfg["rows"]):
            _softmax_row(X, Y, r * cfg["rows"], RowTile(N, THREADS, N, cfg["row"], ((0, N),)), "float16",
                         cfg["rows"], cfg["tile"], cfg["one"])
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
        _softmax_row(X, Y, bx, row_tile(N, threads=THREADS), "float16")
    return softmax


def dynamic(n: int = N, dtype: str = "float16"):
    """The softmax kernel for rows of ``n`` ``dtype`` values (``n`` any multiple of 8) and any
    number of rows ``M``: ``softmax_dyn(X: (M, n), Y: (M, n))``, grid ``M``; each CTA sees its
    row as a ``(1, n)`` buffer at element offset ``row * n``."""
    rt = row_tile(n, "softmax")
    check_dtype("softmax", dtype)

    @Ax.kernel(name="softmax_dyn", outputs=("Y",), threads=rt.threads, dynamic=("M",))
    def softmax_dyn():
        @T.prim_func
        def softmax_dyn(x_: T.handle, y_: T.handle):
            X, Y = row_params(n, dtype, rt.threads, X_=x_, Y_=y_)
            _softmax_row(X, Y, 0, rt, dtype)
        return softmax_dyn
    return softmax_dyn
