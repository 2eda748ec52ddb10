"""Shared-memory matrix operands of the tensor-core instructions (``wgmma`` on sm_90a,
``tcgen05.mma`` / ``tcgen05.cp`` on sm_100a): the canonical core-matrix atoms, the recovery of a
shared layout as a tiling ``C ⊗ atom`` (``tile_of``), and the 64-bit descriptors built from C.

Both generations read the same canonical layouts (PTX ISA: wgmma "Matrix Descriptor Format" and
tcgen05 "Shared Memory Descriptor"; the LBO/SBO meanings per major-ness and swizzle are the same).
They differ only in the descriptor's high bits: sm_90 puts the layout type in bits 62-63 (128B=1,
64B=2, 32B=3); sm_100 puts the fixed version 0b001 in bits 46-48 and the swizzle mode in bits
61-63 (128B=2, 64B=4, 32B=6).  :class:`SmemOperand` holds what the layout algebra recovered;
:meth:`SmemOperand.high_bits` encodes it for either architecture.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from axe.layout import Layout, SwizzledLayout, Swizzle, group, tile_of
from axe.layout.canonical import merge_chain
from axe.layout.coord import ZERO
from axe.layout.iters import Iter
from axe.schedules.emit import is_zero

__all__ = ["K_INST_BYTES", "k_inst", "SWIZZLE_CODE", "SWIZZLE_CODE_SM100", "core_atom", "SmemOperand", "smem_operand",
           "descriptor_bits", "descriptor_bits_sm100", "emit_descriptor", "pick_n"]

#: K one instruction reads, in bytes, for every input type: wgmma k16 of 16-bit data and k32 of fp8,
#: tcgen05.mma kind::f16 k16 — two 16-byte core matrices (the PTX ISA's canonical layouts span 2T
#: elements of K, T = 16 bytes of elements)
K_INST_BYTES = 32
SWIZZLE_CODE = {0: 0, 128: 1, 64: 2, 32: 3}   # descriptor bits 62-63 (sm_90 layout type)
SWIZZLE_CODE_SM100 = {0: 0, 128: 2, 64: 4, 32: 6}   # descriptor bits 61-63 (sm_100 swizzling mode)
_SW_BITS = {32: 1, 64: 2, 128: 3}


def k_inst(elem_bytes: int) -> int:
    """K elements one instruction reads from ``elem_bytes``-byte data (:data:`K_INST_BYTES`' worth):
    16 of 16-bit data, 32 of fp8."""
    if elem_bytes not in (1, 2, 4):
        raise ValueError(f"tensor-core operand: {elem_bytes}-byte elements are not 1, 2 or 4 bytes")
    return K_INST_BYTES // elem_bytes


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
    from .schedules.tma import swizzle_mode
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

    def high_bits(self, arch: int = 90) -> int:
        """Descriptor bits 16-63 (LBO, SBO, layout type; sm_100: version and swizzling mode too);
        the start address fills bits 0-13."""
        if arch >= 100:
            return descriptor_bits_sm100(0, self.lbo, self.sbo, self.swizzle)
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


def descriptor_bits_sm100(start_bytes: int, lbo: int, sbo: int, swizzle: int) -> int:
    """The sm_100 shared-memory descriptor (tcgen05): address, LBO and SBO in 16-byte units (bits
    0-13, 16-29, 32-45), the fixed version 0b001 (bits 46-48), base offset 0 and relative LBO mode
    (bits 49-52 zero) and the swizzling mode (bits 61-63: none 0, 128B 2, 64B 4, 32B 6)."""
    for what, v in (("start address", start_bytes), ("LBO", lbo), ("SBO", sbo)):
        if v % 16 or v >> 18:
            raise ValueError(f"tcgen05 descriptor: {what} {v} bytes is not a 16-byte multiple below 2^18")
    return (((start_bytes >> 4) & 0x3FFF) | ((lbo >> 4) << 16) | ((sbo >> 4) << 32) | (1 << 46)
            | (SWIZZLE_CODE_SM100[swizzle] << 61))


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


def smem_operand(t, operand: str, mn_inst: int, unit: str = "wgmma"):
    """:class:`SmemOperand` for shared A (``operand="A"``) or B read ``mn_inst`` MN rows per
    instruction, or the reason no descriptor describes it."""
    import tvm
    name = f"{operand} ({t.name})"
    if t.mem != "shared":
        return f"{name} is in {t.mem} memory; {unit} reads it from shared memory"
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
        # per instruction: mn_inst MN rows, K_INST_BYTES of K (k_el elements)
        k_el = k_inst(eb)
        mn_count = max(mn_inst // mn_atom, 1)
        k_count = max(k_el // k_atom, 1)
        if major == "K":
            if k_el % k_atom and k_atom % k_el:
                reasons.append(f"K-major: atom width {k_atom} and k{k_el} do not nest")
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


def emit_descriptor(op: SmemOperand, t, mn0, k0, hi):
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


def pick_n(ns, outer_of, b_of):
    """The first n of ``ns`` whose accumulator placement ``outer_of(n)`` and B operand ``b_of(n)``
    both exist: ``(n, outer, b)``; else the reasons (a str, the middle ones elided)."""
    reasons = []
    for n in ns:
        outer = outer_of(n)
        if isinstance(outer, str):
            reasons.append(f"N={n}: {outer}")
            continue
        b = b_of(n)
        if isinstance(b, str):
            reasons.append(f"N={n}: {b}")
            continue
        return n, outer, b
    if len(reasons) > 3:
        reasons = reasons[:2] + [f"... {len(reasons) - 3} more N ...", reasons[-1]]
    return " | ".join(reasons)
