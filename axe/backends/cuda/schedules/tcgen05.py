"""Blackwell tensor-core schedules (sm_100a): ``tcgen05.mma`` for ``gemm``; ``tcgen05.ld``,
``tcgen05.st`` and ``tcgen05.cp`` for ``copy`` between tensor memory, registers and shared memory.

**gemm → tcgen05.mma.cta_group::{1,2}.kind::f16** (fp16/bf16 in, fp32 accumulate in TMEM; fp8
operands decline naming their dtype — ``kind::f8f6f4`` is not emitted), issued by one thread
(``Ax.cuda.elect_one()`` or ``Ax.thread``); K per instruction is 32 bytes (k16), counted as the
shared descriptors count it (:func:`~axe.backends.cuda.smem_desc.k_inst`).  Preconditions, all
from the layouts:

- C lives in tensor memory; its layout is a tiling ``C_out ⊗ D(N)`` of the data-path layout D
  ``S[(128,N):(1@TLane,1@TCol)]`` (row i in lane i), ``C_out`` on ``TCol`` only (M = 128·m tiles
  side by side in columns).  N is the largest multiple of 16 (≤ 256) dividing C's width for which
  C is such a tiling and B's descriptor exists.
- A and B in shared memory are tilings of the canonical core-matrix atoms (the wgmma ones, every
  swizzle mode, K- or MN-major; :mod:`axe.backends.cuda.smem_desc`), each instruction's
  descriptor starting at the layout's address of its first element; A may instead be in TMEM
  (``ts`` form: K-major, rows in lanes, two 16-bit elements per column).
- **cta_group::2** is read from the layouts: when A, B and C name the axis ``cta`` with extent 2
  (A's rows, B's columns and C's rows split over the CTA pair; :func:`pair`), the instruction is
  M=256 over the pair: each CTA holds 128 rows of A and C and half of B's columns at the same
  offsets, and the even CTA issues.
- the instruction descriptor (:func:`instr_descriptor`) is built from the dtypes, the operands'
  majors (transpose bits) and M, N; completion is signalled by ``tcgen05.commit`` on each
  barrier of ``barrier=`` (``multicast=mask``: on the barrier at the same offset of every CTA in
  the mask — a pair's MMAs release both CTAs' slots).

**copy TMEM → registers (tcgen05.ld)**: the register tile is a tiling ``C ⊗ F`` of one of the
data-path fragments (:func:`ld_fragment`: 32x32b, 16x256b, 16x128b, 16x64b with ``.num``
repetitions), ``C`` on registers only, and the TMEM tile is a window of D; the shape and the
largest ``.num`` that fit are chosen in that order, then ``tcgen05.wait::ld`` and a register
fence.  **registers → TMEM (tcgen05.st)** is the same match, then ``tcgen05.wait::st``.
**shared → TMEM (tcgen05.cp.128x256b)**: a 16-bit (128·m, K) shared tile that is a K-major
tiling of the core-matrix atoms, copied k16 slice by slice into the columns of a D-layout
TMEM tile (the A operand of the ``ts`` form).  A warp reads the 32 lanes ``32·(warp % 4)..``:
the scope must start at a warpgroup boundary.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from axe.layout import Layout, S, group, tile_of
from axe.layout.coord import TCol, TLane  # noqa: F401
from axe.layout.iters import Iter
from axe.schedules.emit import is_zero
from axe.schedules.registry import add_schedule, declining

from ..smem_desc import SmemOperand, emit_descriptor, k_inst, pick_n, smem_operand
from .wgmma import fence_registers

__all__ = ["LD_SHAPES", "ld_fragment", "d_layout", "instr_descriptor", "pair", "local_of_pair", "Tcgen05Plan",
           "tcgen05_plan", "LdPlan", "ld_plan", "CpPlan", "cp_plan", "commit", "is_blackwell"]

#: 32-bit TMEM columns one ``.num`` repetition of each ld/st shape covers per lane row
LD_SHAPES = {"32x32b": 1, "16x256b": 8, "16x128b": 4, "16x64b": 2}
_REGS_PER_NUM = {"32x32b": 1, "16x256b": 4, "16x128b": 2, "16x64b": 1}


def is_blackwell(ctx) -> str | None:
    """None on a target with tcgen05 (sm_100a/sm_101a/sm_103a), else the reason."""
    if 100 <= ctx.arch < 120 and ctx.target.endswith("a"):
        return None
    return f"tcgen05 exists only on sm_100a-family targets; target {ctx.target} has none"


def d_layout(n: int, rows: int = 128) -> Layout:
    """PTX data-path layout D over (rows, n): row i in TMEM lane i, column j in column j."""
    return S[(rows, n):(1 @ TLane, 1 @ TCol)]


def _warp_fragment(shape: str, num: int) -> tuple:
    """One warp's iters of a ld/st shape over (16 or 32 rows, columns): (row iters, column iters),
    thread on ``tx`` (lane), register on ``m``.  PTX ISA "Matrix fragments for tcgen05.ld/st"."""
    if shape == "32x32b":         # thread t: lane t; register r: column r
        return [Iter(32, 1, "tx")], [Iter(num, 1, "m")]
    if shape == "16x64b":         # row = t/4 + 8·(t%2), column = (t/2)%2 + 2r
        return [Iter(2, 1, "tx"), Iter(8, 4, "tx")], [Iter(num, 1, "m"), Iter(2, 2, "tx")]
    if shape == "16x128b":        # row = t/4 + 8·(r%2), column = t%4 + 4·(r/2)
        return [Iter(2, 1, "m"), Iter(8, 4, "tx")], [Iter(num, 2, "m"), Iter(4, 1, "tx")]
    if shape == "16x256b":        # row = t/4 + 8·((r/2)%2), column = r%2 + 2·(t%4) + 8·(r/4)
        return [Iter(2, 2, "m"), Iter(8, 4, "tx")], [Iter(num, 4, "m"), Iter(4, 1, "tx"), Iter(2, 1, "m")]
    raise ValueError(f"tcgen05 ld/st shape {shape!r} is not one of {list(LD_SHAPES)}")


def ld_fragment(shape: str, num: int, rows: int = 128) -> Layout:
    """Registers of a warpgroup after ``tcgen05.ld.{shape}.x{num}`` over (rows, columns), thread
    axis ``tx`` (0..rows-ish of the warpgroup), register axis ``m``, D-layout TMEM.

    32x32b: warp w reads lanes 32w..32w+31 (rows ∈ {32, 64, 96, 128}).  The 16-lane shapes: warp w
    reads lanes 32w..32w+15 (rows = 64: 16 rows per warp) or, with rows = 128, issues twice, at
    lanes 32w and 32w+16, the second into the next registers.  Kernels reach it as
    ``Ax.cuda.tcgen05_fragment``: a register tile laid out as ``C ⊗ tcgen05_fragment(...)`` is
    what ``Ax.copy`` from tensor memory loads with that instruction; other shapes or row counts
    are a ``ValueError``."""
    per = _REGS_PER_NUM[shape] * num
    riters, citers = _warp_fragment(shape, num)
    if shape == "32x32b":
        if rows % 32 or not 32 <= rows <= 128:
            raise ValueError(f"tcgen05 32x32b fragment: {rows} rows is not 32, 64, 96 or 128")
        head = [Iter(rows // 32, 32, "tx")]
    elif rows == 64:
        head = [Iter(4, 32, "tx")]
    elif rows == 128:
        head = [Iter(4, 32, "tx"), Iter(2, per, "m")]
    else:
        raise ValueError(f"tcgen05 {shape} fragment: {rows} rows is not 64 or 128")
    return Layout(tuple(head + riters + citers))


#: input dtypes of ``kind::f16`` with their instruction-descriptor codes (A/B type fields); fp8 is
#: ``kind::f8f6f4``, which is not emitted
KIND_F16 = {"float16": 0, "bfloat16": 1}


def instr_descriptor(dtype: str, m: int, n: int, trans_a: int, trans_b: int) -> int:
    """The 32-bit instruction descriptor of ``kind::f16`` with an fp32 D (PTX ISA "Instruction
    descriptor format"): D type F32 = 1 (bits 4-5), A/B type F16 = 0 / BF16 = 1 (bits 7-9, 10-12),
    transpose A/B (bits 15, 16: 1 for MN-major), N >> 3 (bits 17-22), M >> 4 (bits 24-28); dense,
    no negation, no shift."""
    t = KIND_F16[dtype]
    if n % 8 or not 8 <= n <= 256 or m % 16 or not 64 <= m <= 256:
        raise ValueError(f"tcgen05 instruction descriptor: M={m}, N={n} out of range")
    return (1 << 4) | (t << 7) | (t << 10) | (trans_a << 15) | (trans_b << 16) | ((n >> 3) << 17) | ((m >> 4) << 24)


# --- the CTA pair (cta_group::2) read from the layouts ---------------------------------------------

def pair(t, dim: int):
    """``t`` (this CTA's tile) seen as the CTA pair's: dimension ``dim`` doubled, the first half on
    the even CTA (``cta`` 0), the second on the odd one, same storage offsets (the layout
    ``S[2:1@cta]`` tiled outside ``t``'s along ``dim``)."""
    from dataclasses import replace
    from axe.layout import tile
    from axe.layout import SwizzledLayout
    shape_a = tuple(2 if d == dim else 1 for d in range(t.rank))
    outer = Layout(tuple(Iter(e, 1 if e > 1 else 1, "cta") for e in shape_a))
    inner = t.layout
    if isinstance(inner, SwizzledLayout):
        L = inner.with_inner(tile(outer, shape_a, inner.inner, t.shape))
    else:
        L = tile(outer, shape_a, inner, t.shape)
    shape = tuple(s * a for s, a in zip(t.shape, shape_a))
    return replace(t, layout=L, shape=shape, starts=tuple(0 for _ in shape), root=t.origin, name=f"{t.name}.pair")


def local_of_pair(t, dim: int):
    """``(local tensor, True)`` when ``t``'s layout splits dimension ``dim`` (only) over the two
    CTAs of a pair as its outermost iter, ``(t, False)`` when it names no ``cta``; else a reason."""
    from dataclasses import replace
    from axe.layout import SwizzledLayout
    inner = t.layout.inner if isinstance(t.layout, SwizzledLayout) else t.layout
    if "cta" not in inner.axes():
        return t, False
    if inner.replica or inner.offset["cta"]:
        return f"{t.name}: layout {t.layout} replicates or offsets over cta"
    g = group(inner, t.shape)
    blocks = [list(b) for b in g.blocks]
    for d, b in enumerate(blocks):
        ctas = [it for it in b if it[2] == "cta" and it[0] > 1]
        if d != dim and ctas:
            return f"{t.name}: layout {t.layout} splits dimension {d} over the CTA pair (expected only {dim})"
        if d == dim:
            real = [it for it in b if it[0] > 1]
            if len(ctas) != 1 or ctas[0][0] != 2 or real[0] != ctas[0]:
                return (f"{t.name}: dimension {dim} of {t.layout} is not split in two halves over the pair "
                        f"(outermost iter 2:1@cta)")
            blocks[d] = real[1:] or [(1, 1, "m")]
    shard = tuple(Iter(*it) for b in blocks for it in b)
    L = Layout(shard, inner.replica, {a: v for a, v in inner.offset.items() if a != "cta"})
    if isinstance(t.layout, SwizzledLayout):
        L = t.layout.with_inner(L)
    shape = tuple(s // 2 if d == dim else s for d, s in enumerate(t.shape))
    return replace(t, layout=L, shape=shape, starts=tuple(0 for _ in shape), root=t.origin), True


# --- gemm ------------------------------------------------------------------------------------------

def _tmem_outer(t, shape, atom, ashape, what):
    """``C_out`` with ``t.layout = C_out ⊗ atom`` placing atoms along TCol only, or a reason."""
    C = tile_of(t.layout, shape, atom, ashape)
    if C is None:
        return f"{what} TMEM layout {t.layout} over {list(shape)} is not a tiling C ⊗ {atom} over {list(ashape)}"
    if any(a != "TCol" for e, _, a in C.shard if e > 1) or C.replica or C.offset["TLane"]:
        return f"{what}: placement {C} of the {list(ashape)} accumulators is not along TMEM columns alone"
    return C


@dataclass
class Tcgen05Plan:
    cta_group: int
    n: int                 # N of one instruction (the pair's N for cta_group::2)
    m_tiles: int
    n_tiles: int
    k_tiles: int
    acc_outer: Layout      # C (local) = acc_outer ⊗ D(n_local)
    a: object              # SmemOperand, or the TMEM A tensor (ts)
    b: SmemOperand
    dtype: str
    idesc: int
    barriers: tuple = ()
    multicast: int | None = None
    local: dict = field(default_factory=dict)   # the local (one CTA's) operands

    @property
    def ts(self) -> bool:
        return not isinstance(self.a, SmemOperand)

    @property
    def m(self) -> int:
        return 128 * self.cta_group

    @property
    def k_inst(self) -> int:
        """K elements per instruction (32 bytes: 16 for kind::f16)."""
        return k_inst(self.b.elem_bytes)

    def instruction(self) -> str:
        return f"tcgen05.mma.cta_group::{self.cta_group}.kind::f16"

    def steps(self):
        """The instructions in issue order: ``(mi, ni, ki, d_col, a (mn0, k0), b (mn0, k0),
        enable_input_d)`` with coordinates in the local operands; ``d_col`` is the TMEM column (in
        elements) of the instruction's D, a view's column offset included."""
        nb = self.n // self.cta_group                       # B columns (N) each CTA holds
        for mi in range(self.m_tiles):
            for ni in range(self.n_tiles):
                (c,) = self.acc_outer.map((mi, ni), (self.m_tiles, self.n_tiles))
                for ki in range(self.k_tiles):
                    k0 = ki * self.k_inst
                    yield (mi, ni, ki, c["TCol"] * self.n, (mi * 128, k0), (ni * nb, k0), ki)

    def describe(self) -> str:
        count = self.m_tiles * self.n_tiles * self.k_tiles
        a = (f"A in TMEM {self.a.layout}" if self.ts else self.a.describe())
        done = (f"commit → {', '.join(self.barriers)}" + (f" (multicast {self.multicast:#b})" if self.multicast else "")
                if self.barriers else "no commit")
        return (f"{count} x {self.instruction()} M={self.m} N={self.n} K={self.k_inst} ({'ts' if self.ts else 'ss'}; "
                f"{self.m_tiles}x{self.n_tiles}x{self.k_tiles} m/n/k); idesc {self.idesc:#010x}; "
                f"D = {self.acc_outer} ⊗ {d_layout(self.n)} in TMEM; {a}; {self.b.describe()}; {done}")


def _barrier_name(b) -> str:
    bar = getattr(b, "bar", b)
    stage = getattr(b, "stage", None)
    return f"{getattr(bar, 'name', 'mbarrier')}[{stage}]" if stage is not None else getattr(bar, "name", "mbarrier")


@declining()
def tcgen05_plan(call, ctx):
    """A :class:`Tcgen05Plan`, or the reason the call does not match tcgen05.mma."""
    why = is_blackwell(ctx)
    if why:
        return why
    C, A, B = call.operands["C"], call.operands["A"], call.operands["B"]
    sc = call.scope
    if sc.kind != "thread":
        return (f"tcgen05.mma is issued by one thread; the scope is {sc.describe()} "
                f"(use Ax.cuda.elect_one() in the issuing warp)")
    if C.mem != "tmem":
        return f"C ({C.name}) is in {C.mem} memory; the tcgen05 accumulator lives in tensor memory"
    # the CTA pair, from the layouts
    locs = [local_of_pair(C, 0), local_of_pair(A, 0), local_of_pair(B, 1)]
    for x in locs:
        if isinstance(x, str):
            return x
    (c_loc, c2), (a_loc, a2), (b_loc, b2) = locs
    if len({c2, a2, b2}) != 1:
        return (f"cta_group::2 needs A's rows, B's columns and C's rows all split over the CTA pair "
                f"(C {c2}, A {a2}, B {b2})")
    group_ = 2 if c2 else 1
    (M, K), N_total = a_loc.shape, B.shape[1]
    if A.dtype not in KIND_F16:
        return (f"tcgen05.mma kind::f16 multiplies {' or '.join(KIND_F16)}; A and B are {A.dtype} "
                "(kind::f8f6f4 is not emitted)")
    k_el = k_inst(A.elem_bytes)
    if M % 128 or K % k_el:
        return (f"M={M} (per CTA) and K={K} are not multiples of 128 and {k_el} (M=64 data-path layouts "
                f"are not used)")
    n_step, n_min = 16, 16 * group_
    chosen = pick_n([n for n in range(min(256, N_total), n_min - 1, -n_step) if N_total % n == 0],
                    lambda n: _tmem_outer(c_loc, (M, N_total), d_layout(n), (128, n), f"C ({C.name})"),
                    lambda n: smem_operand(b_loc, "B", n // group_, unit="tcgen05.mma"))
    if isinstance(chosen, str):
        return f"no N in {n_min}..256 (step {n_step}) fits: " + chosen
    n, outer, b = chosen
    if A.mem == "shared":
        a = smem_operand(a_loc, "A", 128, unit="tcgen05.mma")
        if isinstance(a, str):
            return a
        trans_a = a.trans
    elif A.mem == "tmem":
        aw = _tmem_outer(a_loc, (M, K), d_layout(k_el), (128, k_el), f"A ({A.name})")
        if isinstance(aw, str):
            return aw
        a, trans_a = a_loc, 0
    else:
        return f"A ({A.name}) is in {A.mem} memory; tcgen05.mma reads A from shared or tensor memory"
    bars = call.config.get("barrier", ())
    bars = tuple(bars) if isinstance(bars, (list, tuple)) else (bars,)
    mc = call.config.get("multicast")
    if mc is not None and (not isinstance(mc, int) or not 0 < mc < 1 << 16):
        return f"multicast={mc!r}: a CTA mask (int, 16 bits)"
    if group_ == 2 and bars and mc is None:
        return "cta_group::2: pass multicast=0b11 so the commit reaches both CTAs' barriers"
    idesc = instr_descriptor(A.dtype, 128 * group_, n, trans_a, b.trans)
    return Tcgen05Plan(group_, n, M // 128, N_total // n, K // k_el, outer, a, b, A.dtype, idesc,
                       tuple(_barrier_name(x) for x in bars), mc, {"C": c_loc, "A": a_loc, "B": b_loc, "bars": bars})


def _tmem_addr(t, lane, col):
    """TMEM address of layout coordinates (lane, col in elements) of ``t``: base + lane<<16 + cells."""
    from tvm.script import tirx as T
    cells = col * (8 * t.elem_bytes) // 32
    return T.Cast("uint32", t.buffer[0] + T.uint32((lane << 16) + cells))


def _bar_ptr(b):
    return b.ptr() if hasattr(b, "ptr") else b


def commit(barriers, cta_group: int = 1, multicast=None):
    """``tcgen05.commit`` on each barrier: it arrives once when every tcgen05 operation this thread
    issued before has completed (``multicast``: on the barrier at the same offset in each CTA of
    the mask)."""
    from tvm.script import tirx as T
    g = f"cta_group::{cta_group}"
    for b in barriers:
        ptr = _bar_ptr(b)
        if multicast:
            T.evaluate(T.ptx[f"tcgen05.commit.{g}.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64"](
                ptr, T.uint16(multicast)))
        else:
            T.evaluate(T.ptx[f"tcgen05.commit.{g}.mbarrier::arrive::one.shared::cluster.b64"](ptr))


def _emit_mma(call, plan: Tcgen05Plan, ctx):
    from tvm.script import tirx as T
    C, A, B = plan.local["C"], plan.local["A"], plan.local["B"]
    op = T.ptx[plan.instruction()]
    b_hi = plan.b.high_bits(100)
    a_hi = None if plan.ts else plan.a.high_bits(100)
    (c0,) = C.layout.map((0, 0), C.shape)
    lanes_mask = [T.uint32(0)] * (4 * plan.cta_group)
    for mi, ni, ki, dcol, (am, ak), (bn, bk), k in plan.steps():
        # dcol is C's own column: acc_outer = C_out carries the view's TCol offset (in atoms)
        d = _tmem_addr(C, c0["TLane"], dcol)
        bd = emit_descriptor(plan.b, B, bn, bk, b_hi)
        enable = T.bool(bool(call.attrs["accumulate"] or k > 0))
        if plan.ts:
            (ca,) = A.layout.map((am, ak), A.shape)
            ad = _tmem_addr(A, ca["TLane"], ca["TCol"])
        else:
            ad = emit_descriptor(plan.a, A, am, ak, a_hi)
        T.evaluate(op(d, ad, bd, T.uint32(plan.idesc), *lanes_mask, enable))
    if plan.local["bars"]:
        commit(plan.local["bars"], plan.cta_group, plan.multicast)


add_schedule("gemm", "tcgen05", "cuda", priority=45,
             requires="sm_100a, one issuing thread; C in TMEM = C_out ⊗ data-path D; A, B shared = C ⊗ core-matrix "
                      "atom (K- or MN-major, any swizzle) or A in TMEM; cta_group::2 when A, B, C split over a "
                      "CTA pair (axis cta)",
             check=tcgen05_plan, emit=_emit_mma)


# --- copies between TMEM and registers --------------------------------------------------------------

@dataclass
class LdPlan:
    store: bool            # tcgen05.st (registers → TMEM) rather than ld
    shape: str
    num: int
    rows: int
    outer: Layout          # registers = outer ⊗ ld_fragment(shape, num, rows)
    width: int             # columns (elements) one instruction covers
    lane0: int
    col0: int

    @property
    def per_instr(self) -> int:
        return _REGS_PER_NUM[self.shape] * self.num

    def instruction(self) -> str:
        return f"tcgen05.{'st' if self.store else 'ld'}.sync.aligned.{self.shape}.x{self.num}.b32"

    def steps(self):
        """``(register base, lane offset within the warp's slab, column)``: per instruction of one
        warp (16-lane shapes over 128 rows: two per column block, lanes +0 and +16)."""
        reps = self.outer.size
        halves = 2 if self.shape != "32x32b" and self.rows == 128 else 1
        for q in range(reps):
            (c,) = self.outer.map((0, q), (1, reps))
            for h in range(halves):
                yield c["m"] * self.per_instr * halves + h * self.per_instr, 16 * h, self.col0 + q * self.width

    def describe(self) -> str:
        n = self.outer.size * (2 if self.shape != "32x32b" and self.rows == 128 else 1)
        wait = "wait::st" if self.store else "wait::ld"
        return (f"{n} x {self.instruction()} per warp; registers = {self.outer} ⊗ "
                f"{ld_fragment(self.shape, self.num, self.rows)}; TMEM lanes {self.lane0}.., column {self.col0}; {wait}")


@declining()
def ld_plan(call, ctx):
    """An :class:`LdPlan` for a TMEM ↔ registers copy, or the reason it does not fit."""
    why = is_blackwell(ctx)
    d, s = call.operands["dst"], call.operands["src"]
    if "tmem" not in (d.mem, s.mem):
        return "no operand in tensor memory"
    if why:
        return why
    store = d.mem == "tmem"
    tm, rg = (d, s) if store else (s, d)
    if rg.mem != "local":
        return f"{rg.name} is in {rg.mem} memory; tcgen05.{'st' if store else 'ld'} moves TMEM ↔ registers"
    if tm.elem_bytes != 4 or rg.elem_bytes != 4:
        return f"{tm.name} holds {tm.dtype}: tcgen05 ld/st moves 32-bit elements here (no pack::16b)"
    if tm.rank != 2 or rg.rank != 2:
        return "tcgen05 ld/st copies 2-D (rows, columns) tiles"
    rows, cols = tm.shape
    sc = call.scope
    if sc.threads not in (32, 64, 96, 128) or sc.first_thread % 128 or sc.kind == "thread":
        return (f"tcgen05 ld/st: warp w reaches TMEM lanes 32·(w % 4)..; the scope {sc.describe()} must be "
                f"1-4 warps starting at a warpgroup")
    (c0,) = tm.layout.map((0, 0), tm.shape)
    lane0, col0 = c0["TLane"], c0["TCol"]
    win = tile_of(tm.layout, tm.shape, d_layout(cols, rows), (rows, cols))
    if win is None or win.size != 1:
        return f"{tm.name}: TMEM layout {tm.layout} is not a window of data-path layout D (row i in lane i)"
    if lane0 % 32:
        return f"{tm.name}: the window starts at lane {lane0}, not at a warp's 32-lane slab"
    reasons = []
    for shape, w in LD_SHAPES.items():
        for num in (128, 64, 32, 16, 8, 4, 2, 1):
            width = w * num
            if cols % width or _REGS_PER_NUM[shape] * num > 128:
                continue
            try:
                atom = ld_fragment(shape, num, rows)
            except ValueError as err:
                reasons.append(f"{shape}: {err}")
                break
            need = rows if shape == "32x32b" else 128        # one warp per 32-lane slab
            if sc.threads != need:
                reasons.append(f"{shape}: {rows} rows are read by {need} threads, the scope has {sc.threads}")
                break
            outer = tile_of(rg.layout, (rows, cols), atom, (rows, width))
            if outer is None or any(a != "m" for a in outer.axes()) or outer.replica:
                continue
            return LdPlan(store, shape, num, rows, outer, width, lane0, col0)
        reasons.append(f"{shape}: register layout {rg.layout} is no tiling C ⊗ its fragment for any .num")
    return "; ".join(reasons)


def _emit_ld(call, plan: LdPlan, ctx):
    from tvm.script import tirx as T
    d, s = call.operands["dst"], call.operands["src"]
    tm, rg = (d, s) if plan.store else (s, d)
    regs = rg.flat()
    words = rg.buffer.view("uint32") if rg.dtype != "uint32" else regs
    rb = 0 if is_zero(rg.base) else rg.base
    warp = call.scope.local_tx() // 32
    op = T.ptx[plan.instruction()]
    # order after the thread sync (an mbarrier wait on a tcgen05.commit, a barrier) that published the data
    T.evaluate(T.ptx["tcgen05.fence::after_thread_sync"]())
    for base, dl, col in plan.steps():
        lane = warp * 32 + (plan.lane0 + dl)
        addr = T.Cast("uint32", tm.buffer[0] + T.shift_left(T.Cast("uint32", lane), T.uint32(16)) + T.uint32(col))
        vec = [words[rb + base + i] for i in range(plan.per_instr)]
        T.evaluate(op(addr, *vec) if plan.store else op(*vec, addr))
    if plan.store:
        T.evaluate(T.ptx["tcgen05.wait::st.sync.aligned"]())
    else:
        T.evaluate(T.ptx["tcgen05.wait::ld.sync.aligned"]())
        if rg.dtype == "float32":
            n = plan.per_instr * plan.outer.size * (2 if plan.shape != "32x32b" and plan.rows == 128 else 1)
            fence_registers([regs[rb + i] for i in range(n)])


add_schedule("copy", "tcgen05_ld", "cuda", priority=50,
             requires="sm_100a, 1-4 warps from a warpgroup boundary; TMEM window of data-path D; registers = "
                      "C ⊗ a 32x32b/16x256b/16x128b/16x64b fragment (C on registers)",
             check=ld_plan, emit=_emit_ld)


# --- shared → TMEM ------------------------------------------------------------------------------------

@dataclass
class CpPlan:
    src: SmemOperand
    m_tiles: int
    k_tiles: int
    lane0: int
    col0: int

    @property
    def k_inst(self) -> int:
        """Elements per lane row of one copy: 256 bits, the K of one tcgen05.mma (32 bytes)."""
        return k_inst(self.src.elem_bytes)

    def describe(self) -> str:
        return (f"{self.m_tiles * self.k_tiles} x tcgen05.cp.cta_group::1.128x256b "
                f"(128 rows × {self.k_inst} elements each); "
                f"{self.src.describe()}; TMEM lanes {self.lane0}.., column {self.col0}")


@declining()
def cp_plan(call, ctx):
    """A :class:`CpPlan` for shared → TMEM, or the reason it does not fit."""
    d, s = call.operands["dst"], call.operands["src"]
    if d.mem != "tmem" or s.mem != "shared":
        return "tcgen05.cp copies shared memory into tensor memory"
    why = is_blackwell(ctx)
    if why:
        return why
    if call.scope.kind != "thread":
        return f"tcgen05.cp is issued by one thread; the scope is {call.scope.describe()}"
    if d.elem_bytes != 2 or d.rank != 2:
        return f"{d.name}: tcgen05.cp here moves 2-D 16-bit tiles (the A operand of tcgen05.mma's ts form)"
    rows, cols = d.shape
    k_el = k_inst(d.elem_bytes)
    if rows % 128 or cols % k_el:
        return f"{d.name}: {rows}x{cols} is not a whole number of 128x{k_el} blocks"
    win = _tmem_outer(d, (rows, cols), d_layout(k_el), (128, k_el), d.name)
    if isinstance(win, str):
        return win
    op = smem_operand(s, "A", 128, unit="tcgen05.cp")
    if isinstance(op, str):
        return op
    if op.major != "K":
        return f"{s.name}: tcgen05.cp copies rows into lanes: the shared tile must be K-major, not {op.major}-major"
    (c0,) = d.layout.map((0, 0), d.shape)
    return CpPlan(op, rows // 128, cols // k_el, c0["TLane"], c0["TCol"])


def _emit_cp(call, plan: CpPlan, ctx):
    from tvm.script import tirx as T
    d, s = call.operands["dst"], call.operands["src"]
    hi = plan.src.high_bits(100)
    for mi in range(plan.m_tiles):
        for ki in range(plan.k_tiles):
            (c,) = d.layout.map((mi * 128, ki * plan.k_inst), d.shape)
            addr = _tmem_addr(d, c["TLane"], c["TCol"])
            desc = emit_descriptor(plan.src, s, mi * 128, ki * plan.k_inst, hi)
            T.evaluate(T.ptx["tcgen05.cp.cta_group::1.128x256b"](addr, desc))
    bars = call.config.get("barrier", ())
    if bars:
        commit(tuple(bars) if isinstance(bars, (list, tuple)) else (bars,))


add_schedule("copy", "tcgen05_cp", "cuda", priority=50,
             requires="sm_100a, one thread; shared 16-bit K-major core-matrix tiling → TMEM data-path D",
             check=cp_plan, emit=_emit_cp)
