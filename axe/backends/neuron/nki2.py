"""The trn2 spelling: the backend's NKI statements rewritten for the ``nki.*`` API (NKI 0.2+,
Neuron 2.27+), where every ``nisa`` instruction writes an explicit ``dst``.

The schedules write each operator as NKI 0.1 statements (``neuronxcc.nki``: values returned by
``nl.load``/``nl.*``/``nisa.*``, ``nl.mgrid`` index grids, ``mask=``); that text is the backend's
one internal form, emitted unchanged for trn1.  :func:`respell` parses it and rewrites each
statement by the rules below, sources in brackets (docs/trainium.md cites the pages):

- ``nl.load``/``nl.store`` -> ``nisa.dma_copy(dst=, src=)``; a load whose HBM index puts the
  partition grid in a later position than the free grid (axe's transposing DMA) ->
  ``nisa.dma_transpose`` [Trainium2 arch guide, "HBM2SBUF DMA transpose"]; a store of a PSUM tile
  goes through an SBUF tile (``nisa.tensor_copy``) [migration guide 0.3.0: no DMA reads of PSUM];
- ``nl.mgrid`` grids -> slices, and ``mask=(base + i < limit)`` -> slice ends
  ``min(extent, limit - base)`` under ``if base < limit:`` [migration guide 0.2.0: "The mask
  parameter is no longer supported", use ``min`` and slices; loops run at compile time];
- ``nisa.nc_matmul(a, b)`` (``=`` or ``+=``) -> ``nisa.nc_matmul(dst=, stationary=, moving=)``,
  accumulating as 0.2.0 does (first write to a PSUM location overwrites, later ones add);
  ``nisa.nc_transpose(x)`` -> ``nisa.nc_transpose(dst=, data=)``;
- ``nisa.affine_select(base + i_f < limit, t, v)`` of ``keep_columns`` -> ``nisa.memset`` of the
  columns past the end (known when the kernel's loops are unrolled; ``affine_select`` needs an
  SBUF ``dst``, the scores are in PSUM); ``nisa.affine_select(row + i_p >= col + i_f, t, v)`` of
  ``keep_lower`` -> ``nisa.affine_select(dst=, pattern=, offset=row - col, channel_multiplier=1,
  cmp_op=nl.greater_equal)`` on an SBUF copy of the columns of ``t`` that hold the diagonal, copied
  back, and a ``memset`` of the columns right of them [v2.27.0 nki.isa.affine_select];
- a store of a one-column tile whose HBM index puts the free grid first (a row of the HBM array,
  e.g. an LSE row) -> a plain ``dma_copy`` (the same elements in the same order);
- ``nl.max/min/sum(x, axis=[1], keepdims=True)`` -> ``nisa.tensor_reduce(op=nl.maximum/minimum/add)``;
- elementwise expressions -> one instruction per operator into temporaries: ``tensor_tensor``
  (equal shapes), ``tensor_scalar`` (a scalar or a (P, 1) vector operand; ``reverse0`` when it is
  the left-hand side), ``activation`` (``exp``/``sqrt``/``rsqrt``/``abs`` of ``x·scale + bias``,
  folded), ``reciprocal`` (``divide`` is not an ALU operator), ``memset`` (constants),
  ``tensor_copy`` (casts: the ``dst`` dtype is the result's); a one-partition row broadcast to P
  partitions -> ``nisa.nc_matmul(ones, row, is_stationary_onezero=True)`` into PSUM [Trainium
  arch guide, "Partition Broadcast"].

Law: run on the model, the respelled kernel computes what the NKI 0.1 kernel computes (up to
rounding of ``x·(1/y)`` for ``x/y``); a statement outside this grammar is a
:class:`~.emit.TargetError` naming it.
"""

from __future__ import annotations

import ast

from .emit import TargetError

__all__ = ["respell", "HEADER"]

HEADER = "import nki\nimport nki.language as nl\nimport nki.isa as nisa\n"

