"""A NumPy model of the tcgen05 behaviour axe's Blackwell schedules rely on, written from the PTX ISA
(9.7.16 "TensorCore 5th Generation": Table 40 shared memory descriptor, Table 41 swizzle pattern
starts, Table 42 instruction descriptor for kind::f16, the canonical shared layouts, the matrix
fragments of tcgen05.ld/st, the data-path layouts of tcgen05.mma's D, tcgen05.cp 128x256b).

It decodes descriptors from their bits (it never sees axe's plan objects), reads shared memory as
bytes, keeps tensor memory as 128 lanes × 512 columns of 32-bit cells per CTA, and executes
``tcgen05.mma`` (ss and ts, cta_group::1 M=128 and cta_group::2 M=256 over a CTA pair),
``tcgen05.cp.128x256b`` and ``tcgen05.ld``.  Everything is checked: a reserved or fixed field
with another value, an address outside the memory, an unsupported shape raises ``ModelError``.
"""

from __future__ import annotations

import numpy as np

LANES, COLUMNS = 128, 512


class ModelError(ValueError):
    """The model met something the ISA does not define (or axe promised not to use)."""


# --- Table 40: shared memory descriptor ------------------------------------------------------------

#: bits 61-63 → swizzle width in bytes (0: none); 1 (128B with 32B atoms), 3, 5, 7 are not used by axe
SWIZZLE_MODES = {0: 0, 2: 128, 4: 64, 6: 32}
#: Table 41: the repeating pattern of each swizzle starts on this boundary (bytes)
PATTERN_START = {128: 1024, 64: 512, 32: 256}


def field(x: int, lo: int, hi: int) -> int:
    """Bits lo..hi (inclusive) of x."""
    return (x >> lo) & ((1 << (hi - lo + 1)) - 1)


def decode_smem_desc(d: int) -> dict:
    """Table 40's fields (addresses and offsets in bytes: the encoded values << 4)."""
    if field(d, 14, 15) or field(d, 30, 31):
        raise ModelError(f"descriptor {d:#x}: reserved bits 14-15/30-31 set")
    if field(d, 46, 48) != 0b001:
        raise ModelError(f"descriptor {d:#x}: bits 46-48 must be the fixed constant 0b001, got {field(d, 46, 48):#b}")
    if field(d, 53, 60):
        raise ModelError(f"descriptor {d:#x}: bits 53-60 must be 0")
    mode = field(d, 61, 63)
    if mode not in SWIZZLE_MODES:
        raise ModelError(f"descriptor {d:#x}: swizzle mode {mode} not modelled (valid: 0, 1, 2, 4, 6)")
    return {"start": field(d, 0, 13) << 4, "lbo": field(d, 16, 29) << 4, "sbo": field(d, 32, 45) << 4,
            "base_offset": field(d, 49, 51), "lbo_mode": field(d, 52, 52), "swizzle": SWIZZLE_MODES[mode]}


