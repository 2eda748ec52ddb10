"""Rotary embedding (NeoX pairs, vLLM's in-place convention) as :func:`kernels.rotary.dynamic`,
written the CTA-collective way with every register tile inferred: per token (one CTA of 128
threads) the cos/sin row is copied once per tensor into (1, half) tiles, each tensor's heads
are held as two (heads, half) tiles, and two broadcasting elementwise operators rotate them —
no per-thread index arithmetic.  Same signature as the hand-written kernel:
``rotary_neox_dyn(P: (M,), Q: (M, q_heads·head_size), K: (M, kv_heads·head_size), C: (npos, head_size))``."""

from tvm.script import tirx as T

import axe.lang as Ax

THREADS = 128


def _rotate(X, C, H, half, dtype, name):
    """Rotate the ``H`` heads of this token's row of ``X`` by the cos/sin row ``C``, in place."""
    f32 = lambda v: T.Cast("float32", v)    # noqa: E731
    x1 = Ax.registers((H, half), dtype, name=f"{name}1")
    x2 = Ax.registers((H, half), dtype, name=f"{name}2")
    c = Ax.registers((1, half), dtype, name=f"{name}cos")
    s = Ax.registers((1, half), dtype, name=f"{name}sin")
    y1 = Ax.registers((H, half), dtype, name=f"{name}y1")
    y2 = Ax.registers((H, half), dtype, name=f"{name}y2")
    Ax.copy(x1, X[0:H, 0:half])
    Ax.copy(x2, X[0:H, half:2 * half])
    Ax.copy(c, C[0:1, 0:half])
    Ax.copy(s, C[0:1, half:2 * half])
    Ax.elementwise(y1, lambda a, b, co, si: T.Cast(dtype, f32(a) * f32(co) - f32(b) * f32(si)), x1, x2, c, s)
    Ax.elementwise(y2, lambda a, b, co, si: T.Cast(dtype, f32(b) * f32(co) + f32(a) * f32(si)), x1, x2, c, s)
    Ax.copy(X[0:H, 0:half], y1)
    Ax.copy(X[0:H, half:2 * half], y2)


def dynamic(head_size: int = 128, q_heads: int = 32, kv_heads: int = 8, dtype: str = "bfloat16",
            pos_dtype: str = "int64"):
    """The kernel for ``q_heads`` and ``kv_heads`` heads of ``head_size`` and any number of tokens."""
    half = head_size // 2

    def body(P_, Q_, K_, C_, M):
        bx, _ = Ax.launch([M], THREADS)
        pos = Ax.computed_once(T.Cast("int32", P_[bx]))
        C = Ax.param(T.decl_buffer((1, head_size), dtype, data=C_.data, elem_offset=pos * head_size), name="C")
        for buf, H, nm in ((Q_, q_heads, "q"), (K_, kv_heads, "k")):
            X = Ax.param(T.decl_buffer((H, head_size), dtype, data=buf.data, elem_offset=bx * (H * head_size)),
                         name=nm.upper())
            _rotate(X, C, H, half, dtype, nm)

    @Ax.kernel(name="rotary_neox_dyn", outputs=("Q", "K"), threads=THREADS, dynamic=("M",))
    def rotary_neox_dyn():
        @T.prim_func
        def rotary_neox_dyn(p_: T.handle, q_: T.handle, k_: T.handle, c_: T.handle):
            M, npos = T.int32(), T.int32()
            P_ = T.match_buffer(p_, (M,), pos_dtype, align=8 if pos_dtype == "int64" else 4)
            Q_ = T.match_buffer(q_, (M, q_heads * head_size), dtype, align=16)
            K_ = T.match_buffer(k_, (M, kv_heads * head_size), dtype, align=16)
            C_ = T.match_buffer(c_, (npos, head_size), dtype, align=16)
            body(P_, Q_, K_, C_, M)
        return rotary_neox_dyn
    return rotary_neox_dyn
