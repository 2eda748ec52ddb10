"""The shared tiles TMA writes, as layout inference proposes them (:mod:`.proposals`,
:mod:`.proposals_tcgen05`): the layouts wgmma's and tcgen05's descriptors and ldmatrix's 16-byte
rows read, so a tile loaded by TMA and read by the instruction needs no other copy."""

from __future__ import annotations

from axe.layout.infer import tma_rows

__all__ = ["SWIZZLES", "tma_tiles"]

#: TMA's swizzle widths in bytes, widest (fewest bank conflicts for the widest rows) first
SWIZZLES = (128, 64, 32)


def tma_tiles(shape, elem_bytes):
    """The 2-D tile of ``shape`` as TMA writes it under each swizzle of :data:`SWIZZLES` that fits
    (:func:`~axe.layout.infer.tma_rows`), widest first; ``[]`` for other ranks."""
    if len(shape) != 2:
        return []
    return [L for L in (tma_rows(shape, elem_bytes, sw) for sw in SWIZZLES) if L is not None]