def canonical_byte(f: dict, major: str, mn: int, k: int, elem_bytes: int = 2) -> int:
    """The shared byte address of element (mn, k) of one instruction's operand, per the canonical
    layouts (T = 16 bytes / element size elements; in CuTe notation, strides in elements):

    - K-major, no swizzle: ((8,m),(T,2k)) : ((1T,SBO),(1,LBO))
    - K-major, W-byte swizzle: ((8,m),(T,2k)) : ((W/16·T,SBO),(1,T))   (rows W bytes apart)
    - MN-major, no swizzle: ((T,1,m),(8,k)) : ((1,T,SBO),(1T,LBO))
    - MN-major, W-byte swizzle: ((T,W/16,m),(8,k)) : ((1,T,LBO),(W/16·T,SBO))

    then the swizzle XORs byte-address bits [4, 4+b) with bits [7, 7+b), b = log2(W/16)."""
    if f["base_offset"] or f["lbo_mode"]:
        raise ModelError("base offset / absolute LBO mode not modelled")
    W, T = f["swizzle"], 16 // elem_bytes
    if major == "K":
        g, r = divmod(mn, 8)
        j, e = divmod(k, T)
        off = g * f["sbo"] + (r * 16 + j * f["lbo"] if not W else r * W + j * 16) + e * elem_bytes
    else:
        g, r = divmod(k, 8)
        if not W:
            c, e = divmod(mn, T)
            off = c * f["sbo"] + g * f["lbo"] + r * 16 + e * elem_bytes
        else:
            blk, rest = divmod(mn, W // elem_bytes)
            c, e = divmod(rest, T)
            off = blk * f["lbo"] + g * f["sbo"] + r * W + c * 16 + e * elem_bytes
    addr = f["start"] + off
    if W:
        addr ^= (addr >> 3) & ((W // 16 - 1) << 4)
    return addr


def read_operand(smem: np.ndarray, desc: int, major: str, rows: int, k: int = 16, dtype=np.float16) -> np.ndarray:
    """The (rows, k) matrix an instruction reads through ``desc`` from shared bytes ``smem``."""
    f = decode_smem_desc(desc)
    eb = np.dtype(dtype).itemsize
    out = np.empty((rows, k), dtype)
    for i in range(rows):
        for j in range(k):
            a = canonical_byte(f, major, i, j, eb)
            if a < 0 or a + eb > smem.size:
                raise ModelError(f"descriptor reads byte {a} outside shared memory ({smem.size} bytes)")
            out[i, j] = smem[a:a + eb].view(dtype)[0]
    return out


# --- Table 42: instruction descriptor, kind::f16 -----------------------------------------------------

def decode_idesc(x: int) -> dict:
    """Table 42's fields for kind::f16; reserved bits and the unused ones must be 0."""
    if field(x, 0, 3) or field(x, 6, 6) or field(x, 13, 14) or field(x, 23, 23) or field(x, 29, 31):
        raise ModelError(f"idesc {x:#x}: sparsity/saturate/negate/reserved/shift bits set")
    dtypes = {0: np.float16, 1: "bfloat16"}
    d = field(x, 4, 5)
    if d != 1:
        raise ModelError(f"idesc {x:#x}: D type {d} is not F32 (1)")
    a, b = field(x, 7, 9), field(x, 10, 12)
    if a not in dtypes or b not in dtypes or a != b:
        raise ModelError(f"idesc {x:#x}: A/B types {a}/{b} not F16 (0) / BF16 (1) alike")
    return {"d": "f32", "ab": "bf16" if a else "f16", "trans_a": field(x, 15, 15), "trans_b": field(x, 16, 16),
            "n": field(x, 17, 22) << 3, "m": field(x, 24, 28) << 4}


#: valid (cta_group, M) → (N step, N min, N max) for kind::f16 (PTX ISA "Valid shapes")
SHAPES = {(1, 64): (8, 8, 256), (1, 128): (16, 16, 256), (2, 128): (32, 32, 256), (2, 256): (16, 32, 256)}


# --- tensor memory -------------------------------------------------------------------------------------

class Tmem:
    """128 lanes × 512 columns of 32-bit cells; addresses are (lane << 16) | column."""

    def __init__(self):
        self.cells = np.zeros((LANES, COLUMNS), np.uint32)

    @staticmethod
    def split(addr: int):
        lane, col = addr >> 16, addr & 0xFFFF
        if not (0 <= lane < LANES and 0 <= col < COLUMNS):
            raise ModelError(f"TMEM address {addr:#x} (lane {lane}, column {col}) outside 128 x 512")
        return lane, col

    def f32(self) -> np.ndarray:
        return self.cells.view(np.float32)

    def put_f16(self, lane, col, vals):
        """16-bit elements packed two per cell, element 2c in the low half."""
        v = np.asarray(vals, np.float16).view(np.uint16).astype(np.uint32)
        self.cells[lane, col:col + len(v) // 2] = v[0::2] | (v[1::2] << 16)

    def get_f16(self, lane, col, n):
        c = self.cells[lane, col:col + n // 2]
        out = np.empty(n, np.uint16)
        out[0::2], out[1::2] = c & 0xFFFF, c >> 16
        return out.view(np.float16)


def _as_f32(x):
    return np.asarray(x, np.float32)


def mma(tmems, smems, d_addr, a, b_desc, idesc, enable_input_d, cta_group=1, a_in_tmem=False):
    """``tcgen05.mma.cta_group::{1,2}.kind::f16`` issued by CTA 0 of the group: ``tmems``/``smems``
    per CTA.  ``a`` is A's descriptor (ss) or TMEM address (ts).  cta_group::2 (M=256): CTA r
    supplies rows 128r.. of A and the r-th N/2 columns of B at the same addresses, and receives
    rows 128r.. of D in its own TMEM (data-path layout A); cta_group::1 M=128: layout D."""
    f = decode_idesc(idesc)
    m, n = f["m"], f["n"]
    key = (cta_group, m)
    if key not in SHAPES:
        raise ModelError(f"M={m} with cta_group::{cta_group} not modelled")
    step, lo, hi = SHAPES[key]
    if n % step or not lo <= n <= hi:
        raise ModelError(f"N={n} invalid for M={m}, cta_group::{cta_group}")
    if m != 128 * cta_group:
        raise ModelError(f"M={m}: the model covers the full data paths (M=128 per CTA) only")
    rows = m // cta_group
    nb = n // cta_group
    major_a = "MN" if f["trans_a"] else "K"
    major_b = "MN" if f["trans_b"] else "K"
    lane, col = Tmem.split(d_addr)
    if lane:
        raise ModelError("D must start at lane 0 for M=128 per CTA")
    B = np.concatenate([read_operand(smems[r], b_desc, major_b, nb) for r in range(cta_group)], axis=0)   # (N, 16)
    for r in range(cta_group):
        if a_in_tmem:
            al, ac = Tmem.split(a)
            if f["trans_a"]:
                raise ModelError("A from TMEM cannot be transposed")
            A = np.stack([tmems[r].get_f16(al + i, ac, 16) for i in range(rows)])
        else:
            A = read_operand(smems[r], a, major_a, rows)
        prod = _as_f32(A) @ _as_f32(B).T                       # (rows, N) in fp32
        D = tmems[r].f32()[0:rows, col:col + n]
        tmems[r].f32()[0:rows, col:col + n] = prod + (D if enable_input_d else 0)


def cp_128x256b(tmem: Tmem, smem: np.ndarray, t_addr: int, desc: int):
    """``tcgen05.cp.cta_group::1.128x256b``: 128 rows × 32 bytes (16 f16) of a K-major canonical
    matrix into lanes lane0.. and 8 columns col0.. (lane i ← row i)."""
    lane, col = Tmem.split(t_addr)
    A = read_operand(smem, desc, "K", 128)
    for i in range(128):
        tmem.put_f16(lane + i, col, A[i])


# --- tcgen05.ld / st matrix fragments ------------------------------------------------------------------

def fragment_position(shape: str, lane_id: int, reg: int) -> tuple:
    """(row within the warp's slab, 32-bit column) that register ``reg`` of thread ``lane_id``
    holds after ``tcgen05.ld.{shape}`` (Figures "Matrix fragment for shape ..."):

    - 32x32b: thread t owns lane t; register r is column r.
    - 16x64b: per repetition 16 rows × 2 columns; rows 0-7 by threads 0,4,..,28 (column 0) and
      2,6,..,30 (column 1); rows 8-15 by the odd threads likewise.
    - 16x128b: per repetition 16 rows × 4 columns; thread t covers column t%4 of row t/4 (first
      register) and of row 8 + t/4 (second).
    - 16x256b: per repetition 16 rows × 8 columns; thread t covers columns 2(t%4), 2(t%4)+1 of row
      t/4 (registers 0, 1) and of row 8 + t/4 (registers 2, 3)."""
    t = lane_id
    if shape == "32x32b":
        return t, reg
    if shape == "16x64b":
        q = reg
        return t // 4 + (8 if t % 2 else 0), 2 * q + (t // 2) % 2
    if shape == "16x128b":
        q, r = divmod(reg, 2)
        return t // 4 + 8 * r, 4 * q + t % 4
    if shape == "16x256b":
        q, r = divmod(reg, 4)
        return t // 4 + 8 * (r // 2), 8 * q + 2 * (t % 4) + r % 2
    raise ModelError(f"ld shape {shape}")


SLAB_ROWS = {"32x32b": 32, "16x64b": 16, "16x128b": 16, "16x256b": 16}
REGS_PER_NUM = {"32x32b": 1, "16x64b": 1, "16x128b": 2, "16x256b": 4}


def ld(tmem: Tmem, shape: str, num: int, warp: int, t_addr: int) -> np.ndarray:
    """Registers (32 threads × REGS·num, fp32) a warp with ``warp % 4 == warp`` loads at ``t_addr``
    (the lane field must lie in the warp's 32-lane slab)."""
    lane0, col0 = Tmem.split(t_addr)
    if not 32 * (warp % 4) <= lane0 < 32 * (warp % 4) + 32:
        raise ModelError(f"warp {warp} may access lanes {32 * (warp % 4)}.. only, not {lane0}")
    if lane0 % SLAB_ROWS[shape] or lane0 + SLAB_ROWS[shape] > 32 * (warp % 4) + 32:
        raise ModelError(f"{shape} at lane {lane0} leaves the warp's slab")
    nreg = REGS_PER_NUM[shape] * num
    out = np.empty((32, nreg), np.float32)
    f = tmem.f32()
    for t in range(32):
        for r in range(nreg):
            row, c = fragment_position(shape, t, r)
            out[t, r] = f[lane0 + row, col0 + c]
    return out
