"""Grouped (variable-length) tiles: groups of rows padded to a tile's rows, target-neutral.

A grouped problem (a mixture of experts, a batch of sequences of different lengths) stacks its
groups' rows into one padded matrix so that every m-tile of a GEMM belongs to exactly one group:
group g's ``counts[g]`` rows start at ``offsets[g]``, a multiple of the tile's ``block`` rows, and
take ``ceil(counts[g] / block) · block`` rows (an empty group takes none).  Kernels compute this
on the device; these functions are its law, used by tests and by hosts sizing buffers.

Tiles may be taller than the padding (:func:`tiles`): with segments padded to ``block`` rows and
m-tiles of ``tile`` rows (a multiple of ``block``), group g's tiles start every ``tile`` rows from
its offset and the last one reaches into the groups after it.  A GEMM then computes those foreign
rows with group g's operand and stores only the tile's own rows, so the padded matrix (and every
byte the permutation, the GEMMs and their intermediates move for padding) shrinks from up to
``tile - 1`` to up to ``block - 1`` rows per group.
"""

from __future__ import annotations

__all__ = ["segments", "capacity", "tile_groups", "tiles", "tile_capacity"]


def segments(counts, block: int):
    """``(offsets, total)``: group g starts at ``offsets[g]`` and the groups take ``total`` rows,
    each padded to a multiple of ``block`` (``offsets[g+1] - offsets[g] = ceil(counts[g]/block)·block``)."""
    if block < 1:
        raise ValueError(f"segments: block must be >= 1, got {block}")
    offsets, at = [], 0
    for g, c in enumerate(counts):
        if c < 0:
            raise ValueError(f"segments: counts[{g}] = {c} is negative")
        offsets.append(at)
        at += -(-int(c) // block) * block
    return offsets, at


def tile_groups(counts, block: int):
    """The group of every m-tile of the padded matrix, in order (empty groups have no tile)."""
    return [g for g, _, _ in tiles(counts, block, block)]


def capacity(rows: int, groups: int, block: int) -> int:
    """An upper bound on the padded rows ``rows`` rows spread over ``groups`` groups take (what a
    host allocates before the device routes): each non-empty group adds at most ``block - 1`` rows
    of padding and at most ``min(groups, rows)`` groups are non-empty, and no group takes more
    than ``block`` rows per row.  A multiple of ``block``."""
    if rows < 0 or groups < 1 or block < 1:
        raise ValueError(f"capacity: rows={rows}, groups={groups}, block={block}")
    bound = min(rows * block, rows + min(groups, rows) * (block - 1))
    return -(-bound // block) * block


def tiles(counts, block: int, tile: int):
    """``[(group, start row, own rows)]`` for every m-tile, in order: group g's
    ``ceil(counts[g] / tile)`` tiles start at ``offsets[g] + i·tile`` (``offsets`` from
    :func:`segments` with ``block``) and own ``min(tile, counts[g] - i·tile)`` rows; with
    ``tile == block`` the starts are ``i·tile`` for the i-th tile overall and the groups are
    :func:`tile_groups`'s."""
    if tile < 1 or tile % block:
        raise ValueError(f"tiles: tile={tile} must be a positive multiple of block={block}")
    offsets, _ = segments(counts, block)
    return [(g, offsets[g] + i * tile, min(tile, int(c) - i * tile))
            for g, c in enumerate(counts) for i in range(-(-int(c) // tile))]


def tile_capacity(rows: int, groups: int, tile: int) -> int:
    """An upper bound on the number of :func:`tiles` of ``tile`` rows that ``rows`` rows spread
    over ``groups`` groups take, whatever the padding (``sum ceil(c_g / tile)``)."""
    return capacity(rows, groups, tile) // tile
