"""What the CUDA schedules propose to layout inference (:mod:`axe.schedules.infer`).

Each proposal names the schedules it is for; inference accepts a proposed layout only where the
call, with it, actually dispatches to one of them.

- **wgmma** (``gemm``): the accumulator as ``C ⊗ d_fragment(n)`` (the widest n of the tile's
  width first), register A as ``C ⊗ a_fragment``, shared A and B as TMA writes them under its
  128-, 64- or 32-byte swizzle (the K-major or MN-major atom the descriptor reads).
- **mma.sync** (``gemm`` in one warp, 16-bit): the accumulator as ``C ⊗ c_fragment``, register A
  as ``C ⊗ a_fragment`` and register B (K × N) as ``C ⊗ b_fragment`` of m16n8k16, C on registers
  (rows of fragments first: the one tiling :func:`~axe.layout.infer.atom_tilings` gives one warp),
  lanes on ``tx`` (a one-warp CTA, or each warp of ``Ax.each_warp()`` on its own tiles).
- **ldmatrix / stmatrix** (``copy`` between shared memory and registers, 16-bit): registers as
  ``C ⊗ ldmatrix_atom`` over the scope's warps (row bands first), the shared tile as TMA writes it
  (widest swizzle first: each 8-row group's 16-byte rows fall in distinct banks, conflict-free).

Beside this module: :mod:`.proposals_reduce` (warp and CTA reductions), :mod:`.proposals_tcgen05`
(sm_100a: tcgen05.mma, tcgen05.ld/st/cp), :mod:`.proposals_tma` (the shared tiles TMA writes).
"""

from __future__ import annotations

from axe.layout.infer import atom_tilings
from axe.schedules.infer import add_proposal

from . import mma
from .ldmatrix import ROWS, atom
from .proposals_tma import tma_tiles
from .wgmma import a_fragment, d_fragment


def _matrix(call, key, shape, elem_bytes, mem):
    """ldmatrix/stmatrix: candidate layouts of the tile operand ``key`` (of ``shape``) stands for."""
    if elem_bytes != 2 or len(shape) != 2:
        return []
    if mem == "shared":
        return tma_tiles(shape, elem_bytes)
    if mem != "local" or call.scope.threads % 32:
        return []
    return atom_tilings(shape, atom("tx"), (ROWS, ROWS), call.scope.threads // 32)


def _matrix_label(plan, key):
    n = max(len(g) for g in plan.groups)
    ins = f"{plan.mnemonic}.x{n}{'.trans' if plan.trans else ''}"
    return f"{ins} atom" if key == ("src" if plan.store else "dst") else f"16-byte rows of {ins}"


def _wgmma(call, key, shape, elem_bytes, mem):
    """wgmma: candidate layouts of the gemm operand ``key``'s tile."""
    if len(shape) != 2 or call.scope.kind != "warpgroup":
        return []
    if mem == "shared" and key in ("A", "B"):
        return tma_tiles(shape, elem_bytes)
    if mem != "local":
        return []
    m, n = shape
    if key == "C":
        return [L for w in range(min(256, n), 7, -8) if n % w == 0
                for L in atom_tilings(shape, d_fragment(w, "tx"), (64, w), 1)]
    if key == "A":
        return atom_tilings(shape, a_fragment("tx"), (64, 32 // elem_bytes), 1)
    return []


def _wgmma_label(plan, key):
    what = {"C": "accumulator fragment", "A": "A fragment" if plan.rs else "shared A operand",
            "B": "shared B operand"}[key]
    return f"{plan.instruction()} {what}"


def _mma(call, key, shape, elem_bytes, mem):
    """mma.sync m16n8k16: candidate layouts of the gemm operand ``key``'s register tile."""
    if len(shape) != 2 or mem != "local" or call.scope.threads != 32:
        return []
    frag, fshape = {"C": (mma.c_fragment, (16, 8)), "A": (mma.a_fragment, (16, 16)), "B": (mma.b_fragment, (16, 8))}[key]
    return atom_tilings(shape, frag("tx"), fshape, 1)


def _mma_label(plan, key):
    return f"{plan.instruction()} {'accumulator' if key == 'C' else key} fragment"


add_proposal("gemm", "cuda", ("wgmma",), _wgmma, _wgmma_label, priority=40)
# after wgmma (a warpgroup's gemm is wgmma's), before ldmatrix: a fragment has one schedule, and
# the ldmatrix copies that fill it then follow it
add_proposal("gemm", "cuda", ("mma_sync",), _mma, _mma_label, priority=35)
add_proposal("copy", "cuda", ("ldmatrix", "stmatrix"), _matrix, _matrix_label, priority=25)

# the reductions' and tcgen05's proposals register on import (the backend imports this module)
from . import proposals_reduce, proposals_tcgen05  # noqa: E402,F401
