"""NKI schedules: DMA copies, on-chip copies and TensorE transposes, elementwise, reductions and
TensorE matmul, registered for the ``neuron`` target family.

Each schedule's ``check`` returns a :class:`Plan` (the NKI lines it will emit) or a sentence
saying why it declines; ``emit`` places the lines in the kernel body (:func:`nki_stmt`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from axe.layout import LayoutError, S, equivalent
from axe.schedules.registry import add_schedule, declining

from . import hardware as hw
from .emit import TargetError
from .emit_stmt import nki_stmt
from .tiles import blocks, box_text, find_box, nki_name, onchip_kind, py_expr, row_major_strides
from .tensore import plan_matmul

GENERIC = False     # the target-independent (scalar TIR) schedules do not apply to Trainium

NL_DTYPE = {"float16": "nl.float16", "bfloat16": "nl.bfloat16", "float32": "nl.float32"}


@dataclass
class Plan:
    """The NKI lines a schedule emits, and a one-line description for explain."""

    text: str
    lines: list = field(default_factory=list)

    def describe(self) -> str:
        return self.text


def gpu_memory(call) -> str | None:
    """The reason to decline when an operand lives in GPU shared memory or registers."""
    for k, t in call.operands.items():
        if t.mem in ("shared", "local", "tmem"):
            return (f"{k} {t.name} is in GPU {t.mem} memory (Ax.shared/Ax.registers): a CUDA-only construct, "
                    "meaningless on Trainium; use axe.backends.neuron.lang.sbuf/psum")
    return None


def _checked(check):
    """``check`` preceded by the GPU-memory test every neuron schedule shares.  The tile model
    (:mod:`.tiles`, :mod:`.tensore`) answers "this layout is not an NKI tile" with a
    ``LayoutError`` and "this index has no NKI form" with a ``TargetError``: both are the
    check's reason to decline."""
    @declining(LayoutError, TargetError)
    def run(call, ctx):
        return gpu_memory(call) or check(call, ctx)
    run.__doc__ = check.__doc__
    return run


def _emit(call, plan, ctx):
    for line in plan.lines:
        nki_stmt(line)


def hbm_extent(t):
    """The extents of the NKI array behind HBM tensor ``t`` (its kernel parameter's shape)."""
    return tuple(int(s) for s in t.origin.buffer.shape)


def _hbm_dims(t, tile_shape):
    """The two root dimensions of HBM region ``t`` that carry the tile's rows and columns: its last
    two when the others have extent 1, else (a ``[B, S, H, D]`` region such as ``Q[b, s0:s1, h, :]``)
    the pair whose extents are the tile's with every other dimension of extent 1, the later pair
    preferred."""
    root = t.origin
    real = hbm_extent(t)
    if len(real) != len(root.shape) or not equivalent(root.layout, S[tuple(root.shape):row_major_strides(real)]):
        raise LayoutError(f"{root.describe()}: HBM tensors are NKI arrays indexed by logical position; "
                          f"their layout must be row-major over the parameter's shape {list(real)} "
                          "(padded views: axe.backends.neuron.lang.hbm)")
    ext = list(t.shape)
    rows, cols = tile_shape
    pairs = [(d0, d1) for d0 in range(len(ext)) for d1 in range(len(ext)) if d0 != d1 and ext[d0] == rows
             and ext[d1] == cols and all(e == 1 for d, e in enumerate(ext) if d not in (d0, d1))]
    if not pairs:
        raise LayoutError(f"{t.describe()}: region extents {ext} do not hold the tile's shape {list(tile_shape)} "
                          "(other dimensions of extent 1 only)")
    return max(pairs, key=lambda d: (d[0] < d[1], d[1], d[0]))


def _hbm_access(t, tile_shape, dp, lo, c0):
    """``(index text, mask text or "")`` for the HBM region ``t`` read as ``nl.mgrid`` rows along
    tile dim ``dp`` starting at ``lo`` (``i_p``) and columns from ``c0`` (``i_f``)."""
    d0, d1 = _hbm_dims(t, tile_shape)
    root, idx, masks = t.origin, [], []
    kept = {(d0, d1)[dp]: (lo, "i_p"), (d0, d1)[1 - dp]: (c0, "i_f")}
    for d, (start, extent) in enumerate(zip(t.starts, hbm_extent(t))):
        s = py_expr(start)
        if d not in kept:
            idx.append(s)
            continue
        off, var = kept[d]
        term = f"{s} + {off} + {var}" if off else f"{s} + {var}"
        term = term[4:] if term.startswith("0 + ") else term
        idx.append(term)
        e = t.shape[d]
        static = isinstance(start, int) or hasattr(start, "value")
        if (static and int(start) + e > extent) or (not static and extent % e != 0):
            masks.append(f"({term} < {extent})")
    mask = " & ".join(masks)
    return f"{nki_name(root)}[{', '.join(idx)}]", (f"({mask})" if len(masks) > 1 else mask)


