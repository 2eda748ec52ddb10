"""What the Blackwell (sm_100a) tcgen05 schedules propose to layout inference
(:mod:`axe.schedules.infer`); each is accepted only where the call then dispatches to tcgen05, so
on another target they propose in vain and the Hopper proposals serve.

- **tcgen05** (``gemm``): shared A and B as TMA writes them under its 128-, 64- or 32-byte swizzle
  (the K-major or MN-major core-matrix tilings the shared-memory descriptors read, widest first);
  a TMEM accumulator of ``(128·m, N)`` as the data path writes it, row i of each 128-row block in
  lane i, the blocks side by side in columns (:func:`tmem_accumulator`).
- **tcgen05.ld / tcgen05.st** (``copy`` between TMEM and registers): the register tile as
  ``C ⊗ ld_fragment(shape, num)``, C on registers (column blocks in order), in the order the
  schedule tries them — 32x32b first (a thread holds whole rows), then the 16-lane shapes, each
  with the widest ``.num`` of at most 128 registers (fewest instructions).
- **tcgen05.cp** (``copy`` shared → TMEM): the shared tile K-major under TMA's swizzle, the TMEM
  tile in data-path columns.
"""

from __future__ import annotations

from axe.layout import Layout, S, tile
from axe.layout.coord import TCol, TLane  # noqa: F401  (registers the axes)
from axe.layout.iters import Iter
from axe.schedules.infer import add_proposal

from .proposals_tma import tma_tiles
from .tcgen05 import LD_SHAPES, _REGS_PER_NUM, ld_fragment

__all__ = ["tmem_accumulator", "ld_tilings"]


def tmem_accumulator(shape):
    """The TMEM layouts tcgen05.mma (cta_group::1) writes a ``(128·m, n)`` accumulator in: row
    ``128·b + i`` in lane i, column ``b·n + j`` (the m blocks side by side); ``[]`` for other
    shapes.  Law: element (r, c) sits at lane ``r mod 128``, column ``(r div 128)·n + c``."""
    if len(shape) != 2 or shape[0] % 128:
        return []
    m, n = shape[0] // 128, shape[1]
    if m == 1:
        return [S[(128, n):(1 @ TLane, 1 @ TCol)]]
    return [Layout((Iter(m, n, "TCol"), Iter(128, 1, "TLane"), Iter(n, 1, "TCol")))]


def ld_tilings(shape):
    """The register tilings ``C ⊗ ld_fragment(shape, num, rows)`` of a ``(rows, cols)`` tile, C
    the column blocks on registers in order, by shape (32x32b, 16x256b, 16x128b, 16x64b) and then
    the widest ``.num`` whose instruction moves at most 128 registers."""
    if len(shape) != 2:
        return []
    rows, cols = shape
    out = []
    for name, w in LD_SHAPES.items():
        nums = [n for n in (128, 64, 32, 16, 8, 4, 2, 1) if cols % (w * n) == 0 and _REGS_PER_NUM[name] * n <= 128]
        try:
            atom = ld_fragment(name, nums[0], rows) if nums else None
        except ValueError:           # the shape does not read this many rows
            continue
        if atom is not None:
            q = cols // (w * nums[0])
            out.append(atom if q == 1 else tile(S[q], (1, q), atom, (rows, w * nums[0])))
    return out


def _gemm(call, key, shape, elem_bytes, mem):
    if mem == "shared" and key in ("A", "B"):
        return tma_tiles(shape, elem_bytes)
    if mem == "tmem" and key == "C":
        return tmem_accumulator(shape)
    return []


def _descriptor(op) -> str:
    return f"{op.major}-major {op.swizzle or 'no'}-byte swizzle descriptor"


def _gemm_label(plan, key):
    if key == "C":
        return f"{plan.instruction()} accumulator (data path D, M={plan.m})"
    return f"{plan.instruction()} {key} {_descriptor(plan.b if key == 'B' else plan.a)}"


def _copy(call, key, shape, elem_bytes, mem):
    other = call.operands["src" if key == "dst" else "dst"]
    if mem == "local" and other.mem == "tmem":
        return ld_tilings(shape)
    if mem == "shared" and other.mem == "tmem":
        return tma_tiles(shape, elem_bytes)
    if mem == "tmem" and other.mem == "local":
        return tmem_accumulator(shape)
    return []


def _copy_label(plan, key):
    if hasattr(plan, "shape"):
        return f"{plan.instruction()} fragment" if key != ("dst" if plan.store else "src") else \
            f"{plan.instruction()} data path"
    return f"tcgen05.cp.128x256b {_descriptor(plan.src)}"


add_proposal("gemm", "cuda", ("tcgen05",), _gemm, _gemm_label, priority=45)
add_proposal("copy", "cuda", ("tcgen05_ld", "tcgen05_cp"), _copy, _copy_label, priority=30)
