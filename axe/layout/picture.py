"""Pictures of layouts, in the style of the Axe paper's Figure 2.

A layout over a 2-D logical shape (rows, cols) is drawn as a grid with one cell per element
u.  The cell shows the set ``f_L(u)``: one band per coordinate (replicas stacked top to
bottom, ordered by the colour axis), each band filled with the colour of its value on the
chosen ``color`` axis (e.g. ``warp`` or ``gpuid``) and labelled with its values on the other
axes (e.g. ``lane`` and ``m``).  Thick lines separate cells whose colour sets differ.  When
the grid is too large to label every cell, each region of equal colour set is labelled once,
with its colour values and the range of each other axis inside it.

matplotlib is imported when a picture is drawn (``matplotlib.figure.Figure``: no pyplot, no
global backend change).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from .coord import MEMORY, canonical_axis
from .layout import Layout
from .syntax import parse

__all__ = ["cell_coords", "draw", "save", "SHORT_NAMES"]

#: short axis names used inside cells (the figure's subtitle spells them out)
SHORT_NAMES = {"lane": "L", "warp": "W", "warpgroup": "WG", "gpuid": "G", "tx": "T", "cta": "C",
               MEMORY: "m"}

_LABEL_CELLS = 40 * 40      # above this many cells, label regions instead of cells
_LABEL_COLS = 32


#: most cells, and holders (cells × replica choices), a picture draws: each cell enumerates its
#: holders, and more would not be readable
MAX_CELLS = 1 << 16
MAX_HOLDERS = 1 << 16


def _as_layout(layout):
    return parse(layout) if isinstance(layout, str) else layout


def _grid_shape(layout, shape) -> tuple[int, int]:
    shape = tuple(int(n) for n in shape)
    if len(shape) == 1:
        shape = (1,) + shape
    if len(shape) != 2:
        raise ValueError(f"picture of {layout}: shape {shape} is not 1-D or 2-D")
    if shape[0] * shape[1] != layout.size:
        raise ValueError(f"picture of {layout}: shape {shape} has {shape[0] * shape[1]} elements, "
                         f"the layout {layout.size} (shape not admitted)")
    choices = getattr(layout, "inner", layout).replica_size       # a swizzled layout's are its inner's
    if shape[0] * shape[1] > MAX_CELLS or shape[0] * shape[1] * choices > MAX_HOLDERS:
        raise ValueError(f"picture of {layout}: {shape[0] * shape[1]} cells of {choices} replica "
                         f"choice(s); a picture draws at most {MAX_CELLS} cells and {MAX_HOLDERS} holders "
                         "(slice the layout first)")
    return shape


def _default_color(layout) -> str:
    axes = [a for a in layout.axes() if a != MEMORY]
    # prefer the coarsest hardware axis: who holds the element
    for a in ("gpuid", "cta", "warpgroup", "warp", "tx", "lane", "P", "TLane"):
        if a in axes:
            return a
    return axes[0] if axes else MEMORY


def cell_coords(layout, shape: Sequence[int], color: str | None = None):
    """``cells[i][j]``: the coordinates of element (i, j), sorted by colour value, then others.

    Law: ``set(cells[i][j]) == layout.map((i, j), shape)`` (for a 1-D shape, row 0 only).
    """
    layout = _as_layout(layout)
    rows, cols = _grid_shape(layout, shape)
    color = canonical_axis(color or _default_color(layout))
    out = []
    for i in range(rows):
        row = []
        for j in range(cols):
            pts = layout.map(i * cols + j)
            row.append(sorted(pts, key=lambda c: (c[color], sorted(c.items()))))
        out.append(row)
    return out


def _palette(n: int):
    """n light, distinct colours that keep black text readable."""
    from matplotlib import colormaps
    from matplotlib.colors import hsv_to_rgb, to_rgb
    if n <= 10:
        base = [to_rgb(c) for c in colormaps["tab10"].colors[:n]]
        return [tuple(0.45 * c + 0.55 for c in rgb) for rgb in base]
    return [tuple(hsv_to_rgb((k / n, 0.40, 0.97))) for k in range(n)]


def _fmt_axis(a: str) -> str:
    return SHORT_NAMES.get(a, a)


def _label(c, axes: Sequence[str]) -> str:
    return " ".join(f"{_fmt_axis(a)}{c[a]}" for a in axes)


def draw(layout, shape: Sequence[int], color: str | None = None, labels: Sequence[str] | None = None,
         title: str | None = None, cell_labels: bool | None = None):
    """A ``matplotlib.figure.Figure`` of ``layout`` over the 2-D ``shape`` (see the module doc).

    ``color``: the axis that colours the bands (default: the coarsest non-memory axis the
    layout touches).  ``labels``: the axes written in each band (default: every other axis
    the layout touches).  ``cell_labels``: label every cell (default: when the grid is small
    enough to read) or only each region of equal colour set.
    """
    from matplotlib.collections import LineCollection
    from matplotlib.colors import ListedColormap
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    layout = _as_layout(layout)
    rows, cols = _grid_shape(layout, shape)
    color = canonical_axis(color or _default_color(layout))
    cells = cell_coords(layout, (rows, cols), color)
    if labels is None:
        labels = [a for a in layout.axes() if a != color]
        if MEMORY in labels:                  # memory last, as in "lane 4, reg 1"
            labels = [a for a in labels if a != MEMORY] + [MEMORY]
    labels = [canonical_axis(a) for a in labels]
    if cell_labels is None:
        cell_labels = rows * cols <= _LABEL_CELLS and cols <= _LABEL_COLS
    values = sorted({c[color] for row in cells for pts in row for c in pts})
    index = {v: k for k, v in enumerate(values)}
    k = max(len(pts) for row in cells for pts in row)

    # bands: cell (i, j) is k sub-rows; sub-row t shows coordinate t·r//k of its r coordinates.
    # Too many cells for bands: one band (the first replica), the others hatched over it.
    bands = k if cell_labels else 1
    grid = [[index[cells[i][j][t * len(cells[i][j]) // bands][color]] for j in range(cols)]
            for i in range(rows) for t in range(bands)]

    if cell_labels:
        cw, ch = 0.86, 0.2 * k + 0.12
        width, height = cols * cw + 1.6, rows * ch + 1.5
    else:
        scale = min(11.0 / cols, 8.0 / rows, 0.5)
        width, height = cols * scale + 2.4, rows * scale + 1.6
    fig = Figure(figsize=(width, height), layout="constrained")
    ax = fig.add_subplot()
    palette = _palette(len(values))
    ax.pcolormesh([j for j in range(cols + 1)], [i / bands for i in range(rows * bands + 1)], grid,
                  cmap=ListedColormap(palette), vmin=-0.5, vmax=len(values) - 0.5, edgecolors="none",
                  rasterized=not cell_labels)     # thousands of quads: an image inside a .svg
    ax.set_xlim(0, cols)
    ax.set_ylim(rows, 0)
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    step_c = 1 if cols <= 32 else 8 if cols <= 256 else 32
    step_r = 1 if rows <= 32 else 8 if rows <= 256 else 32
    ax.set_xticks([j + 0.5 for j in range(0, cols, step_c)], [str(j) for j in range(0, cols, step_c)])
    ax.set_yticks([i + 0.5 for i in range(0, rows, step_r)], [str(i) for i in range(0, rows, step_r)])
    ax.tick_params(length=0, labelsize=8)
    ax.set_xlabel("column j", fontsize=9)
    ax.set_ylabel("row i", fontsize=9)

    segs = []
    key = [[tuple(c[color] for c in pts) for pts in row] for row in cells]
    for i in range(rows):
        for j in range(cols):
            if j + 1 < cols and key[i][j] != key[i][j + 1]:
                segs.append([(j + 1, i), (j + 1, i + 1)])
            if i + 1 < rows and key[i][j] != key[i + 1][j]:
                segs.append([(j, i + 1), (j + 1, i + 1)])
    if cell_labels:
        thin = [[(j, 0), (j, rows)] for j in range(cols + 1)] + [[(0, i), (cols, i)] for i in range(rows + 1)]
        ax.add_collection(LineCollection(thin, colors="white", linewidths=1.2))
        fs = 6.5 if len(labels) > 1 else 7.5
        for i in range(rows):
            for j in range(cols):
                pts = cells[i][j]
                for t, c in enumerate(pts):
                    y = i + (t + 0.5) / len(pts)
                    ax.text(j + 0.5, y, _label(c, labels) if labels else str(c[color]),
                            ha="center", va="center", fontsize=fs, family="monospace")
    ax.add_collection(LineCollection(segs, colors="#333333", linewidths=1.6))
    ax.add_collection(LineCollection([[(0, 0), (cols, 0), (cols, rows), (0, rows), (0, 0)]],
                                     colors="#333333", linewidths=1.6))
    if not cell_labels:
        _hatch_replicas(ax, key, index, len(values))
        _label_regions(ax, cells, key, labels, color)

    handles = [Patch(facecolor=palette[index[v]], edgecolor="#333333", label=f"{color} {v}")
               for v in values]
    if len(handles) <= 32:
        fig.legend(handles=handles, loc="outside right upper", fontsize=8, frameon=False,
                   title=f"colour: {color}", title_fontsize=8)
    head = title if title is not None else str(layout)
    legend = ", ".join(f"{_fmt_axis(a)} = {a}" if a != MEMORY else "m = memory/reg"
                       for a in labels if _fmt_axis(a) != a or (a == MEMORY and cell_labels))
    sub = f"shape {rows}×{cols}; colour: {color}" + (f"; labels: {legend}" if legend else "")
    if k > 1:
        sub += f"; replicas {'stacked' if cell_labels else 'hatched'} ({k} per element)"
    fig.suptitle(f"{head}\n{sub}", fontsize=9, family="monospace")
    return fig


_HATCHES = ("///", "\\\\\\", "|||", "---", "xxx")


def _hatch_replicas(ax, key, index, n):
    """Hatch, over each block of equal colour set, one pattern per replica after the first."""
    from matplotlib import colormaps
    from matplotlib.patches import Rectangle
    strong = colormaps["tab10"].colors if n <= 10 else [tuple(0.6 * c for c in rgb) for rgb in _palette(n)]
    rows, cols = len(key), len(key[0])
    runs = []                                             # (i0, i1, j0, j1, key), merged down rows
    open_runs: dict = {}
    for i in range(rows + 1):
        row_runs, j = set(), 0
        while i < rows and j < cols:
            j1 = j
            while j1 < cols and key[i][j1] == key[i][j]:
                j1 += 1
            row_runs.add((j, j1, key[i][j]))
            j = j1
        for r in list(open_runs):
            if r not in row_runs:
                runs.append((open_runs.pop(r), i) + r)
        for r in row_runs:
            open_runs.setdefault(r, i)
    for i0, i1, j0, j1, vals in runs:
        for t, v in enumerate(vals[1:]):
            ax.add_patch(Rectangle((j0, i0), j1 - j0, i1 - i0, fill=False, linewidth=0,
                                   hatch=_HATCHES[t % len(_HATCHES)], edgecolor=strong[index[v]]))


def _label_regions(ax, cells, key, labels, color):
    """One label per connected region of equal colour set: its colour values and axis ranges."""
    rows, cols = len(cells), len(cells[0])
    seen = [[False] * cols for _ in range(rows)]
    for i0 in range(rows):
        for j0 in range(cols):
            if seen[i0][j0]:
                continue
            stack, members = [(i0, j0)], []
            seen[i0][j0] = True
            while stack:
                i, j = stack.pop()
                members.append((i, j))
                for a, b in ((i + 1, j), (i - 1, j), (i, j + 1), (i, j - 1)):
                    if 0 <= a < rows and 0 <= b < cols and not seen[a][b] and key[a][b] == key[i0][j0]:
                        seen[a][b] = True
                        stack.append((a, b))
            if len(members) < max(4, rows * cols // 400):
                continue                                  # too small to hold a label
            lines = [f"{color} " + " | ".join(str(v) for v in key[i0][j0])]
            for a in labels:
                vals = [c[a] for i, j in members for c in cells[i][j]]
                lo, hi = min(vals), max(vals)
                lines.append(f"{a} {lo}" if lo == hi else f"{a} {lo}…{hi}")
            ib = [i for i, _ in members]
            jb = [j for _, j in members]
            ax.text((min(jb) + max(jb) + 1) / 2, (min(ib) + max(ib) + 1) / 2, "\n".join(lines),
                    ha="center", va="center", fontsize=8, family="monospace",
                    bbox=dict(boxstyle="round,pad=0.3", facecolor="white", alpha=0.8, edgecolor="none"))


def save(layout, shape: Sequence[int], path, **options) -> Path:
    """Draw (see :func:`draw`) and write to ``path``; the suffix picks the format (.svg, .png, .pdf)."""
    path = Path(path)
    if path.suffix.lower() not in (".svg", ".png", ".pdf"):
        raise ValueError(f"picture path {path}: use a .svg, .png or .pdf suffix")
    from matplotlib import rc_context
    fig = draw(layout, shape, **options)
    meta = {"Creator": None, "Date": None} if path.suffix.lower() == ".svg" else \
        {"Creator": None, "CreationDate": None} if path.suffix.lower() == ".pdf" else {}
    # SVG text stays text (searchable, small); no date or random ids, so output is reproducible
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": "axe"}):
        fig.savefig(path, dpi=130, metadata=meta)
    return path
