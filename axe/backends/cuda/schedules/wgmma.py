"""Warpgroup GEMM: ``wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16}.{f16,bf16}`` and
``...m64nNk32.f32.e4m3.e4m3`` (sm_90a).

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

**fp8** (``float8_e4m3fn`` A and B: the same ``gemm`` call record, :func:`axe.ops.gemm.gemm`):
k32 per instruction — the descriptors count K in bytes (:data:`~axe.backends.cuda.smem_desc.K_INST_BYTES`,
32 bytes: k16 of 16-bit data, k32 of fp8), so unswizzled and 32/64/128-byte swizzled K-major fp8
tiles are described like 16-bit ones — and, per the PTX ISA, no imm-trans operands: "matrices A
and B must be K-major" for .e4m3/.e5m2, so an MN-major operand declines with that reason, as does
register A (its fp8 fragment is not implemented).
"""

from __future__ import annotations

from dataclasses import dataclass

from axe.layout import Layout, tile_of
from axe.layout.iters import Iter
from axe.schedules.emit import is_zero
from axe.schedules.registry import add_schedule, declining

from ..smem_desc import (SWIZZLE_CODE, SmemOperand, core_atom, descriptor_bits,  # noqa: F401
                         emit_descriptor, k_inst, pick_n, smem_operand)

__all__ = ["d_fragment", "a_fragment", "core_atom", "SmemOperand", "smem_operand", "WgmmaPlan",
           "wgmma_plan", "emit_wait", "descriptor_bits", "SWIZZLE_CODE"]


def _thread_axes(thread: str):
    """(warp axis, stride scale of a warp, lane axis) for lane/warp or tx fragments."""
    return ("tx", 32, "tx") if thread == "tx" else ("warp", 1, "lane")