def _grid_box(t, b, c0=0, cols=None):
    cols = b.cols if cols is None else cols
    name = nki_name(t)
    p = f"{b.p0} + i_p" if b.p0 else "i_p"
    f = f"{b.f0 + c0} + i_f" if b.f0 + c0 else "i_f"
    return f"{name}[{p}, {f}]", f"i_p, i_f = nl.mgrid[0:{b.n}, 0:{cols}]"


def _dma_lines(tile, region, access):
    """Per block of the on-chip ``tile``: its index grid, then ``access(hbm, box, mask_kw)`` — the
    nl.load or nl.store of that block against the HBM ``region`` (masked at ragged edges)."""
    lines = []
    for b in blocks(tile):
        box, grid = _grid_box(tile, b)
        hbm, mask = _hbm_access(region, tile.shape, b.dp, b.lo, 0)
        lines += [grid, access(hbm, box, f", mask={mask}" if mask else "")]
    return lines


def _check_dma_load(call, ctx):
    dst, src = call.operands["dst"], call.operands["src"]
    if onchip_kind(dst) != "sbuf" or src.mem != "global":
        return "DMA loads HBM into SBUF (dst must be an SBUF tile, src an HBM region)"
    lines = _dma_lines(dst, src, lambda hbm, box, mask: f"{box} = nl.load({hbm}{mask})")
    tr = " (transposing: rows of the region on the free axis)" if blocks(dst)[0].dp == 1 else ""
    return Plan(f"{len(lines) // 2} x nl.load of [{', '.join(map(str, dst.shape))}] into SBUF {nki_name(dst)}{tr}"
                + ("; ragged edges masked" if "mask=" in "".join(lines) else ""), lines)


def _check_dma_store(call, ctx):
    dst, src = call.operands["dst"], call.operands["src"]
    if dst.mem != "global" or onchip_kind(src) is None:
        return "DMA stores an SBUF/PSUM tile to HBM (dst HBM, src on-chip)"
    lines = _dma_lines(src, dst, lambda hbm, box, mask: f"nl.store({hbm}, value={box}{mask})")
    return Plan(f"{len(lines) // 2} x nl.store of [{', '.join(map(str, src.shape))}] from {onchip_kind(src).upper()} "
                f"{nki_name(src)}" + ("; ragged edges masked" if "mask=" in "".join(lines) else ""), lines)


def _rects(dst, src):
    """Logical rectangles covering ``dst`` such that each lies in one block of both operands."""
    out = []
    for bd in blocks(dst):
        for bs in blocks(src):
            r = [None, None]
            r[bd.dp] = (bd.lo, bd.n)
            if bs.dp == bd.dp:
                lo, hi = max(bd.lo, bs.lo), min(bd.lo + bd.n, bs.lo + bs.n)
                if lo >= hi:
                    continue
                r[bd.dp] = (lo, hi - lo)
                r[1 - bd.dp] = (0, dst.shape[1 - bd.dp])
            else:
                r[bs.dp] = (bs.lo, bs.n)
            out.append(tuple(r))
    return out


def _check_engine_copy(call, ctx):
    dst, src = call.operands["dst"], call.operands["src"]
    if onchip_kind(dst) is None or onchip_kind(src) is None:
        return "an on-chip copy moves SBUF/PSUM tiles (both operands on-chip)"
    lines = []
    for rect in _rects(dst, src):
        (db, ddp), (sb, sdp) = find_box(dst, rect), find_box(src, rect)
        if ddp != sdp:
            return (f"{nki_name(dst)} and {nki_name(src)} hold the tile with different dims on the partitions "
                    "(a transpose: see tensore_transpose)")
        lines.append(f"{db} = nl.copy({sb}, dtype={NL_DTYPE[dst.dtype]})")
    return Plan(f"{len(lines)} x nl.copy {onchip_kind(src).upper()} -> {onchip_kind(dst).upper()} (VectorE)", lines)


