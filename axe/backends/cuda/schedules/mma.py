"""Warp GEMM: ``mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32`` (sm_80+).

All three operands are in registers.  Their layouts must be tilings (``tile_of``) of the
instruction's fragments (PTX ISA, mma.m16n8k16; g = lane//4, t = lane%4):

- A over (16, 16): ``S[(2,8,2,4,2):(2@reg,4@lane,4@reg,1@lane,1@reg)]`` — a0a1 (g, 2t..),
  a2a3 (g+8, 2t..), a4a5 (g, 2t+8..), a6a7 (g+8, 2t+8..);
- B over (16, 8) (K × N): ``S[(2,4,2,8):(2@reg,1@lane,1@reg,4@lane)]`` — b0b1 (k 2t.., n g),
  b2b3 (k 2t+8.., n g);
- C over (16, 8): ``S[(2,8,4,2):(2@reg,4@lane,1@lane,1@reg)]`` — c0c1 (g, 2t..), c2c3 (g+8, 2t..);

with the outer placement on registers only (a fragment fills the warp).  The lane axis may be
written ``tx`` in a one-warp scope.  Registers are passed in PTX order, so the i-th register of a
fragment is the tile's register ``outer·span + i``.  Operands get into registers with the ldmatrix
schedule (``Ax.copy(Ar, As)``; B through the transposed views, whose (N, K) fragment is a tiling
of the 8×8 ldmatrix atom).
"""

from __future__ import annotations

from dataclasses import dataclass

from axe.layout import Layout
from axe.layout.iters import Iter
from axe.schedules.emit import is_zero
from axe.schedules.registry import add_schedule

from .wgmma import _register_outer

__all__ = ["a_fragment", "b_fragment", "c_fragment", "DTYPES", "MmaPlan", "mma_plan"]

SHAPE = (16, 8, 16)   # m, n, k
#: input dtypes of the instruction, with their PTX type names (fp8 mma.sync is sm_89+ m16n8k32: not emitted)
DTYPES = {"float16": "f16", "bfloat16": "bf16"}


def a_fragment(lane: str = "lane") -> Layout:
    """The m16n8k16 A fragment over (16, 16) (8 b16 registers per lane)."""
    return Layout((Iter(2, 2, "m"), Iter(8, 4, lane), Iter(2, 4, "m"), Iter(4, 1, lane), Iter(2, 1, "m")))


def b_fragment(lane: str = "lane") -> Layout:
    """The m16n8k16 B fragment over (16, 8), K × N (4 b16 registers per lane)."""
    return Layout((Iter(2, 2, "m"), Iter(4, 1, lane), Iter(2, 1, "m"), Iter(8, 4, lane)))


def c_fragment(lane: str = "lane") -> Layout:
    """The m16n8 fp32 accumulator over (16, 8) (4 registers per lane)."""
    return Layout((Iter(2, 2, "m"), Iter(8, 4, lane), Iter(4, 1, lane), Iter(2, 1, "m")))


@dataclass
class MmaPlan:
    tiles: tuple           # (m, n, k) instruction counts
    outer: dict            # operand -> placement C of fragments on registers
    dtype: str
    lane: str

    def instruction(self) -> str:
        t = DTYPES[self.dtype]
        return f"mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32"

    def describe(self) -> str:
        m, n, k = self.tiles
        frag = {"A": a_fragment(self.lane), "B": b_fragment(self.lane), "C": c_fragment(self.lane)}
        parts = "; ".join(f"{k_} = {self.outer[k_]} ⊗ {frag[k_]}" for k_ in ("C", "A", "B"))
        return f"{m * n * k} x {self.instruction()} ({m}x{n}x{k} m/n/k); {parts}"


def _lane_axis(t):
    axes = set(t.thread_axes())
    if axes == {"lane"} or axes == {"tx"}:
        return axes.pop()
    return None


def mma_plan(call, ctx):
    """An :class:`MmaPlan`, or the reason the call does not match mma.sync m16n8k16."""
    C, A, B = call.operands["C"], call.operands["A"], call.operands["B"]
    if ctx.arch < 80:
        return f"mma.sync m16n8k16 with bf16/f32 needs sm_80+, target is {ctx.target}"
    if A.dtype not in DTYPES:
        return f"mma.sync m16n8k16 multiplies {' or '.join(DTYPES)}; A and B are {A.dtype}"
    sc = call.scope
    if sc.threads != 32:
        return f"mma.sync is issued by one warp; the scope is {sc.describe()} (use Ax.warps(i, i+1) or Ax.each_warp())"
    for name, t in (("C", C), ("A", A), ("B", B)):
        if t.mem != "local":
            return f"{name} ({t.name}) is in {t.mem} memory; mma.sync takes registers (load with ldmatrix)"
    (M, K), N = A.shape, B.shape[1]
    if M % 16 or N % 8 or K % 16:
        return f"M={M}, N={N}, K={K} are not multiples of 16, 8 and 16"
    lane = _lane_axis(C)
    if lane is None:
        return f"C ({C.name}) layout {C.layout} names thread axes {sorted(C.thread_axes())}, not lane (or tx) alone"
    outer = {}
    for name, t, frag, shape, fshape in (("C", C, c_fragment(lane), (M, N), (16, 8)),
                                         ("A", A, a_fragment(lane), (M, K), (16, 16)),
                                         ("B", B, b_fragment(lane), (K, N), (16, 8))):
        if _lane_axis(t) != lane:
            return f"{name} ({t.name}) layout {t.layout} names threads differently from C ({C.layout})"
        got = _register_outer(t, shape, frag, fshape, f"{name} ({t.name})")
        if isinstance(got, str):
            return got
        outer[name] = got
    return MmaPlan((M // 16, N // 8, K // 16), outer, A.dtype, lane)


def _regs(t, outer, index, grid, span, words=False):
    """The registers of fragment ``index`` of ``t`` in PTX order (b32 words for 16-bit operands)."""
    (c,) = outer.map(index, grid)
    base = c["m"] * span + (0 if is_zero(t.base) else t.base)
    if words:
        buf = t.buffer.view("uint32")
        return [buf[(base + 2 * i) // 2] for i in range(span // 2)]
    return [t.flat()[base + i] for i in range(span)]


def _emit(call, plan: MmaPlan, ctx):
    from tvm.script import tirx as T
    C, A, B = call.operands["C"], call.operands["A"], call.operands["B"]
    mt, nt, kt = plan.tiles
    op = T.ptx[plan.instruction()]
    zero = [T.float32(0)] * 4
    for mi in range(mt):
        for ni in range(nt):
            d = _regs(C, plan.outer["C"], (mi, ni), (mt, nt), 4)
            for ki in range(kt):
                a = _regs(A, plan.outer["A"], (mi, ki), (mt, kt), 8, words=True)
                b = _regs(B, plan.outer["B"], (ki, ni), (kt, nt), 4, words=True)
                c = d if (call.attrs["accumulate"] or ki > 0) else zero
                T.evaluate(op(*d, *a, *b, *c))


# mma.sync.aligned.m16n8k16.row.col f32 += f16/bf16, all operands in registers.
add_schedule("gemm", "mma_sync", "cuda", priority=20,
             requires="one warp; A, B, C registers = C_out ⊗ the m16n8k16 A/B/C fragments (tile_of)",
             check=mma_plan, emit=_emit)
