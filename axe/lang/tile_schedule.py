"""Persistent tile schedules: which output tiles each worker computes, in what order.

A :class:`TileSchedule` enumerates the tiles of an ``(m_tiles, n_tiles)`` grid for ``ctas``
workers that each loop over tiles ``w, w + ctas, ...`` (a persistent grid: one CTA per SM on a
GPU), in grouped order: ``group`` block-rows at a time, column by column, so that workers running
at the same time share rows of A and columns of B in the cache (L2 on a GPU).

Why it belongs to the language and not to a backend: it is integer arithmetic on tile indices,
valid on Python ints (configuration time) and on TIR values (the kernel's loop variables) alike,
and says nothing about how a tile is computed — the GPU GEMM's producer and consumers and a
single NeuronCore's loop (``ctas=1``) walk it the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TileSchedule"]


@dataclass(frozen=True)
class TileSchedule:
    """Tiles of an ``(m_tiles, n_tiles)`` grid in grouped order for a persistent grid of
    ``ctas`` workers (CTAs); ``group`` block-rows share one band; ``stack``: workers come in
    clusters of that many, each cluster computing vertically neighbouring tiles."""

    _is_meta_class = True

    m_tiles: int
    n_tiles: int
    ctas: int
    group: int = 8
    stack: int = 1      # workers per cluster: a scheduled block-row is ``stack`` neighbouring block-rows

    @property
    def tiles(self) -> int:
        return self.m_tiles * self.n_tiles

    def count(self, cta):
        """How many tiles CTA ``cta`` runs: ``ceil((tiles - cta) / ctas)``."""
        return (self.tiles - cta + self.ctas - 1) // self.ctas

    def tile(self, cta, i):
        """The linear index of CTA ``cta``'s ``i``-th tile."""
        return cta + i * self.ctas

    def coords(self, t, rank=0):
        """``(m block, n block)`` of linear tile ``t``: bands of ``group`` block-rows, each band
        walked column by column (the last band may be narrower).  With ``stack`` > 1 the schedule's
        rows are clusters' rows: worker ``rank`` of the cluster takes block-row ``stack·m + rank``
        (so the cluster's workers share the tile's columns of B)."""
        per_band = self.group * self.n_tiles
        band = t // per_band
        first = band * self.group
        if isinstance(t, int):
            rows = min(self.m_tiles - first, self.group)
        else:
            from tvm.script import tirx as T
            rows = T.min(self.m_tiles - first, self.group)
        r = t % per_band
        m = first + r % rows
        return (m, r // rows) if self.stack == 1 else (m * self.stack + rank, r // rows)