_ALU = {"add": "nl.add", "subtract": "nl.subtract", "multiply": "nl.multiply", "maximum": "nl.maximum",
        "minimum": "nl.minimum"}
_ACT = ("exp", "log", "sqrt", "rsqrt", "abs")
_REDUCE = {"max": "nl.maximum", "min": "nl.minimum", "sum": "nl.add"}
_MOVING = 512           # TensorE moving free size (hardware.MATMUL_MOVING_FREE) for the broadcast matmul


def respell(source: str) -> str:
    """The ``nki.*`` source of a kernel the emitter wrote in the ``neuronxcc.nki`` spelling."""
    fn = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef))
    args = ", ".join(a.arg for a in fn.args.args)
    lines = [HEADER, "", "@nki.jit", f"def {fn.name}({args}):"]
    _Speller().block(fn.body, 1, lines)
    return "\n".join(lines) + "\n"


def _u(node) -> str:
    return ast.unparse(node)


def _start(base) -> str:
    """The text of a grid term's base (``0`` for ``i_x`` alone)."""
    return "0" if base is None else _u(base)


def _call_name(node) -> str | None:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name):
        return f"{node.func.value.id}.{node.func.attr}"
    return None


def _kw(call, name):
    return next((k.value for k in call.keywords if k.arg == name), None)


def _const(node):
    """The number a name-free expression evaluates to, else None."""
    if any(isinstance(n, ast.Name) for n in ast.walk(node)):
        return None
    try:
        return eval(compile(ast.Expression(node), "<index>", "eval"), {"__builtins__": {}})   # ints and + - * // only
    except Exception:
        return None


def _num(node) -> float | None:
    """The value of a numeric literal (``1.0``, ``-30000.0``), else None."""
    v = _const(node)
    return float(v) if isinstance(v, (int, float)) else None


def _grid_term(node, var):
    """``base`` of ``base + var`` (None for ``var`` alone), or False when ``node`` is not of that form."""
    if isinstance(node, ast.Name) and node.id == var:
        return None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and isinstance(node.right, ast.Name) \
            and node.right.id == var and not any(isinstance(n, ast.Name) and n.id == var for n in ast.walk(node.left)):
        return node.left
    return False


def _axis(node):
    """``("p" | "f", base)`` for an index ``base + i_p`` / ``base + i_f``, or ``("fixed", node)``."""
    for ax, var in (("p", "i_p"), ("f", "i_f")):
        base = _grid_term(node, var)
        if base is not False:
            return ax, base
    if any(isinstance(n, ast.Name) and n.id in ("i_p", "i_f") for n in ast.walk(node)):
        raise TargetError(f"index {_u(node)} has no nki.* slice form (base + i_p or base + i_f)")
    return "fixed", node


def _bounds(mask) -> dict:
    """``{axis: (base, limit)}`` of a mask ``(base + i_x < limit) & ...``."""
    if mask is None:
        return {}
    terms = []

    def split(n):
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.BitAnd):
            split(n.left)
            split(n.right)
        else:
            terms.append(n)
    split(mask)
    out = {}
    for t in terms:
        if not (isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.Lt)):
            raise TargetError(f"mask term {_u(t)} is not (base + i < limit)")
        ax, base = _axis(t.left)
        if ax == "fixed" or ax in out:
            raise TargetError(f"mask term {_u(t)} bounds no single grid axis")
        out[ax] = (base, t.comparators[0])
    return out