def d_fragment(n: int, thread: str = "lane") -> Layout:
    """The wgmma m64nN fp32 accumulator over (64, n): warp w holds rows 16w..16w+15; lane l rows
    16w + l//4 (+8), columns 2(l%4)+{0,1}+8j in registers 4j + 2·(row≥8) + {0,1} (PTX order).
    ``thread``: ``"lane"`` names the threads by ``warp`` and ``lane``, ``"tx"`` by the warpgroup's
    thread index (warp w's lane l is ``tx = 32w + l``).  Kernels reach it as
    ``Ax.cuda.wgmma_fragment``: a register tile laid out as ``C ⊗ wgmma_fragment(n)`` is what
    wgmma accumulates into."""
    wa, ws, la = _thread_axes(thread)
    return Layout((Iter(4, ws, wa), Iter(2, 2, "m"), Iter(8, 4, la), Iter(n // 8, 4, "m"),
                   Iter(4, 1, la), Iter(2, 1, "m")))


def a_fragment(thread: str = "lane") -> Layout:
    """The wgmma register-A fragment over (64, 16): per warp the mma.m16n8k16 A fragment
    ``S[(2,8,2,4,2):(2@reg,4@lane,4@reg,1@lane,1@reg)]``, warps stacked along M."""
    wa, ws, la = _thread_axes(thread)
    return Layout((Iter(4, ws, wa), Iter(2, 2, "m"), Iter(8, 4, la), Iter(2, 4, "m"),
                   Iter(4, 1, la), Iter(2, 1, "m")))


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
    k_inst: int                # K per instruction (32 bytes): 16 (16-bit inputs) or 32 (fp8)

    @property
    def rs(self) -> bool:
        return not isinstance(self.a, SmemOperand)

    @property
    def fp8(self) -> bool:
        return self.dtype in FP8_TYPES

    def instruction(self) -> str:
        t = DTYPES[self.dtype]
        return f"wgmma.mma_async.sync.aligned.m64n{self.n}k{self.k_inst}.f32.{t}.{t}"

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


@declining()
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
    if A.dtype not in DTYPES:
        return f"wgmma here multiplies {', '.join(DTYPES)}; A and B are {A.dtype}"
    fp8 = A.dtype in FP8_TYPES
    if fp8 and A.mem == "local":
        return f"fp8 wgmma here reads A ({A.name}, {A.dtype}) from shared memory (ss); register A is not supported"
    k_el = k_inst(A.elem_bytes)
    if M % 64 or K % k_el or N_total % 8:
        return f"M={M}, N={N_total}, K={K} are not multiples of 64, 8 and {k_el}"
    thread = _thread_kind(C)
    if thread is None:
        return f"C ({C.name}) layout {C.layout} names thread axes {sorted(C.thread_axes())}, not lane/warp or tx"
    chosen = pick_n([n for n in range(min(256, N_total), 7, -8) if N_total % n == 0],
                    lambda n: _register_outer(C, (M, N_total), d_fragment(n, thread), (64, n), f"C ({C.name})"),
                    lambda n: smem_operand(B, "B", n))
    if isinstance(chosen, str):
        return "no N in 8..256 fits: " + chosen
    n, outer, b = chosen
    if A.mem == "shared":
        a = smem_operand(A, "A", 64)
    elif A.mem == "local":
        ta = _thread_kind(A)
        if ta != thread:
            return f"A ({A.name}) layout {A.layout} names threads differently from C ({C.layout})"
        a = _register_outer(A, (M, K), a_fragment(thread), (64, k_el), f"A ({A.name})")
    else:
        return f"A ({A.name}) is in {A.mem} memory; wgmma reads A from shared memory or registers"
    if isinstance(a, str):
        return a
    if fp8:
        why = _fp8_operands(a, b)
        if why:
            return why
    wait = call.config.get("wait", 0)
    if wait is not False and (isinstance(wait, bool) or not isinstance(wait, int) or not 0 <= wait <= 7):
        return f"wait={wait!r}: an int in 0..7 (groups left in flight) or False"
    return WgmmaPlan(n, M // 64, N_total // n, K // k_el, outer, a, b, A.dtype, thread, wait, k_el)


#: fp8 dtypes wgmma takes, with their PTX type names
FP8_TYPES = {"float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}
#: every input dtype wgmma takes here, with its PTX type name
DTYPES = {"float16": "f16", "bfloat16": "bf16", **FP8_TYPES}


def _fp8_operands(a, b):
    """The reason shared fp8 operands ``a`` and ``b`` do not fit wgmma, or None."""
    for op in (a, b):
        if op.major != "K":
            return (f"fp8 (e4m3/e5m2) wgmma takes K-major A and B only (PTX ISA: no imm-trans for fp8); "
                    f"{op.describe()}")
    return None


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
                bd = emit_descriptor(plan.b, B, ni * plan.n, ki * plan.k_inst, b_hi)
                if plan.rs:
                    (ca,) = plan.a.map((mi, ki), (plan.m_tiles, plan.k_tiles))
                    w0 = (ca["m"] * 8 + (0 if is_zero(A.base) else A.base)) // 2
                    a_args = [a_words[w0 + j] for j in range(4)]
                    T.evaluate(op(*regs, *a_args, bd, T.bool(scale_d), 1, 1, plan.b.trans))
                else:
                    ad = emit_descriptor(plan.a, A, mi * 64, ki * plan.k_inst, a_hi)
                    # K-major only for fp8: its instruction has no imm-trans operands
                    trans = () if plan.fp8 else (plan.a.trans, plan.b.trans)
                    T.evaluate(op(*regs, ad, bd, T.bool(scale_d), 1, 1, *trans))
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


# wgmma.mma_async m64nNk16 (ss or rs) and m64nNk32 fp8 (ss) with descriptors derived from the shared layouts.
add_schedule("gemm", "wgmma", "cuda", priority=40,
             requires="sm_90a warpgroup; C = C_out ⊗ wgmma D fragment; B (and A in ss) = C ⊗ core-matrix atom "
                      "(K- or MN-major, 32/64/128B swizzle or none); register A = C ⊗ A fragment; "
                      "fp8: ss, both K-major",
             check=wgmma_plan, emit=_emit)