def _check_transpose(call, ctx):
    dst, src = call.operands["dst"], call.operands["src"]
    if onchip_kind(dst) != "psum" or onchip_kind(src) is None:
        return "a TensorE transpose writes a PSUM tile from an on-chip tile"
    lines = []
    for rect in _rects(dst, src):
        (db, ddp), (sb, sdp) = find_box(dst, rect), find_box(src, rect)
        if ddp == sdp:
            return "the operands hold the same dim on the partitions (no transpose needed)"
        if rect[0][1] > hw.PMAX or rect[1][1] > hw.PMAX:
            return f"a piece {rect[0][1]}x{rect[1][1]} exceeds the {hw.PMAX}x{hw.PMAX} TensorE transpose"
        lines.append(f"{db} = nisa.nc_transpose({sb})")
    return Plan(f"{len(lines)} x nisa.nc_transpose (TensorE) into PSUM {nki_name(dst)}", lines)


# ----------------------------------------------------------------------------------------------
# elementwise: the lambda's TIR expression printed as nki.language calls


_BIN = {"Add": "nl.add", "Sub": "nl.subtract", "Mul": "nl.multiply", "Div": "nl.divide",
        "Max": "nl.maximum", "Min": "nl.minimum"}
_CALL = {"tirx.exp": "nl.exp", "tirx.log": "nl.log", "tirx.sqrt": "nl.sqrt", "tirx.rsqrt": "nl.rsqrt", "tirx.fabs": "nl.abs"}


def nki_expr(e, names, top=True) -> str:
    """The TIR expression ``e`` over variables ``names`` (Var -> tile text) as NKI calls.  An engine
    reads its inputs and computes in float32 and rounds its result to the output dtype, which NKI
    0.1 takes from the inputs unless ``dtype=`` says otherwise: so a widening cast is not a copy,
    and an inner operation the source computes in float32 from narrower tiles gets
    ``dtype=nl.float32`` (its result is not rounded to bf16/fp16 before the next one; the outermost
    one is rounded once, to the destination's dtype)."""
    import tvm
    tx = tvm.tirx
    if isinstance(e, tx.Var):
        return names[e.name]
    if isinstance(e, (tx.FloatImm, tx.IntImm)):
        return repr(float(e.value))
    if isinstance(e, tx.Cast):
        if str(e.ty) == "float32":      # [ISA] the engines compute in float32: widening is free
            return nki_expr(e.value, names, top)
        if top:                         # the outermost operation rounds its result to the cast's type
            return _with_dtype(nki_expr(e.value, names, True), str(e.ty))
        return f"nl.copy({nki_expr(e.value, names, False)}, dtype={NL_DTYPE[str(e.ty)]})"
    kind = type(e).__name__
    if kind in _BIN:
        text = f"{_BIN[kind]}({nki_expr(e.a, names, False)}, {nki_expr(e.b, names, False)}"
    elif isinstance(e, tvm.ir.Call) and e.op.name in _CALL:
        text = f"{_CALL[e.op.name]}({nki_expr(e.args[0], names, False)}"
    else:
        raise LayoutError(f"elementwise: {kind} {e} has no NKI form here "
                          "(supported: + - * / max min exp log sqrt rsqrt abs, casts)")
    widen = not top and str(e.ty) == "float32" and _promoted(e) != "float32"
    return text + (", dtype=nl.float32)" if widen else ")")


def _promoted(e) -> str | None:
    """The dtype NKI 0.1 gives operation ``e`` as :func:`nki_expr` prints its operands, without a
    ``dtype=``: the operands' dtypes promoted, float32 winning (None: constants only)."""
    ops = [e.a, e.b] if type(e).__name__ in _BIN else list(e.args)
    kinds = {d for d in map(_value_dtype, ops) if d is not None}
    return "float32" if "float32" in kinds or not kinds else sorted(kinds)[0]


def _value_dtype(e) -> str | None:
    """The dtype of the value :func:`nki_expr` prints for an operand ``e`` (None for a constant)."""
    import tvm
    tx = tvm.tirx
    if isinstance(e, (tx.FloatImm, tx.IntImm)):
        return None
    if isinstance(e, tx.Var):
        return str(e.ty)
    if isinstance(e, tx.Cast):
        return _value_dtype(e.value) if str(e.ty) == "float32" else str(e.ty)
    return "float32" if str(e.ty) == "float32" else _promoted(e)


