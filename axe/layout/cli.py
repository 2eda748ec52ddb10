"""``axe layout``: explain a layout in words and numbers, or draw it.

    axe layout "S[(8,2,4,2):(4@lane,1@warp,1@lane,1@reg)] + R[2:4@warp] + 5@warp" --explain --shape 8,16
    axe layout "<layout>" --shape 8,16 --color warp -o tile.svg      (or .png / .pdf)
    axe layout "S[(32,32):(1,1@lane)]" --shape 32,32 --swizzle "S[(32,32):(1@lane,1)]" --bytes 4
        (the shared layouts with the fewest bank conflicts for a warp writing the tile as the
        first layout and reading it as --swizzle's, which may be "ldmatrix")

Without ``-o`` the explanation is printed; with ``-o`` the picture is written (and the
explanation too when ``--explain`` is given).
"""

from __future__ import annotations

import argparse
import sys
from math import prod

from .canonical import canonicalize, gap_condition
from .coord import MEMORY
from .group import LayoutError, group
from .layout import unflatten_index
from .swizzle import SwizzledLayout
from .syntax import LayoutSyntaxError, parse

__all__ = ["add_commands", "explain", "parse_shape"]


def parse_shape(text: str) -> tuple[int, ...]:
    """``"8,16"`` (or ``8x16``) -> ``(8, 16)``."""
    try:
        shape = tuple(int(p) for p in text.replace("x", ",").split(",") if p.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape {text!r}: expected integers separated by commas, e.g. 8,16")
    if not shape or any(n < 1 for n in shape):
        raise argparse.ArgumentTypeError(f"shape {text!r}: expected positive integers, e.g. 8,16")
    return shape


#: most table rows (``--rows``), and most coordinates (rows × replica choices) ``explain`` lists
MAX_ROWS = 4096
MAX_LISTED = 1 << 16


def parse_rows(text: str) -> int:
    """``--rows``: an int in [0, MAX_ROWS]."""
    try:
        n = int(text) if len(text) <= 10 else -1
    except ValueError:
        n = -1
    if not 0 <= n <= MAX_ROWS:
        raise argparse.ArgumentTypeError(f"rows {text[:20]!r}: expected an integer from 0 to {MAX_ROWS}")
    return n


def _axis_order(L) -> list[str]:
    axes = [a for a in L.axes() if a != MEMORY]
    return axes + ([MEMORY] if MEMORY in L.axes() else [])


def _ranges(L) -> dict[str, tuple[int, int]]:
    """Per axis, the least and greatest value any element's coordinates take (offset included)."""
    out = {}
    for a in L.axes():
        lo = hi = L.offset[a]
        for e, s, ax in tuple(L.shard) + tuple(L.replica):
            if ax == a:
                lo += min(0, (e - 1) * s)
                hi += max(0, (e - 1) * s)
        out[a] = (lo, hi)
    return out


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return ["  " + "  ".join(cell.rjust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]


def explain(layout, shape=None, count: int = 16) -> str:
    """A plain-text account: canonical form, sizes, per-axis spans and ranges, the grouping by
    ``shape`` and a table of the first ``count`` elements (replicas on following lines)."""
    L = parse(layout) if isinstance(layout, str) else layout
    inner = L.inner if isinstance(L, SwizzledLayout) else L
    n = min(count, inner.size)
    if n * inner.replica_size > MAX_LISTED:
        raise LayoutError(f"explain lists every holder of its first {n} elements: {n} × "
                          f"{inner.replica_size} replica choices of {L} is over {MAX_LISTED}")
    lines = [f"layout      {L}", f"canonical   {canonicalize(L)}"]
    if isinstance(L, SwizzledLayout):
        lines.append(f"swizzle     {L.swizzle} on {L.axis} (period {L.swizzle.period}), base {L.base}")
    ext = "×".join(str(i[0]) for i in inner.shard)
    lines.append(f"size        {inner.size} elements (shard extents {ext}); "
                 f"{inner.replica_size} replica choice(s), {len(inner.replica_points())} distinct")
    if inner.replica and not gap_condition(inner):
        lines.append("            (replicas fail the gap condition: canonical forms are not unique)")
    spans, ranges = inner.span(), _ranges(inner)
    lines.append("axes        axis        span  values" + (" (before the swizzle)" if inner is not L else ""))
    for a in _axis_order(inner):
        lo, hi = ranges[a]
        lines.append(f"            {a:<10} {spans.get(a, 1):>5}  {lo}..{hi}")
    if shape is not None:
        shape = tuple(shape)
        if prod(shape) != inner.size:
            raise LayoutError(f"shape {shape} has {prod(shape)} elements, {L} has {inner.size}")
        try:
            g = group(inner, shape)
            blocks = "; ".join(f"dim {d} ({n}): " + (" ".join(map(repr, b)) or "-")
                               for d, (n, b) in enumerate(zip(shape, g.blocks)))
            lines.append(f"grouped     {blocks}")
        except LayoutError as err:
            lines.append(f"grouped     not groupable by {shape}: {err}")
    axes = _axis_order(L)
    rows = [["index" if shape else "x", *(["x"] if shape else []), *axes]]
    for x in range(n):
        pts = sorted(L.map(x), key=lambda c: [c[a] for a in axes])
        for k, c in enumerate(pts):
            head = [str(unflatten_index(x, shape)) if shape else str(x)] + ([str(x)] if shape else [])
            if k:
                head = ["", ""][:len(head)] if shape else [""]
            rows.append(head + [str(c[a]) for a in axes])
    lines.append(f"first {n} of {inner.size} elements (replicas on following lines):")
    lines.extend(_table(rows))
    return "\n".join(lines)


def swizzle_report(write, shape, read, elem_bytes=2, vectors=(1, 1), top=5) -> str:
    """The ``top`` shared layouts :func:`~axe.layout.swizzle_search.search_swizzle` ranks first for
    a warp writing the tile as ``write`` and reading it as ``read`` (a layout, or "ldmatrix")."""
    from .swizzle_search import ldmatrix_accesses, search_swizzle, warp_accesses
    w = warp_accesses(write, shape, vectors[0])
    r = ldmatrix_accesses(shape, elem_bytes) if read == "ldmatrix" else warp_accesses(parse(read), shape, vectors[1])
    ranked = search_swizzle(shape, elem_bytes, w, r)
    lines = [f"{len(ranked)} candidate layouts for a {'x'.join(map(str, shape))} tile of {elem_bytes}-byte elements; "
             f"best first (32 banks x 4 B, 128-byte phases):"]
    lines += [f"  {c.describe(elem_bytes)}" for c in ranked[:top]]
    return "\n".join(lines)


def _run(args) -> int:
    try:
        L = parse(args.layout)
    except LayoutSyntaxError as err:
        print(f"axe layout: {err}", file=sys.stderr)
        return 2
    try:
        if args.output:
            from .picture import save
            if args.shape is None:
                print("axe layout: -o needs --shape ROWS,COLS (the logical shape to draw)", file=sys.stderr)
                return 2
            labels = args.labels.split(",") if args.labels else None
            path = save(L, args.shape, args.output, color=args.color, labels=labels, title=args.title)
            print(f"wrote {path}")
        if args.swizzle:
            if args.shape is None:
                print("axe layout: --swizzle needs --shape (the tile's shape)", file=sys.stderr)
                return 2
            vec = tuple(int(v) for v in args.vector.split(","))
            print(swizzle_report(L, args.shape, args.swizzle, args.bytes, (vec[0], vec[-1])))
        elif args.explain or not args.output:
            print(explain(L, args.shape, args.rows))
    except (LayoutError, ValueError) as err:
        print(f"axe layout: {err}", file=sys.stderr)
        return 1
    return 0


def add_commands(subparsers) -> None:
    """Register ``axe layout`` on the top-level command line."""
    p = subparsers.add_parser("layout", help="explain or draw an Axe layout",
                              description=__doc__.split("\n\n")[0].replace("``", ""),
                              formatter_class=argparse.RawDescriptionHelpFormatter,
                              epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("layout", help='layout text, e.g. "S[(8,2,4,2):(4@lane,1@warp,1@lane,1@reg)] + R[2:4@warp] + 5@warp"')
    p.add_argument("--shape", type=parse_shape, help="logical shape, e.g. 8,16 (needed to draw)")
    p.add_argument("--explain", action="store_true", help="print canonical form, spans, sizes and the first elements")
    p.add_argument("--rows", type=parse_rows, default=16,
                   help=f"elements in the --explain table (default 16, at most {MAX_ROWS})")
    p.add_argument("-o", "--output", help="write a picture (.svg, .png or .pdf)")
    p.add_argument("--color", help="axis that colours the cells (default: the coarsest non-memory axis)")
    p.add_argument("--labels", help="comma-separated axes written in each cell (default: the others)")
    p.add_argument("--title", help="picture title (default: the layout)")
    p.add_argument("--swizzle", metavar="READ",
                   help='search shared layouts for a warp writing as LAYOUT and reading as READ (or "ldmatrix")')
    p.add_argument("--bytes", type=int, default=2, help="element size in bytes for --swizzle (default 2)")
    p.add_argument("--vector", default="1", help="elements per lane access, WRITE[,READ] (default 1)")
    p.set_defaults(func=_run)