class _Speller:
    """Rewrites one kernel body; keeps the tiles declared so far (name -> buffer, dtype), the
    current ``nl.mgrid`` extents, the loop depth of each allocation and a temporary counter."""

    def __init__(self):
        self.tiles, self.grid, self.depth, self.alloc_depth, self.n = {}, None, 0, {}, 0
        self.written = {}       # PSUM tile -> the boxes a matmul wrote since the tile's allocation

    def tmp(self, prefix="_t"):
        self.n += 1
        return f"{prefix}{self.n}"

    # -- statements -----------------------------------------------------------------------------
    def block(self, stmts, indent, out):
        for st in stmts:
            pad = "    " * indent
            if isinstance(st, ast.For):
                out.append(f"{pad}for {_u(st.target)} in {_u(st.iter)}:")
                before = len(out)
                self.depth += 1
                self.block(st.body, indent + 1, out)
                self.depth -= 1
                if len(out) == before:
                    out.append(pad + "    pass")
                continue
            out.extend(pad + line for line in self.statement(st))

    def statement(self, st) -> list:
        if isinstance(st, ast.Return):
            return [_u(st)]
        if isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Tuple):
            if not _u(st.value).startswith("nl.mgrid["):
                raise TargetError(f"statement {_u(st)} has no nki.* form")
            self.grid = [int(_const(s.upper)) for s in st.value.slice.elts]
            return []
        if isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Name):
            name = _call_name(st.value)
            if name not in ("nl.zeros", "nl.ndarray"):
                raise TargetError(f"statement {_u(st)} has no nki.* form")
            buf, dtype = _u(_kw(st.value, "buffer")), _u(_kw(st.value, "dtype"))
            self.tiles[st.targets[0].id] = (buf[3:], dtype)
            self.alloc_depth[st.targets[0].id] = self.depth
            self.written[st.targets[0].id] = set()
            return [_u(st)]
        if isinstance(st, ast.Expr) and _call_name(st.value) == "nl.store":
            return self.dma(st.value.args[0], _kw(st.value, "value"), _kw(st.value, "mask"), store=True)
        if isinstance(st, (ast.Assign, ast.AugAssign)):
            dst = st.targets[0] if isinstance(st, ast.Assign) else st.target
            name = _call_name(st.value)
            if name == "nl.load":
                return self.dma(st.value.args[0], dst, _kw(st.value, "mask"), store=False)
            if name == "nisa.nc_matmul":
                return self.matmul(dst, st.value, isinstance(st, ast.AugAssign))
            if isinstance(st, ast.AugAssign):
                raise TargetError(f"statement {_u(st)}: only TensorE accumulates into PSUM")
            if name == "nisa.nc_transpose":
                return [f"nisa.nc_transpose(dst={_u(dst)}, data={_u(st.value.args[0])})"]
            if name == "nisa.affine_select":
                return self.keep(dst, st.value)
            if name in ("nl.max", "nl.min", "nl.sum"):
                x = st.value.args[0]
                return [f"nisa.tensor_reduce(dst={_u(dst)}, op={_REDUCE[name[3:]]}, data={_u(x)}, axis=[1], "
                        "keepdims=True)"]
            return _Expr(self).into(_u(dst), self.shape(dst), st.value)
        raise TargetError(f"statement {_u(st)} has no nki.* form")

    # -- DMA ------------------------------------------------------------------------------------
    def dma(self, hbm, tile, mask, store):
        """A load (HBM -> SBUF tile) or store (tile -> HBM) of the current grid, its mask as slice ends."""
        if self.grid is None:
            raise TargetError(f"DMA of {_u(tile)} before an index grid")
        bounds, ext, guard = _bounds(mask), {}, []
        for ax, n in zip("pf", self.grid):
            if ax in bounds:
                base, limit = bounds[ax]
                b, lim = (0 if base is None else _const(base)), _const(limit)
                if b is not None and lim is not None:
                    if b >= lim:
                        return []               # the whole block is past the edge: nothing moves
                    ext[ax] = str(min(n, lim - b))
                else:
                    guard.append(f"{_u(base)} < {_u(limit)}")
                    ext[ax] = f"min({n}, {_u(limit)} - ({_u(base)}))"
            else:
                ext[ax] = str(n)
        dims = [_axis(i) for i in (hbm.slice.elts if isinstance(hbm.slice, ast.Tuple) else [hbm.slice])]
        for ax, base in dims:         # the slice starts where the mask's bound is counted from
            if ax in bounds and _start(base) != _start(bounds[ax][0]):
                raise TargetError(f"mask of {_u(hbm)} bounds {_u(bounds[ax][0])} + i_{ax}, the index is "
                                  f"{_u(base)} + i_{ax}")
        hidx = ", ".join(_u(node) if ax == "fixed" else _span(node, ext[ax]) for ax, node in dims)
        hbm_text = f"{_u(hbm.value)}[{hidx}]"
        order = [ax for ax, _ in dims if ax != "fixed"]
        tdims = [_axis(i) for i in tile.slice.elts]
        if [ax for ax, _ in tdims] != ["p", "f"]:
            raise TargetError(f"on-chip box {_u(tile)} is not [base + i_p, base + i_f]")
        box = f"{_u(tile.value)}[{_span(tdims[0][1], ext['p'])}, {_span(tdims[1][1], ext['f'])}]"
        if store:
            if order != ["p", "f"] and ext["f"] != "1":     # one column is stored alike either way
                raise TargetError(f"store {_u(hbm)}: a transposing store has no DMA form (DMA transposes "
                                  "HBM->SBUF and SBUF->SBUF)")
            lines = []
            buf, _ = self.tiles.get(_u(tile.value), ("sbuf", None))
            if buf == "psum":      # DMA does not read PSUM: evict through an SBUF tile of the HBM dtype
                t = self.tmp("_s")
                lines += [f"{t} = nl.ndarray(({self.grid[0]}, {self.grid[1]}), dtype={self.tiles[_u(hbm.value)][1]}, "
                          "buffer=nl.sbuf)",
                          f"nisa.tensor_copy(dst={t}[0:{ext['p']}, 0:{ext['f']}], src={box})"]
                box = f"{t}[0:{ext['p']}, 0:{ext['f']}]"
            lines.append(f"nisa.dma_copy(dst={hbm_text}, src={box})")
        else:
            op = "nisa.dma_copy" if order == ["p", "f"] else "nisa.dma_transpose"
            lines = [f"{op}(dst={box}, src={hbm_text})"]
        if guard:
            return [f"if {' and '.join(guard)}:"] + ["    " + line for line in lines]
        return lines

    # -- TensorE, masks -------------------------------------------------------------------------
    def matmul(self, dst, call, accumulate):
        """``nc_matmul`` with an explicit dst.  NKI 0.2.0 has no accumulate flag: the first write to a
        PSUM location since its allocation overwrites, so an overwrite (``=``) inside a loop that
        does not allocate the tile, or of a box a matmul wrote before, would add to what is there:
        refused."""
        tile = _u(dst.value)
        if not accumulate and (self.alloc_depth.get(tile, 0) < self.depth or _u(dst) in self.written.get(tile, ())):
            raise TargetError(f"{_u(dst)} = nisa.nc_matmul(...): an overwrite of a PSUM box written since the "
                              "tile's allocation (or of a tile allocated outside the loop) has no NKI 0.2 form "
                              "(allocate the tile inside the loop)")
        self.written.setdefault(tile, set()).add(_u(dst))
        a, b = call.args
        return [f"nisa.nc_matmul(dst={_u(dst)}, stationary={_u(a)}, moving={_u(b)})"]

    def keep(self, dst, call):
        """``t = affine_select(base + i_x < limit, t, fill)`` as a memset of the part past ``limit``;
        ``t = affine_select(row + i_p >= col + i_f, t, fill)`` (a per-row bound) as ``nisa.affine_select``
        on an SBUF copy of ``t`` (its dst and input must be in SBUF [v2.27.0 nki.isa.affine_select])."""
        pred, src, fill = call.args
        if _u(src) != _u(dst):
            raise TargetError(f"affine_select into {_u(dst)} from another tile {_u(src)}")
        if isinstance(pred, ast.Compare) and len(pred.ops) == 1 and isinstance(pred.ops[0], ast.GtE):
            return self.keep_lower(dst, pred, fill)
        bounds = _bounds(pred)
        if len(bounds) != 1 or self.grid is None:
            raise TargetError(f"affine_select predicate {_u(pred)} is not one (base + i < limit)")
        (ax, (base, limit)), = bounds.items()
        n = self.grid["pf".index(ax)]
        tdims = [_axis(i) for i in dst.slice.elts]
        first = f"max(0, {_u(limit)} - ({_u(base)}))"
        spans = [_span(b, str(g)) for (_, b), g in zip(tdims, self.grid)]
        start = _u(tdims["pf".index(ax)][1]) if tdims["pf".index(ax)][1] is not None else "0"
        at = first if start == "0" else f"{start} + {first}"
        spans["pf".index(ax)] = f"{at}:{start} + {n}" if start != "0" else f"{at}:{n}"
        box = f"{_u(dst.value)}[{', '.join(spans)}]"
        return [f"if {_u(limit)} - ({_u(base)}) < {n}:", f"    nisa.memset(dst={box}, value={_u(fill)})"]

    def keep_lower(self, dst, pred, fill):
        """``t[p, f] = fill`` where ``row + p < col + f`` (nothing when no element is above the diagonal).
        With ``n`` rows and ``m >= n`` columns, only an n-wide window of columns from ``lo = clamp(row -
        col, 0, m - n)`` holds both kinds: left of it every row keeps, right of it every row drops (a
        ``memset``), and the window goes through SBUF to ``affine_select`` (value ``offset + p - x``
        compared ``>= 0``, ``offset = row - col - lo``) and back."""
        (pa, row), (fa, col) = _axis(pred.left), _axis(pred.comparators[0])
        if (pa, fa) != ("p", "f") or self.grid is None:
            raise TargetError(f"affine_select predicate {_u(pred)} is not (row + i_p >= col + i_f)")
        n, m = self.grid
        row, col = ("0" if x is None else _u(x) for x in (row, col))
        (_, pb), (_, fb) = [_axis(i) for i in dst.slice.elts]
        name, rows, f0 = _u(dst.value), _span(pb, str(n)), _start(fb)
        at = (lambda c: c) if f0 == "0" else (lambda c: f"{f0} + {c}")
        w = min(n, m)
        lo = f"min(max(0, ({row}) - ({col})), {m - w})"
        t = self.tmp()
        tile, window = f"{t}[0:{n}, 0:{w}]", f"{name}[{rows}, {at(lo)}:{at(lo)} + {w}]"
        lines = [f"if ({col}) + {m - 1} > ({row}):"]
        if w < m:
            lines += [f"    if {lo} + {w} < {m}:",
                      f"        nisa.memset(dst={name}[{rows}, {at(lo)} + {w}:{at(m)}], value={_u(fill)})"]
        return lines + [
            f"    {t} = nl.ndarray(({n}, {w}), dtype={self.tiles[name][1]}, buffer=nl.sbuf)",
            f"    nisa.tensor_copy(dst={tile}, src={window})",
            f"    nisa.affine_select(dst={tile}, pattern=[[-1, {w}]], offset=({row}) - ({col}) - ({lo}), "
            f"channel_multiplier=1, on_true_tile={tile}, on_false_value={_u(fill)}, cmp_op=nl.greater_equal)",
            f"    nisa.tensor_copy(dst={window}, src={tile})"]

    def shape(self, node):
        """The shape of a constant box ``t[a:b, c:d]``."""
        if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple)):
            raise TargetError(f"{_u(node)} is not an on-chip box t[a:b, c:d]")
        out = []
        for s in node.slice.elts:
            if not isinstance(s, ast.Slice) or s.lower is None or s.upper is None \
                    or _const(s.lower) is None or _const(s.upper) is None:
                raise TargetError(f"{_u(node)}: on-chip boxes are sliced with constants")
            out.append(_const(s.upper) - _const(s.lower))
        return tuple(out)