def activation_expr(e, names, vectors) -> str | None:
    """``exp(x*scale ± bias)`` (x a tile, bias a per-partition vector) as one ScalarE
    ``nisa.activation`` (it scales and adds the bias before the function at no extra cost), else None."""
    import tvm
    tx = tvm.tirx
    if not (isinstance(e, tvm.ir.Call) and e.op.name == "tirx.exp"):
        return None
    a, bias = e.args[0], ""
    if isinstance(a, (tx.Sub, tx.Add)) and isinstance(a.b, tx.Var) and a.b.name in vectors:
        bias = f", bias={names[a.b.name]}" if isinstance(a, tx.Add) else f", bias=nl.negative({names[a.b.name]})"
        a = a.a
    scale = 1.0
    if isinstance(a, tx.Mul) and isinstance(a.b, tx.FloatImm):
        a, scale = a.a, float(a.b.value)
    if not isinstance(a, tx.Var) or a.name in vectors:
        return None
    return f"nisa.activation(nl.exp, {names[a.name]}{bias}, scale={scale!r})"


def _with_dtype(text, dtype):
    """``text`` producing ``dtype``: the outermost call takes ``dtype=``; a bare tile is copied."""
    if text.endswith(f", dtype={NL_DTYPE[dtype]})"):
        return text
    if text.startswith(("nl.", "nisa.")) and text.endswith(")") and "dtype=" not in text.rsplit("(", 1)[-1]:
        return text[:-1] + f", dtype={NL_DTYPE[dtype]})"
    return f"nl.copy({text}, dtype={NL_DTYPE[dtype]})"


def _check_elementwise(call, ctx):
    import tvm
    dst = call.operands["dst"]
    srcs = [t for k, t in call.operands.items() if k != "dst"]
    if onchip_kind(dst) is None or any(onchip_kind(s) is None for s in srcs):
        return "VectorE/ScalarE compute on SBUF/PSUM tiles (every operand on-chip)"
    vars_ = [tvm.tirx.Var(f"x{i}", s.dtype) for i, s in enumerate(srcs)]
    expr = call.attrs["fn"](*vars_)
    expr = expr if isinstance(expr, tvm.ir.Expr) else tvm.tirx.const(expr, "float32")
    lines = []
    for b in blocks(dst):
        rect = [None, None]
        rect[b.dp], rect[1 - b.dp] = (b.lo, b.n), (0, dst.shape[1 - b.dp])
        dbox = box_text(nki_name(dst), b.p0, b.n, b.f0, b.cols)
        names = {}
        for i, s in enumerate(srcs):
            r = tuple((0, 1) if s.shape[d] == 1 and dst.shape[d] != 1 else rect[d] for d in range(2))
            sbox, sdp = find_box(s, r)
            if r[b.dp][1] != rect[b.dp][1]:      # one row for all partitions: an explicit broadcast
                sbox = f"{sbox}.broadcast_to(({rect[b.dp][1]}, {r[1 - b.dp][1]}))"
            elif sdp != b.dp and r[1 - b.dp][1] != 1:
                return f"src{i} holds dim {sdp} on the partitions, dst dim {b.dp}: transpose it first"
            names[f"x{i}"] = sbox
        vectors = {f"x{i}" for i, s in enumerate(srcs) if s.shape[1 - b.dp] == 1 and dst.shape[1 - b.dp] != 1}
        if not srcs:
            text = f"nl.add(nl.zeros(({b.n}, {b.cols}), dtype={NL_DTYPE[dst.dtype]}), {nki_expr(expr, names)})"
        else:
            text = _with_dtype(activation_expr(expr, names, vectors) or nki_expr(expr, names), dst.dtype)
        lines.append(f"{dbox} = {text}")
    name = call.attrs.get("name", "fused")
    engine = "ScalarE activation" if "nisa.activation" in lines[0] else \
        ("VectorE + ScalarE" if "nl.exp" in lines[0] else "VectorE")
    return Plan(f"{len(lines)} x {name} on {onchip_kind(dst).upper()} {nki_name(dst)} ({engine})", lines)


# ----------------------------------------------------------------------------------------------
# reductions


