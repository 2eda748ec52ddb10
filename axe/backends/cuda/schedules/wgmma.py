"""Warpgroup GEMM: ``wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16}.{f16,bf16}`` (sm_90a).

B comes from shared memory through a 64-bit matrix descriptor, A from shared memory (``ss``)
or registers (``rs``), the fp32 accumulator from registers.  Preconditions, all from the
layout algebra:

- **shared operands** are seen as (MN, K) tiles (B through its transposed view).  The layout
  must be a tiling ``C ⊗ atom`` (``tile_of``) of a wgmma core-matrix atom: *K-major*, the atom
  is 8 rows × the swizzle width (32/64/128 bytes, ``Swizzle(b, log2(16/elem), 3)``) or, with no
  swizzle, one core matrix of 8 rows × 16 contiguous bytes; *MN-major*, the same atoms with
  MN contiguous (swizzle width of MN × 8 K rows; unswizzled 16 bytes of MN × 8 K rows).
  The descriptor's strides come from C: each dimension of C is grouped, and the innermost
  iter covering what one instruction spans gives SBO (between 8-row groups along MN for
  K-major, between 8-row K groups for swizzled MN-major) and LBO (between K core matrices for
  unswizzled K-major, between swizzle-width MN blocks for swizzled MN-major).  The start address
  of an instruction's slice is the layout's own (pre-swizzle) address of its first element;
  the hardware applies the swizzle to absolute addresses, so the tile's base must be a multiple
  of the swizzle period (shared tiles are 1024-byte aligned).  The major of B decides
  ``imm-trans-b`` (and of A, ``imm-trans-a``): no copy of the kernel per variant.
- **the accumulator** C is a register tiling ``C_out ⊗ D(N)`` of the wgmma D fragment
  (:func:`d_fragment`: per warp 16 rows, lane holding rows lane//4 and +8, columns
  2·(lane%4)+{0,1}+8j), C_out placing whole fragments on registers only.  N (8..256) is the
  largest that divides C's width, for which C is such a tiling and B's descriptor exists.
- **register A** (``rs``) is a tiling of the A fragment :func:`a_fragment` (the mma.m16n8k16 A
  fragment per warp, warps stacked along M).

``wgmma.fence`` precedes the instructions, ``commit_group`` follows them and
``wait_group(wait)`` (``wait=0`` by default; ``wait=False`` leaves the group in flight for the
caller's :func:`emit_wait`).  wgmma exists only on sm_90a: other targets decline.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from axe.layout import Layout, S, SwizzledLayout, Swizzle, group, tile_of
from axe.layout.canonical import merge_chain
from axe.layout.coord import ZERO
from axe.layout.iters import Iter
from axe.layout.layout import unflatten_index
from axe.schedules.emit import is_zero
from axe.schedules.registry import add_schedule

__all__ = ["d_fragment", "a_fragment", "core_atom", "SmemOperand", "smem_operand", "WgmmaPlan",
           "wgmma_plan", "emit_wait", "descriptor_bits", "SWIZZLE_CODE"]

K_INST = 16                                   # k16 for 16-bit inputs
SWIZZLE_CODE = {0: 0, 128: 1, 64: 2, 32: 3}   # descriptor bits 62-63 (sm_90 layout type)
_SW_BITS = {32: 1, 64: 2, 128: 3}


def _thread_axes(thread: str):
    """(warp axis, stride scale of a warp, lane axis) for lane/warp or tx fragments."""
    return ("tx", 32, "tx") if thread == "tx" else ("warp", 1, "lane")


def d_fragment(n: int, thread: str = "lane") -> Layout:
    """The wgmma m64nN fp32 accumulator over (64, n): warp w holds rows 16w..16w+15; lane l rows
    16w + l//4 (+8), columns 2(l%4)+{0,1}+8j in registers 4j + 2·(row≥8) + {0,1} (PTX order)."""
    wa, ws, la = _thread_axes(thread)
    return Layout((Iter(4, ws, wa), Iter(2, 2, "m"), Iter(8, 4, la), Iter(n // 8, 4, "m"),
                   Iter(4, 1, la), Iter(2, 1, "m")))


def a_fragment(thread: str = "lane") -> Layout:
    """The wgmma register-A fragment over (64, 16): per warp the mma.m16n8k16 A fragment
    ``S[(2,8,2,4,2):(2@reg,4@lane,4@reg,1@lane,1@reg)]``, warps stacked along M."""
    wa, ws, la = _thread_axes(thread)
    return Layout((Iter(4, ws, wa), Iter(2, 2, "m"), Iter(8, 4, la), Iter(2, 4, "m"),
                   Iter(4, 1, la), Iter(2, 1, "m")))


def core_atom(major: str, swizzle: int, elem_bytes: int):
    """``(layout, shape)`` of the wgmma shared atom over an (MN, K) tile.

    K-major: 8 rows (MN) of ``w`` contiguous K elements, ``w`` = swizzle bytes / elem (one core
    matrix of 16 bytes when unswizzled); MN-major: ``w`` contiguous MN elements × 8 K rows.
    Swizzled atoms carry ``Swizzle(log2(swizzle/16), log2(16/elem), 3)``.
    """
    w = (swizzle or 16) // elem_bytes
    if major == "K":
        L, shape = Layout((Iter(8, w, "m"), Iter(w, 1, "m"))), (8, w)
    else:
        L, shape = Layout((Iter(w, 1, "m"), Iter(8, w, "m"))), (w, 8)
    if swizzle:
        L = SwizzledLayout(L, Swizzle(_SW_BITS[swizzle], (16 // elem_bytes).bit_length() - 1, 3))
    return L, shape


def _swizzle_of(L, elem_bytes):
    """Swizzle bytes (0/32/64/128) of a shared layout, or a reason."""
    from .tma import swizzle_mode
    return swizzle_mode(L, elem_bytes)


def _covering_stride(block, count, what):
    """Stride of the innermost iter of a C block when it covers ``count`` consecutive atoms
    (the evenly spaced atoms one instruction reads); 0 when count is 1; else a reason."""
    if count == 1:
        return 0
    chain = merge_chain([it for it in block if it[0] > 1])
    if not chain or chain[-1][0] % count or chain[-1][2] != "m" or chain[-1][1] <= 0:
        return (f"the {count} {what} one instruction reads are not evenly spaced in shared memory "
                f"(innermost placement {chain[-1] if chain else 'none'})")
    return chain[-1][1]


@dataclass
class SmemOperand:
    """A shared operand as wgmma reads it: the (MN, K) view's ``layout``, the recovered atom
    placement ``outer`` (``layout = outer ⊗ atom``), and descriptor fields in bytes."""

    name: str
    major: str             # "K" or "MN"
    swizzle: int           # 0, 32, 64, 128 bytes
    layout: object         # the (MN, K) view
    shape: tuple
    outer: Layout
    lbo: int
    sbo: int
    base: object           # symbolic element offset of the tensor
    elem_bytes: int

    @property
    def trans(self) -> int:
        """imm-trans: 1 for an MN-major operand."""
        return int(self.major == "MN")

    def start(self, mn0: int, k0: int) -> int:
        """Pre-swizzle element offset of element (mn0, k0): the layout's own address."""
        inner = self.layout.inner if isinstance(self.layout, SwizzledLayout) else self.layout
        (c,) = inner.map((mn0, k0), self.shape)
        base = self.layout.base["m"] if isinstance(self.layout, SwizzledLayout) else 0
        return c["m"] + base

    def high_bits(self) -> int:
        """Descriptor bits 16-63 (LBO, SBO, layout type); the start address fills bits 0-13."""
        return descriptor_bits(0, self.lbo, self.sbo, self.swizzle)

    def describe(self) -> str:
        sw = f"{self.swizzle}B swizzle" if self.swizzle else "no swizzle"
        return (f"{self.name} {self.major}-major {sw}, {self.layout} = {self.outer} ⊗ atom, "
                f"LBO {self.lbo} B, SBO {self.sbo} B")


def descriptor_bits(start_bytes: int, lbo: int, sbo: int, swizzle: int) -> int:
    """The sm_90 shared-memory matrix descriptor: address, LBO and SBO in 16-byte units
    (bits 0-13, 16-29, 32-45) and the layout type (bits 62-63); base offset 0."""
    for what, v in (("start address", start_bytes), ("LBO", lbo), ("SBO", sbo)):
        if v % 16 or v >> 18:
            raise ValueError(f"wgmma descriptor: {what} {v} bytes is not a 16-byte multiple below 2^18")
    return ((start_bytes >> 4) & 0x3FFF) | ((lbo >> 4) << 16) | ((sbo >> 4) << 32) | (SWIZZLE_CODE[swizzle] << 62)


def _view_mn_k(t, operand):
    """The (MN, K) layout and shape of A (M×K as is) or B (K×N, transposed)."""
    if operand == "A":
        return t.layout, tuple(t.shape)
    inner = t.layout.inner if isinstance(t.layout, SwizzledLayout) else t.layout
    g = group(inner, t.shape)
    shard = tuple(i for d in (1, 0) for i in (g.blocks[d] or ((1, 1, "m"),)))
    L = Layout(shard, inner.replica, inner.offset)
    if isinstance(t.layout, SwizzledLayout):
        L = t.layout.with_inner(L)
    return L, (t.shape[1], t.shape[0])


def smem_operand(t, operand: str, mn_inst: int):
    """:class:`SmemOperand` for shared A (``operand="A"``) or B read ``mn_inst`` MN rows per
    instruction, or the reason no descriptor describes it."""
    import tvm
    name = f"{operand} ({t.name})"
    if t.mem != "shared":
        return f"{name} is in {t.mem} memory; wgmma reads it from shared memory"
    L, shape = _view_mn_k(t, operand)
    inner = L.inner if isinstance(L, SwizzledLayout) else L
    if any(a != "m" for a in inner.axes()) or inner.replica:
        return f"{name}: shared layout {t.layout} is not a plain memory layout"
    eb = t.elem_bytes
    mode = _swizzle_of(L, eb)
    if isinstance(mode, str):
        return f"{name}: {mode}"
    period = L.swizzle.period if mode else 8 * 16 // eb
    base = L.base["m"] if mode else 0
    if base % period:
        return f"{name}: swizzle base {base} is not a multiple of the swizzle period ({period} elements)"
    if not is_zero(t.base) and not tvm.sym.Analyzer().can_prove(tvm.tirx.floormod(t.base, period) == 0):
        return (f"{name}: symbolic offset {t.base} is not provably a multiple of {period} elements "
                f"({period * eb} bytes; the swizzle pattern is anchored to absolute addresses)")
    reasons = []
    for major in ("K", "MN"):
        atom, ashape = core_atom(major, mode, eb)
        plain = L.with_inner(inner, base=ZERO) if mode else L
        mn_atom, k_atom = ashape
        if shape[0] % mn_atom or shape[1] % k_atom or (major == "MN" and mn_inst % mn_atom and mn_inst > mn_atom):
            reasons.append(f"{major}-major: {list(shape)} is not a whole number of {list(ashape)} atoms")
            continue
        C = tile_of(plain, shape, atom, ashape)
        if C is None:
            reasons.append(f"{major}-major: {L} over {list(shape)} (MN, K) is not a tiling C ⊗ {atom} "
                           f"over {list(ashape)}")
            continue
        if any(a != "m" for a in C.axes()) or C.replica:
            reasons.append(f"{major}-major: atom placement {C} leaves plain memory")
            continue
        cshape = (shape[0] // mn_atom, shape[1] // k_atom)
        blocks = group(C, cshape).blocks
        span_bytes = prod(ashape) * eb
        # per instruction: mn_inst MN rows, K_INST K columns
        mn_count = max(mn_inst // mn_atom, 1)
        k_count = max(K_INST // k_atom, 1)
        if major == "K":
            if K_INST % k_atom and k_atom % K_INST:
                reasons.append(f"K-major: atom width {k_atom} and k{K_INST} do not nest")
                continue
            sbo = _covering_stride(blocks[0], mn_count, "8-row groups along MN")
            lbo = _covering_stride(blocks[1], k_count, "core matrices along K") if not mode else 0
            if isinstance(sbo, str) or isinstance(lbo, str):
                reasons.append(f"K-major: {sbo if isinstance(sbo, str) else lbo} (placement {C})")
                continue
            sbo, lbo = sbo * span_bytes, (lbo * span_bytes if not mode else 16)
        else:
            if mode and mn_inst < mn_atom:
                reasons.append(f"MN-major: one instruction reads {mn_inst} MN rows, less than the "
                               f"{mn_atom}-element swizzle atom")
                continue
            mn_s = _covering_stride(blocks[0], mn_count, "MN blocks")
            k_s = _covering_stride(blocks[1], k_count, "8-row K groups")
            if isinstance(mn_s, str) or isinstance(k_s, str):
                reasons.append(f"MN-major: {mn_s if isinstance(mn_s, str) else k_s} (placement {C})")
                continue
            if mode:
                lbo, sbo = mn_s * span_bytes, k_s * span_bytes
            else:
                sbo, lbo = mn_s * span_bytes, k_s * span_bytes
        if not sbo:
            sbo = 16 * 8 if not mode else mode * 8   # unused field (one group): the atom's own span
        if not lbo:
            lbo = 16
        if max(lbo, sbo) >> 18:
            reasons.append(f"{major}-major: LBO {lbo} / SBO {sbo} bytes exceed the descriptor's 14 bits")
            continue
        return SmemOperand(name, major, mode, L, shape, C, lbo, sbo, t.base, eb)
    return f"{name}: " + "; ".join(reasons)


@dataclass
class WgmmaPlan:
    n: int
    m_tiles: int
    n_tiles: int
    k_tiles: int
    acc_outer: Layout          # C = acc_outer ⊗ d_fragment(n)
    a: object                  # SmemOperand, or the register A outer layout
    b: SmemOperand
    dtype: str
    thread: str
    wait: object

    @property
    def rs(self) -> bool:
        return not isinstance(self.a, SmemOperand)

    def instruction(self) -> str:
        t = "f16" if self.dtype == "float16" else "bf16"
        return f"wgmma.mma_async.sync.aligned.m64n{self.n}k16.f32.{t}.{t}"

    def describe(self) -> str:
        count = self.m_tiles * self.n_tiles * self.k_tiles
        a = (self.a.describe() if not self.rs
             else f"A registers = {self.a} ⊗ {a_fragment(self.thread)}")
        wait = "no wait" if self.wait is False else f"wait_group {self.wait}"
        return (f"{count} x {self.instruction()} ({'rs' if self.rs else 'ss'}; {self.m_tiles}x{self.n_tiles}x"
                f"{self.k_tiles} m/n/k); C = {self.acc_outer} ⊗ {d_fragment(self.n, self.thread)}; {a}; "
                f"{self.b.describe()}; fence, commit, {wait}")


def _thread_kind(t):
    axes = set(t.thread_axes())
    if axes <= {"tx"} and axes:
        return "tx"
    if axes and axes <= {"lane", "warp"}:
        return "lane"
    return None


def _register_outer(t, shape, atom, ashape, what):
    C = tile_of(t.layout, shape, atom, ashape)
    if C is None:
        return f"{what} register layout {t.layout} over {list(shape)} is not a tiling C ⊗ {atom} over {list(ashape)}"
    if any(a != "m" for a in C.axes()) or C.replica:
        return f"{what}: fragment placement {C} is not on registers alone (a fragment fills the warpgroup)"
    return C


def wgmma_plan(call, ctx):
    """A :class:`WgmmaPlan`, or the reason the call does not match wgmma."""
    C, A, B = call.operands["C"], call.operands["A"], call.operands["B"]
    if ctx.target != "sm_90a":
        why = "has tcgen05 instead" if ctx.arch >= 100 else "lacks the arch-specific 'a' features"
        return f"wgmma exists only on sm_90a; target {ctx.target} {why}"
    sc = call.scope
    if sc.kind != "warpgroup" or sc.threads != 128:
        return f"wgmma is issued by one warpgroup; the scope is {sc.describe()} (use Ax.warpgroups(i))"
    if C.mem != "local":
        return f"C ({C.name}) is in {C.mem} memory; the wgmma accumulator lives in registers"
    (M, K), N_total = A.shape, B.shape[1]
    if M % 64 or K % K_INST or N_total % 8:
        return f"M={M}, N={N_total}, K={K} are not multiples of 64, 8 and {K_INST}"
    thread = _thread_kind(C)
    if thread is None:
        return f"C ({C.name}) layout {C.layout} names thread axes {sorted(C.thread_axes())}, not lane/warp or tx"
    reasons = []
    chosen = None
    for n in range(min(256, N_total), 7, -8):
        if N_total % n:
            continue
        outer = _register_outer(C, (M, N_total), d_fragment(n, thread), (64, n), f"C ({C.name})")
        if isinstance(outer, str):
            reasons.append(f"N={n}: {outer}")
            continue
        b = smem_operand(B, "B", n)
        if isinstance(b, str):
            reasons.append(f"N={n}: {b}")
            continue
        chosen = (n, outer, b)
        break
    if chosen is None:
        if len(reasons) > 3:
            reasons = reasons[:2] + [f"... {len(reasons) - 3} more N ...", reasons[-1]]
        return "no N in 8..256 fits: " + " | ".join(reasons)
    n, outer, b = chosen
    if A.mem == "shared":
        a = smem_operand(A, "A", 64)
    elif A.mem == "local":
        ta = _thread_kind(A)
        if ta != thread:
            return f"A ({A.name}) layout {A.layout} names threads differently from C ({C.layout})"
        a = _register_outer(A, (M, K), a_fragment(thread), (64, K_INST), f"A ({A.name})")
    else:
        return f"A ({A.name}) is in {A.mem} memory; wgmma reads A from shared memory or registers"
    if isinstance(a, str):
        return a
    wait = call.config.get("wait", 0)
    if wait is not False and (isinstance(wait, bool) or not isinstance(wait, int) or not 0 <= wait <= 7):
        return f"wait={wait!r}: an int in 0..7 (groups left in flight) or False"
    return WgmmaPlan(n, M // 64, N_total // n, K // K_INST, outer, a, b, A.dtype, thread, wait)


def _desc(op: SmemOperand, t, mn0, k0, hi):
    """The descriptor of the instruction reading (mn0.., k0..): the layout's address of its first
    element in bits 0-13, the constant LBO/SBO/layout type above."""
    from tvm.script import tirx as T
    off = op.start(mn0, k0)
    if not is_zero(t.base):
        off = off + t.base
    addr = T.cuda.cvta_generic_to_shared(t.flat().ptr_to([off]))
    lo = T.shift_right(T.bitwise_and(addr, T.uint32(0x3FFFF)), T.uint32(4))
    # written as two 32-bit halves: the constant exceeds int64 for the 32-byte swizzle
    hi_expr = T.bitwise_or(T.shift_left(T.Cast("uint64", T.uint32(hi >> 32)), T.uint64(32)),
                           T.Cast("uint64", T.uint32(hi & 0xFFFFFFFF)))
    return T.bitwise_or(T.Cast("uint64", lo), hi_expr)


def emit_wait(pending: int = 0):
    """``wgmma.wait_group pending``."""
    from tvm.script import tirx as T
    T.evaluate(T.ptx["wgmma.wait_group.sync.aligned"](pending))


def _emit(call, plan: WgmmaPlan, ctx):
    from tvm.script import tirx as T
    C, A, B = call.operands["C"], call.operands["A"], call.operands["B"]
    acc = C.flat()
    a_words = None if not plan.rs else A.buffer.view("uint32")
    span_d = plan.n // 2
    if call.config.get("fence", True):
        T.evaluate(T.ptx["wgmma.fence.sync.aligned"]())
    op = T.ptx[plan.instruction()]
    a_hi = None if plan.rs else plan.a.high_bits()
    b_hi = plan.b.high_bits()
    Cb = 0 if is_zero(C.base) else C.base
    for mi in range(plan.m_tiles):
        for ni in range(plan.n_tiles):
            (c,) = plan.acc_outer.map((mi, ni), (plan.m_tiles, plan.n_tiles))
            regs = [acc[Cb + c["m"] * span_d + i] for i in range(span_d)]
            for ki in range(plan.k_tiles):
                scale_d = 1 if (call.attrs["accumulate"] or ki > 0) else 0
                bd = _desc(plan.b, B, ni * plan.n, ki * K_INST, b_hi)
                if plan.rs:
                    (ca,) = plan.a.map((mi, ki), (plan.m_tiles, plan.k_tiles))
                    w0 = (ca["m"] * 8 + (0 if is_zero(A.base) else A.base)) // 2
                    a_args = [a_words[w0 + j] for j in range(4)]
                    T.evaluate(op(*regs, *a_args, bd, T.bool(scale_d), 1, 1, plan.b.trans))
                else:
                    ad = _desc(plan.a, A, mi * 64, ki * K_INST, a_hi)
                    T.evaluate(op(*regs, ad, bd, T.bool(scale_d), 1, 1, plan.a.trans, plan.b.trans))
    if call.config.get("commit", True):
        T.evaluate(T.ptx["wgmma.commit_group.sync.aligned"]())
    if plan.wait is not False:
        emit_wait(plan.wait)
        if plan.wait == 0:
            fence_registers([acc[Cb + i] for i in range(span_d * plan.m_tiles * plan.n_tiles)])


_FENCE = "#define axe_fence_f32(x) asm volatile(\"\" : \"+f\"(x) :: \"memory\")\n"


def fence_registers(regs):
    """``asm volatile("" : "+f"(r) :: "memory")`` per accumulator register: the compiler may not
    move reads of the accumulator above the wait (it cannot see wgmma's asynchronous writes)."""
    from tvm.script import tirx as T
    for r in regs:
        T.evaluate(T.cuda.func_call("axe_fence_f32", r, source_code=_FENCE))


# wgmma.mma_async m64nNk16 (ss or rs) with descriptors derived from the shared layouts.
add_schedule("gemm", "wgmma", "cuda", priority=40,
             requires="sm_90a warpgroup; C = C_out ⊗ wgmma D fragment; B (and A in ss) = C ⊗ core-matrix atom "
                      "(K- or MN-major, 32/64/128B swizzle or none); register A = C ⊗ A fragment",
             check=wgmma_plan, emit=_emit)
