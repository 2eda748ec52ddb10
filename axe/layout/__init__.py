"""Axe layouts: named-axis layouts ``L = (D, R, O)`` and their algebra.

Pure Python, immutable values, no TVM or torch at import.  The specification is
``docs/layouts.md`` (the Axe paper §2–3, App. A–F, restated with its errata).

Build layouts with the same syntax they print in::

    from axe.layout import S, R, lane, warp, reg
    L = S[(8,2,4,2):(4@lane,1@warp,1@lane,1@reg)] + R[2:4@warp] + 5@warp
    parse(str(L)) == L
"""

from .canonical import canonical_replica, canonical_shard, canonicalize, equivalent, gap_condition
from .coord import (F, MEMORY, TCol, TLane, P, Axis, Coord, axis, axis_names, bx, by, bz, cta, gpuid,
                    lane, m, reg, register_axis, tx, warp, warpgroup)
from .group import Grouped, LayoutError, group
from .iters import Iter, intersect
from .layout import Layout, R, Replica, S, flatten_index, unflatten_index
from .slicing import slice_layout
from .swizzle import Swizzle, SwizzledLayout
from .syntax import LayoutSyntaxError, parse
from .tile import direct_sum, interleave, tile, tile_of

slice = slice_layout  # the paper's name; ``slice_layout`` avoids shadowing the builtin


def span(L, axis=None):
    """Axis-wise span of L (Lemma C.1); see :meth:`Layout.span`."""
    inner = L.inner if isinstance(L, SwizzledLayout) else L
    return inner.span(axis)


__all__ = [
    "Axis", "Coord", "Iter", "Layout", "Replica", "S", "R", "Swizzle", "SwizzledLayout", "Grouped",
    "LayoutError", "LayoutSyntaxError", "axis", "axis_names", "register_axis", "MEMORY",
    "m", "reg", "lane", "warp", "warpgroup", "tx", "cta", "bx", "by", "bz", "gpuid", "P", "F", "TLane", "TCol",
    "parse", "canonicalize", "canonical_shard", "canonical_replica", "equivalent", "gap_condition",
    "group", "tile", "tile_of", "direct_sum", "interleave", "slice", "slice_layout", "intersect",
    "span", "flatten_index", "unflatten_index",
]

from .devices import DeviceBox, DeviceSharding, device_sharding  # noqa: E402  (which rank holds what)
__all__ += ["DeviceBox", "DeviceSharding", "device_sharding"]