def _check_reduce_free(call, ctx):
    dst, src = call.operands["dst"], call.operands["src"]
    if onchip_kind(dst) is None or onchip_kind(src) is None:
        return "reductions run on SBUF/PSUM tiles"
    (dim,) = call.attrs["dims"] if len(call.attrs["dims"]) == 1 else (None,)
    if dim is None or src.rank != 2:
        return "reduces one dim of a 2-D tile"
    lines = []
    for b in blocks(src):
        if b.dp == dim:
            return f"dim {dim} lies on the partitions of {nki_name(src)}: VectorE reduces along the free axis"
        sbox = box_text(nki_name(src), b.p0, b.n, b.f0, b.cols)
        rect = [None, None]
        rect[b.dp], rect[dim] = (b.lo, b.n), (0, 1)
        dbox, _ = find_box(dst, tuple(rect))
        op = {"sum": "nl.sum", "max": "nl.max", "min": "nl.min"}[call.attrs["kind"]]
        lines.append(f"{dbox} = {op}({sbox}, axis=[1], keepdims=True, dtype={NL_DTYPE[dst.dtype]})")
    return Plan(f"{len(lines)} x {call.attrs['kind']} along the free axis (VectorE)", lines)


def _check_reduce_partitions(call, ctx):
    """sum over the partition dim: TensorE multiplies a ones column into the tile (ones.T @ x)."""
    dst, src = call.operands["dst"], call.operands["src"]
    if call.attrs["kind"] != "sum":
        return f"{call.attrs['kind']} along the partitions has no TensorE form (only sum: ones.T @ x); transpose first"
    if onchip_kind(dst) != "psum" or onchip_kind(src) != "sbuf":
        return "a TensorE partition sum reads an SBUF tile and writes a PSUM row"
    (dim,) = call.attrs["dims"] if len(call.attrs["dims"]) == 1 else (None,)
    bs = blocks(src)
    if dim is None or any(b.dp != dim for b in bs):
        return "reduces the dim on the partitions of src (a free-axis reduction is reduce_free)"
    ones = f"ones_{nki_name(src)}"
    n = max(b.n for b in bs)
    lines = [f"{ones} = nl.zeros(({n}, 1), dtype={NL_DTYPE[src.dtype]}, buffer=nl.sbuf, name=\"{ones}\")",
             f"{ones}[0:{n}, 0:1] = nl.add({ones}[0:{n}, 0:1], 1.0, dtype={NL_DTYPE[src.dtype]})"]
    for c0 in range(0, bs[0].cols, hw.MATMUL_MOVING_FREE):
        w = min(hw.MATMUL_MOVING_FREE, bs[0].cols - c0)
        rect = [None, None]
        rect[dim], rect[1 - dim] = (0, 1), (c0, w)
        dbox, _ = find_box(dst, tuple(rect))
        for i, b in enumerate(bs):
            op = "=" if i == 0 else "+="
            lines.append(f"{dbox} {op} nisa.nc_matmul({ones}[0:{b.n}, 0:1], {box_text(nki_name(src), b.p0, b.n, b.f0 + c0, w)})")
    return Plan(f"sum along the partitions on TensorE (ones.T @ x), {len(lines) - 2} x nc_matmul", lines)


def _check_gemm(call, ctx):
    C, A, B = call.operands["C"], call.operands["A"], call.operands["B"]
    if onchip_kind(C) != "psum" or onchip_kind(A) != "sbuf" or onchip_kind(B) != "sbuf":
        return "TensorE reads A and B from SBUF and accumulates C in PSUM"
    mm = plan_matmul(A, B, C)
    if isinstance(mm, str):
        return mm
    lines = []
    for i, (cbox, abox, bbox, first) in enumerate(mm.instructions):
        op = "=" if first and not call.attrs["accumulate"] else "+="
        lines.append(f"{cbox} {op} nisa.nc_matmul({abox}, {bbox})")
    return Plan(mm.describe(), lines)


for _op, _name, _prio, _check, _req in (
        ("copy", "dma_load", 30, _check_dma_load, "HBM region -> SBUF tile whose layout puts one dim on P"),
        ("copy", "dma_store", 30, _check_dma_store, "SBUF/PSUM tile -> HBM region"),
        ("copy", "engine_copy", 20, _check_engine_copy, "on-chip -> on-chip, the same dim on the partitions"),
        ("copy", "tensore_transpose", 10, _check_transpose, "on-chip -> PSUM with the other dim on the partitions"),
        ("elementwise", "engine", 10, _check_elementwise, "on-chip operands, broadcasts along F only"),
        ("reduce", "free_axis", 20, _check_reduce_free, "the reduced dim on F"),
        ("reduce", "partitions_tensore", 10, _check_reduce_partitions, "sum of the dim on P, into a PSUM row"),
        ("gemm", "nc_matmul", 10, _check_gemm, "K on P in A and B; M on F of A and P of C; N on F of B and C")):
    add_schedule(_op, _name, "neuron", _prio, _req, check=_checked(_check), emit=_emit)