def _span(base, ext) -> str:
    b = "0" if base is None else _u(base)
    if b == "0":
        return f"0:{ext}"
    return f"{b}:{b} + {ext}"


class _Expr:
    """An elementwise expression tree compiled to one nisa instruction per operator."""

    def __init__(self, sp: _Speller):
        self.sp, self.lines = sp, []

    def shape_of(self, node):
        name = _call_name(node)
        if _num(node) is not None:
            return None
        if isinstance(node, ast.Subscript):
            return self.sp.shape(node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "broadcast_to":
            return tuple(_const(node.args[0]))
        if name == "nl.zeros":
            return tuple(_const(node.args[0]))
        if name == "nisa.activation":
            return self.shape_of(node.args[1])
        shapes = [s for s in (self.shape_of(a) for a in node.args) if s is not None]
        if not shapes:
            return None
        return tuple(max(d) for d in zip(*shapes))

    def into(self, dst, shape, node) -> list:
        self.emit(dst, shape, node)
        return self.lines

    def temp(self, shape, dtype="nl.float32", buffer="nl.sbuf"):
        t = self.sp.tmp()
        self.lines.append(f"{t} = nl.ndarray({tuple(shape)}, dtype={dtype}, buffer={buffer})")
        return f"{t}[0:{shape[0]}, 0:{shape[1]}]"

    def operand(self, node, shape):
        """``(text, kind)``: kind "tile" (the dst's shape), "vec" ((P, 1) against a wider dst) or "const"."""
        if _num(node) is not None:
            return repr(_num(node)), "const"
        own = self.shape_of(node)
        kind = "tile" if own == tuple(shape) else ("vec" if own == (shape[0], 1) else None)
        if kind is None:
            raise TargetError(f"operand {_u(node)} of shape {own} neither matches {tuple(shape)} nor is a "
                              f"({shape[0]}, 1) vector")
        if isinstance(node, ast.Subscript):
            return _u(node), kind
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "broadcast_to":
            return self.broadcast(node), kind
        dtype = _u(_kw(node, "dtype")) if _call_name(node) == "nl.copy" and _kw(node, "dtype") is not None \
            else "nl.float32"
        t = self.temp(own, dtype)
        self.emit(t, own, node.args[0] if _call_name(node) == "nl.copy" else node)
        return t, kind

    def broadcast(self, node):
        """A one-partition row repeated on P partitions: ``ones(1, P).T @ row`` on TensorE into PSUM."""
        row, (p, m) = node.func.value, tuple(_const(node.args[0]))
        (r0, _), (c0, _) = [(_const(s.lower), _const(s.upper)) for s in row.slice.elts]
        dtype = self.sp.tiles[_u(row.value)][1]
        ones = self.sp.tmp("_ones")
        self.lines += [f"{ones} = nl.ndarray((1, {p}), dtype={dtype}, buffer=nl.sbuf)",
                       f"nisa.memset(dst={ones}[0:1, 0:{p}], value=1.0)"]
        out = self.temp((p, m), "nl.float32", "nl.psum")
        name = out.split("[")[0]
        for c in range(0, m, _MOVING):
            w = min(_MOVING, m - c)
            self.lines.append(f"nisa.nc_matmul(dst={name}[0:{p}, {c}:{c + w}], stationary={ones}[0:1, 0:{p}], "
                              f"moving={_u(row.value)}[{r0}:{r0 + 1}, {c0 + c}:{c0 + c + w}], "
                              "is_stationary_onezero=True)")
        return out

    def emit(self, dst, shape, node):
        name = _call_name(node)
        if isinstance(node, ast.Subscript):
            self.lines.append(f"nisa.tensor_copy(dst={dst}, src={_u(node)})")
        elif name == "nl.copy":
            self.emit(dst, shape, node.args[0])
        elif name == "nisa.activation":
            self.activation(dst, shape, node.args[1], _u(node.args[0]), _kw(node, "scale"), _kw(node, "bias"))
        elif name and name[3:] in _ACT and name.startswith("nl."):
            x, scale, bias = _affine(node.args[0])
            self.activation(dst, shape, x, name, scale, bias)
        elif name == "nl.negative":
            x, _ = self.operand(node.args[0], shape)
            self.lines.append(f"nisa.tensor_scalar(dst={dst}, data={x}, op0=nl.multiply, operand0=-1.0)")
        elif name == "nl.divide":
            self.divide(dst, shape, *node.args)
        elif name and name[3:] in _ALU:
            self.binary(dst, shape, name[3:], *node.args)
        else:
            raise TargetError(f"elementwise {_u(node)} has no nki.* form here")

    def activation(self, dst, shape, x, op, scale, bias):
        xt, kind = self.operand(x, shape)
        if kind != "tile":
            raise TargetError(f"{op} of {_u(x)}: ScalarE applies it to a tile of the dst's shape")
        args = f"dst={dst}, op={op}, data={xt}"
        if bias is not None:
            if _call_name(bias) == "nl.negative":
                v, _ = self.operand(bias.args[0], shape)
                b = self.temp(self.shape_of(bias.args[0]) or (shape[0], 1))
                self.lines.append(f"nisa.tensor_scalar(dst={b}, data={v}, op0=nl.multiply, operand0=-1.0)")
            else:
                b, _ = self.operand(bias, shape)
            args += f", bias={b}"
        if scale is not None and _u(scale) != "1.0":
            args += f", scale={_u(scale)}"
        self.lines.append(f"nisa.activation({args})")

    def divide(self, dst, shape, x, y):
        """``x / y``: ``divide`` is no ALU operator [tbl-aluop]; ``x · (1/y)`` with VectorE's reciprocal."""
        c = _num(y)
        if c is not None:
            return self.binary_text(dst, "multiply", self.operand(x, shape), (repr(1.0 / c), "const"))
        yt, ykind = self.operand(y, shape)
        own = (shape[0], 1) if ykind == "vec" else tuple(shape)
        if _num(x) == 1.0 and ykind == "tile":
            self.lines.append(f"nisa.reciprocal(dst={dst}, data={yt})")
            return None
        r = self.temp(own)
        self.lines.append(f"nisa.reciprocal(dst={r}, data={yt})")
        return self.binary_text(dst, "multiply", self.operand(x, shape), (r, ykind))

    def binary(self, dst, shape, op, x, y):
        if _call_name(x) == "nl.zeros" and _num(y) is not None:      # a constant tile
            self.lines.append(f"nisa.memset(dst={dst}, value={_num(y)!r})")
            return
        self.binary_text(dst, op, self.operand(x, shape), self.operand(y, shape))

    def binary_text(self, dst, op, a, b):
        (at, ak), (bt, bk) = a, b
        if ak == "tile" and bk == "tile":
            self.lines.append(f"nisa.tensor_tensor(dst={dst}, data1={at}, data2={bt}, op={_ALU[op]})")
        elif ak == "tile":
            self.lines.append(f"nisa.tensor_scalar(dst={dst}, data={at}, op0={_ALU[op]}, operand0={bt})")
        elif bk == "tile":
            self.lines.append(f"nisa.tensor_scalar(dst={dst}, data={bt}, op0={_ALU[op]}, operand0={at}, reverse0=True)")
        else:
            raise TargetError(f"{op} of two scalars into {dst}: no tile operand")


def _affine(node):
    """``(x, scale, bias)`` for ``x * c + b``, ``x * c`` or ``x + b`` (c a constant, b a constant or a
    vector) — what ``nisa.activation`` applies before its function at no extra cost — else ``(node, None, None)``."""
    x, scale, bias = node, None, None
    if _call_name(x) == "nl.add" and _call_name(x.args[1]) is None:       # a constant or a vector box
        x, bias = x.args
    if _call_name(x) == "nl.multiply" and _num(x.args[1]) is not None:
        x, scale = x.args
    if bias is not None and scale is None and _call_name(x) is not None and _num(bias) is None:
        return node, None, None      # x + vector with x computed: one tensor_scalar is as cheap
    return x, scale, bias
