"""Rotary position embedding in axe, in place on the query and key of every token (vLLM's
``rotary_embedding`` convention).

For token ``t`` at position ``p = positions[t]``, the cache row ``cos_sin_cache[p]`` holds
``rot_dim = head_size`` values: ``cos`` in its first half, ``sin`` in its second.  Every head
``x`` of the token's query and key is rotated by angle pairs:

- ``is_neox`` (GPT-NeoX, Llama): the pairs are ``(x[i], x[i + half])``;
- GPT-J (interleaved): the pairs are ``(x[2i], x[2i + 1])``;

and a pair ``(a, b)`` with ``c = cos[i]``, ``s = sin[i]`` becomes ``(a·c - b·s, b·c + a·s)``,
computed in fp32 and rounded once (vLLM computes in the dtype).

:func:`dynamic` ``(head_size, q_heads, kv_heads, is_neox, dtype, pos_dtype)``: one artifact
for every number of tokens ``M`` (grid ``M``, one CTA of 128 threads a token).  Each thread
holds 16 bytes of a head (NeoX: 8 values of each half; GPT-J: 4 pairs) and the matching slice
of the cos and sin row — a register tile replicated over the heads a pass covers, loaded once
per token — and a CTA covers ``128 / threads-per-head`` heads a pass; every pass's loads are
issued before any rotation.  A short last pass (heads not a multiple of a pass) is a predicated
slice of the pass tile.  ``axe.torch.ops.rotary_embedding`` calls it, launched programmatically
(:func:`kernels.rmsnorm.after_predecessor`: the positions are read after the wait too).
"""

from tvm.script import tirx as T
from tvm.script.ir_builder import tirx as IRB

import axe.lang as Ax
from axe.layout import R, S, tx
from kernels.rmsnorm import VEC, after_predecessor, check_dtype

THREADS = 128
HEAD_SIZES = (64, 128, 256)
POS_DTYPES = ("int64", "int32")
POS_ALIGN = {"int64": 8, "int32": 4}        # positions are read one at a time: any element-aligned view


class Plan:
    """Who holds what for ``head_size`` and a style: ``per_head`` threads a head, ``heads``
    heads a pass of the CTA's 128 threads; ``x`` the register layout of a pass over shape
    ``(heads, width)`` (``width``: half a head for NeoX, the whole head for GPT-J) and ``cs`` that
    of a half cos/sin row over ``(1, half)``, replicated over the pass's heads."""

    def __init__(self, head_size: int, is_neox: bool):
        half = head_size // 2
        self.neox, self.half = is_neox, half
        self.width = half if is_neox else head_size
        self.per_head = self.width // VEC
        self.heads = THREADS // self.per_head
        self.cs_vec = VEC if is_neox else VEC // 2       # GPT-J: 4 pairs, 4 angles a thread
        self.x = S[(self.heads, self.per_head, VEC):(self.per_head @ tx, 1 @ tx, 1)]
        self.cs = S[(self.per_head, self.cs_vec):(1 @ tx, 1)] + R[self.heads:self.per_head @ tx]


def _passes(H, plan):
    """``(first head, heads)`` of each pass over ``H`` heads."""
    return [(h, min(plan.heads, H - h)) for h in range(0, H, plan.heads)]


def _load(X, h, cnt, plan, dtype, name):
    """Heads ``[h, h + cnt)`` of ``X`` (``(H, head_size)``) into pass tiles: NeoX ``(x1, x2)``
    (the halves), GPT-J ``(x,)``; a short pass fills the first threads' registers only."""
    parts = [(0, plan.half), (plan.half, 2 * plan.half)] if plan.neox else [(0, plan.width)]
    tiles = []
    for k, (lo, hi) in enumerate(parts):
        t = Ax.registers((plan.heads, plan.width), dtype, plan.x, name=f"{name}{k}")
        if cnt < plan.heads:        # the threads past the pass's heads rotate zeros, never stored
            Ax.elementwise(t, lambda: T.Cast(dtype, T.float32(0)))
        Ax.copy(t if cnt == plan.heads else t[0:cnt, :], X[h:h + cnt, lo:hi])
        tiles.append(t)
    return tiles


def _store(X, h, cnt, tiles, plan):
    parts = [(0, plan.half), (plan.half, 2 * plan.half)] if plan.neox else [(0, plan.width)]
    for t, (lo, hi) in zip(tiles, parts):
        Ax.copy(X[h:h + cnt, lo:hi], t if cnt == plan.heads else t[0:cnt, :])


