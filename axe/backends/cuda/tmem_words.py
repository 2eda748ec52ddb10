"""16-bit tiles in tensor memory written as 32-bit words (sm_100a).

``tcgen05.st`` moves 32-bit words, and a 16-bit TMEM tile (the A operand of a ``tcgen05.mma`` whose A
comes from tensor memory, the "ts" form) holds two elements per 32-bit column, the even column in
the low half (PTX ISA, the data-path layouts of 16-bit matrices).  So a kernel writes such a tile
by packing pairs of register values into words and storing the words into the same cells seen as
a 32-bit tile:

- :func:`retype`: a TMEM data-path window ``S[(rows, n):(1@TLane, 1@TCol)] + (lane0, col0)`` of
  ``b``-bit elements is, in ``b'``-bit elements, ``S[(rows, n·b/b'):(1@TLane, 1@TCol)] + (lane0,
  col0·b/b')``: the same cells (``TCol`` counts elements of the tensor's own type).
- :func:`pack_pairs`: each thread's word register ``w`` at (row, column c) of a 32-bit register
  tile becomes ``cvt(src[row, 2c]) | cvt(src[row, 2c + 1]) << 16`` (``cvt``: round to nearest
  16-bit ``dtype``); which two source registers feed which word is read off both tiles' layouts
  and must be the same for every thread.

Law: after ``pack_pairs(words, src, P.dtype)`` and ``copy(retype(P, "uint32"), words)``, the
16-bit TMEM tile P holds ``src`` rounded to P's type, element by element.
"""

from __future__ import annotations

__all__ = ["retype", "pair_registers", "pack_pairs"]

_PACK = {
    "bfloat16": ("axe_pack_bf16x2", "__floats2bfloat162_rn", "__nv_bfloat162"),
    "float16": ("axe_pack_f16x2", "__floats2half2_rn", "__half2"),
}


def _bits(dtype) -> int:
    import tvm
    return tvm.DataType(str(dtype)).bits


def _window(rows, cols, lane0, col0):
    """The data-path window of (rows, cols) elements at lane ``lane0``, column ``col0``."""
    from axe.layout import S
    from axe.layout.coord import TCol, TLane
    L = S[(rows, cols):(1 @ TLane, 1 @ TCol)]
    if col0:
        L = L + col0 @ TCol
    if lane0:
        L = L + lane0 @ TLane
    return L


def retype(t, dtype):
    """``t`` (a TMEM data-path window) as a tensor of ``dtype`` elements over the same cells."""
    from dataclasses import replace
    if t.mem != "tmem" or t.rank != 2:
        raise ValueError(f"tmem retype: {t.describe()} is not a 2-D TMEM tile")
    rows, n = t.shape
    (c0,) = t.layout.map((0, 0), t.shape)
    lane0, col0 = c0["TLane"], c0["TCol"]
    if t.layout != _window(rows, n, lane0, col0):
        raise ValueError(f"tmem retype: {t.describe()} is not a data-path window (row i in lane i, columns "
                         "in order)")
    old, new = _bits(t.dtype), _bits(dtype)
    if (n * old) % new or (col0 * old) % new:
        raise ValueError(f"tmem retype: {n} columns of {t.dtype} from column {col0} are no whole number of "
                         f"{dtype} elements")
    cols = n * old // new
    return replace(t, layout=_window(rows, cols, lane0, col0 * old // new), shape=(rows, cols), dtype=str(dtype),
                   root=t.origin, name=f"{t.name}.as_{dtype}")


def _holders(t):
    """``{(thread, register): (row, column)}`` of a register tile (its replica-free layout)."""
    import itertools
    rows, cols = t.shape
    out = {}
    for i, j in itertools.product(range(rows), range(cols)):
        for p in t.layout.map((i, j), t.shape):
            out[p["tx"], p["m"]] = (i, j)
    return out


def pair_registers(words, src) -> dict:
    """``{word register: (src register, src register)}``: for each register of the 32-bit tile
    ``words`` (rows, n/2) at (row, c), the registers of ``src`` (rows, n; either may be a slice of a
    larger tile: registers are its own, offsets included) holding that row's columns ``2c`` and
    ``2c + 1`` in the same thread; a ``ValueError`` where a thread would need another's value or the
    pairs differ from thread to thread."""
    rows, half = words.shape
    if tuple(src.shape) != (rows, 2 * half):
        raise ValueError(f"pack_pairs: {words.describe()} does not pair the columns of {src.describe()}")
    where = {rc: tm for tm, rc in _holders(src).items()}
    pairs = {}
    for (tx, r), (i, c) in _holders(words).items():
        lo, hi = where[i, 2 * c], where[i, 2 * c + 1]
        if lo[0] != tx or hi[0] != tx:
            raise ValueError(f"pack_pairs: thread {tx} packs ({i}, {2 * c}) and ({i}, {2 * c + 1}) of "
                             f"{src.describe()}, which threads {lo[0]} and {hi[0]} hold")
        if pairs.setdefault(r, (lo[1], hi[1])) != (lo[1], hi[1]):
            raise ValueError(f"pack_pairs: word register {r} packs different registers of {src.describe()} "
                             "in different threads")
    return pairs


def pack_pairs(words, src, dtype):
    """Kernel language: fill the uint32 register tile ``words`` with ``src``'s (fp32 registers) pairs of
    neighbouring columns rounded to the 16-bit ``dtype`` (see the module docstring)."""
    from tvm.script import tirx as T
    from tvm.script.ir_builder import tirx as IRB
    if words.dtype != "uint32" or words.mem != "local" or src.mem != "local" or src.dtype != "float32":
        raise ValueError(f"pack_pairs: {words.describe()} must be uint32 registers and {src.describe()} fp32 "
                         "registers")
    if str(dtype) not in _PACK:
        raise ValueError(f"pack_pairs: {dtype} is not one of {sorted(_PACK)}")
    name, cvt, vec = _PACK[str(dtype)]
    source = (f"__forceinline__ __device__ unsigned int {name}(float lo, float hi) {{\n"
              f"  {vec} v = {cvt}(lo, hi);\n  return *reinterpret_cast<unsigned int*>(&v);\n}}\n")
    w, s = words.flat(), src.flat()
    for r, (lo, hi) in sorted(pair_registers(words, src).items()):
        IRB.buffer_store(w, T.cuda.func_call(name, s[lo], s[hi], source_code=source, return_type="uint32"), [r])