def _rotate(tiles, cos, sin, plan, dtype):
    """Rotate this thread's pairs in place: each thread's registers of a pass tile and of the
    cos/sin tiles line up (register ``i`` of the NeoX halves is angle ``i``; register ``2i``,
    ``2i + 1`` of a GPT-J chunk is angle ``i``)."""
    f32 = lambda v: T.Cast("float32", v)    # noqa: E731
    c, s = cos.flat(), sin.flat()
    if plan.neox:
        x1, x2 = tiles[0].flat(), tiles[1].flat()
        pairs = [(x1, i, x2, i, i) for i in range(VEC)]
    else:
        x = tiles[0].flat()
        pairs = [(x, 2 * i, x, 2 * i + 1, i) for i in range(VEC // 2)]
    for xa, ia, xb, ib, j in pairs:
        a, b = Ax.computed_once(f32(xa[ia]), "float32"), Ax.computed_once(f32(xb[ib]), "float32")
        IRB.buffer_store(xa, T.Cast(dtype, a * f32(c[j]) - b * f32(s[j])), [ia])
        IRB.buffer_store(xb, T.Cast(dtype, b * f32(c[j]) + a * f32(s[j])), [ib])


def dynamic(head_size: int = 128, q_heads: int = 32, kv_heads: int = 8, is_neox: bool = True,
            dtype: str = "bfloat16", pos_dtype: str = "int64"):
    """``rotary_dyn(P: (M,) pos_dtype, Q: (M, q_heads·head_size), [K: (M, kv_heads·head_size),]
    C: (npos, head_size))`` rotating ``Q`` and ``K`` in place by ``C[P[t]]`` (``kv_heads=0``: no
    key, no ``K`` argument); grid ``M``."""
    if head_size not in HEAD_SIZES:
        raise ValueError(f"rotary_embedding: head_size={head_size} must be one of {HEAD_SIZES}")
    if q_heads <= 0 or kv_heads < 0:
        raise ValueError(f"rotary_embedding: q_heads={q_heads} must be positive and kv_heads={kv_heads} not negative")
    check_dtype("rotary_embedding", dtype)
    if pos_dtype not in POS_DTYPES:
        raise ValueError(f"rotary_embedding: positions dtype {pos_dtype!r} must be one of {POS_DTYPES}")
    plan = Plan(head_size, is_neox)
    half = head_size // 2
    name = f"rotary_{'neox' if is_neox else 'gptj'}_dyn"

    def body(P_, Q_, K_, C_, M):
        Ax.cuda.programmatic_launch()
        bx, _ = Ax.launch([M], THREADS)
        after_predecessor()
        pos = Ax.computed_once(T.Cast("int32", P_[bx]))
        C = Ax.param(T.decl_buffer((1, head_size), dtype, data=C_.data, elem_offset=pos * head_size), name="C")
        cos = Ax.registers((1, half), dtype, plan.cs, name="cos")
        sin = Ax.registers((1, half), dtype, plan.cs, name="sin")
        Ax.copy(cos, C[0:1, 0:half])
        Ax.copy(sin, C[0:1, half:head_size])
        work = []
        for buf, H, nm in ((Q_, q_heads, "q"), (K_, kv_heads, "k")):
            if H == 0:
                continue
            X = Ax.param(T.decl_buffer((H, head_size), dtype, data=buf.data, elem_offset=bx * (H * head_size)),
                         name=nm.upper())
            work += [(X, h, cnt, _load(X, h, cnt, plan, dtype, f"{nm}{h}_")) for h, cnt in _passes(H, plan)]
        for X, h, cnt, tiles in work:       # every load is in flight before the first rotation
            _rotate(tiles, cos, sin, plan, dtype)
            _store(X, h, cnt, tiles, plan)

    @Ax.kernel(name=name, outputs=("Q", "K") if kv_heads else ("Q",), threads=THREADS, dynamic=("M",))
    def rotary_dyn():
        if kv_heads:
            @T.prim_func
            def rotary_dyn(p_: T.handle, q_: T.handle, k_: T.handle, c_: T.handle):
                M = T.int32()
                npos = T.int32()
                P_ = T.match_buffer(p_, (M,), pos_dtype, align=POS_ALIGN[pos_dtype])
                Q_ = T.match_buffer(q_, (M, q_heads * head_size), dtype, align=16)
                K_ = T.match_buffer(k_, (M, kv_heads * head_size), dtype, align=16)
                C_ = T.match_buffer(c_, (npos, head_size), dtype, align=16)
                body(P_, Q_, K_, C_, M)
            return rotary_dyn

        @T.prim_func
        def rotary_dyn(p_: T.handle, q_: T.handle, c_: T.handle):
            M = T.int32()
            npos = T.int32()
            P_ = T.match_buffer(p_, (M,), pos_dtype, align=POS_ALIGN[pos_dtype])
            Q_ = T.match_buffer(q_, (M, q_heads * head_size), dtype, align=16)
            C_ = T.match_buffer(c_, (npos, head_size), dtype, align=16)
            body(P_, Q_, None, C_, M)
        return rotary_dyn
    return rotary_dyn
