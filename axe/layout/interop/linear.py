"""Linear layouts (Triton, arXiv 2505.23819) ↔ Axe layouts.

A linear layout is an F2-linear map from hardware bits to tensor bits: for each input
dimension (``register``, ``lane``, ``warp``, ``block``, or ``offset`` for memory) a list of
basis vectors, basis i being the tensor coordinate (one int per output dimension ``dim0``,
``dim1``, …) of hardware index ``2^i``; an input index maps to the XOR of the bases of its set
bits.  That is the direction *hardware → tensor*; an Axe layout maps *tensor → hardware*.  The
preimage of an element is an affine F2 subspace: its particular part is the Axe shard, the
kernel (zero bases, i.e. broadcasting) is the Axe replica.

* :func:`from_linear` imports a **distributed** linear layout (Def. 4.10 of the paper: every
  basis zero or a single power of two in one output dimension, no two non-zero bases equal,
  every output bit reached).  Anything else mixes bits by XOR, which no Axe shard-plus-replica
  expresses; it is refused naming the offending basis.  Nothing is lost on import.
* :func:`to_linear` exports an Axe layout (optionally swizzled) over a power-of-two shape.  It
  must be F2-linear and fill each axis's hardware index range ``[0, 2^n)`` exactly: powers of
  two everywhere, positive strides whose bits never overlap (so sums are XORs), no offset, no
  holes (an index no element uses has no basis to say so).  An XOR swizzle is linear over F2
  and maps to its matrix.  Axe layouts with other extents (App. G, e.g. the column-major
  24×24 of ``f(i) = ⌊i/24⌋ + (i%24)·24``) are refused with a witness of non-linearity.

Hardware axes: ``register``/``offset`` ↔ ``m`` (registers are the memory of a thread's local
buffer), ``lane`` ↔ ``lane``, ``warp`` ↔ ``warp``, ``block`` ↔ ``cta``; pass ``axes`` (import)
or ``names`` (export) to change them.
"""

from __future__ import annotations

import re
from math import prod
from typing import Mapping, Sequence

from ..canonical import canonicalize
from ..coord import MEMORY, Coord, canonical_axis
from ..group import LayoutError, group_blocks
from ..iters import Iter
from ..layout import Layout
from ..swizzle import Swizzle, SwizzledLayout

__all__ = ["LinearLayout", "from_linear", "to_linear", "blocked", "nvidia_mma", "nvidia_dot",
           "parse_triton", "swizzle_bases", "DEFAULT_AXES"]

DEFAULT_AXES = {"register": MEMORY, "offset": MEMORY, "lane": "lane", "warp": "warp", "block": "cta"}
_DEFAULT_NAMES = {MEMORY: "register", "lane": "lane", "warp": "warp", "cta": "block"}


def _pow2(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


class LinearLayout:
    """An immutable linear layout: ``bases[in_dim][i]`` is the image of input index ``2^i``.

    ``out_dims`` is ``((name, size), …)``, sizes powers of two.  Law: ``L(**{in: h})`` is the
    XOR, per output dimension, of the bases of the set bits of each h.
    """

    __slots__ = ("bases", "out_dims")

    def __init__(self, bases: Mapping[str, Sequence[Sequence[int]]], out_dims=None):
        rank = None
        clean = {}
        for name, vs in bases.items():
            vs = tuple(tuple(int(c) for c in v) for v in vs)
            for v in vs:
                if rank is None:
                    rank = len(v)
                if len(v) != rank or min(v, default=0) < 0:
                    raise ValueError(f"LinearLayout: basis {name} {v} must have {rank} non-negative entries")
            clean[name] = vs
        if out_dims is None:
            rank = rank or 1
            sizes = [1] * rank
            for vs in clean.values():
                for v in vs:
                    sizes = [max(s, 1 << c.bit_length()) for s, c in zip(sizes, v)]
            out_dims = tuple((f"dim{d}", s) for d, s in enumerate(sizes))
        out_dims = tuple((str(n), int(s)) for n, s in out_dims)
        for n, s in out_dims:
            if not _pow2(s):
                raise ValueError(f"LinearLayout: output dimension {n} has size {s}, not a power of two")
        if rank is not None and rank != len(out_dims):
            raise ValueError(f"LinearLayout: bases have {rank} entries, out_dims names {len(out_dims)}")
        self.bases = clean
        self.out_dims = out_dims

    def in_size(self, name: str) -> int:
        """The extent of input ``name``: 2 to the number of its basis vectors (1 when it has none)."""
        return 1 << len(self.bases.get(name, ()))

    def __call__(self, **inputs) -> tuple:
        out = [0] * len(self.out_dims)
        for name, h in inputs.items():
            vs = self.bases.get(name, ())
            if not 0 <= h < (1 << len(vs)):
                raise IndexError(f"{name}={h} outside [0, {1 << len(vs)})")
            for i, v in enumerate(vs):
                if h >> i & 1:
                    out = [a ^ b for a, b in zip(out, v)]
        return tuple(out)

    def __eq__(self, other) -> bool:
        if not isinstance(other, LinearLayout):
            return NotImplemented
        keys = set(self.bases) | set(other.bases)
        return self.out_dims == other.out_dims and all(
            self.bases.get(k, ()) == other.bases.get(k, ()) for k in keys)

    def __hash__(self):
        return hash((tuple(sorted((k, v) for k, v in self.bases.items() if v)), self.out_dims))

    def __repr__(self) -> str:
        lines = []
        for name, vs in self.bases.items():
            for i, v in enumerate(vs):
                lines.append(f"{' - ' if i == 0 else '   '}{name}={1 << i} -> ({', '.join(map(str, v))})")
            if not vs:
                lines.append(f" - {name} is a size 1 dimension")
        dims = ", ".join(f"{n} (size {s})" for n, s in self.out_dims)
        return "\n".join(lines + [f"where out dims are: [{dims}]"])


_LINE = re.compile(r"^\s*(?:-\s*)?(\w+)=(\d+)\s*->\s*\(([^)]*)\)\s*$")
_EMPTY = re.compile(r"^\s*(?:-\s*)?(\w+) is a size 1 dimension\s*$")
_OUT = re.compile(r"(\w+)\s*\(size\s*(\d+)\)")


def parse_triton(text: str) -> LinearLayout:
    """Read a linear layout as Triton prints it (``str(LinearLayout)``, also :func:`repr` here)."""
    bases: dict[str, list] = {}
    out_dims = None
    for line in text.strip().splitlines():
        if not line.strip():
            continue
        if "out dims" in line:
            out_dims = [(n, int(s)) for n, s in _OUT.findall(line)]
            continue
        mt = _LINE.match(line)
        if mt:
            name, k, vec = mt.group(1), int(mt.group(2)), mt.group(3)
            vs = bases.setdefault(name, [])
            if not _pow2(k) or k != 1 << len(vs):
                raise ValueError(f"parse_triton: {name}={k} out of order (expected {1 << len(vs)})")
            vs.append([int(c) for c in vec.split(",") if c.strip()])
            continue
        mt = _EMPTY.match(line)
        if mt:
            bases.setdefault(mt.group(1), [])
            continue
        raise ValueError(f"parse_triton: cannot read line {line!r}")
    return LinearLayout(bases, out_dims)


# --- import ---------------------------------------------------------------------------------
def from_linear(LL, axes: Mapping[str, str] | None = None, out_dims=None) -> tuple[Layout, tuple]:
    """``(A, shape)``: the Axe layout of a distributed linear layout, over its output shape.

    Law: for every tensor element u (Axe row-major over ``shape``),
    ``f_{A⟨shape⟩}(u) == { Σ_d h_d @ axis(d) | LL(h) == u }``.  ``LL`` is a
    :class:`LinearLayout` or a dict of bases (then ``out_dims`` may give names and sizes).
    """
    if not isinstance(LL, LinearLayout):
        LL = LinearLayout(LL, out_dims)
    amap = dict(DEFAULT_AXES)
    amap.update(axes or {})
    shape = tuple(s for _, s in LL.out_dims)
    owner: dict[tuple[int, int], tuple[str, int]] = {}
    replica = []
    for name, vs in LL.bases.items():
        a = canonical_axis(amap.get(name, name))
        for i, v in enumerate(vs):
            hit = [(d, c) for d, c in enumerate(v) if c]
            if not hit:
                replica.append(Iter(2, 1 << i, a))
                continue
            if len(hit) > 1 or not _pow2(hit[0][1]):
                raise LayoutError(f"from_linear: basis {name}={1 << i} -> {v} mixes output bits; an Axe "
                                  "layout needs every basis zero or one power of two in one output "
                                  "dimension (XOR mixing is not a shard plus replica)")
            d, c = hit[0]
            key = (d, c.bit_length() - 1)
            if c >= shape[d]:
                raise LayoutError(f"from_linear: basis {name}={1 << i} -> {v} leaves output dimension "
                                  f"{LL.out_dims[d][0]} of size {shape[d]}")
            if key in owner:
                other = owner[key]
                raise LayoutError(f"from_linear: bases {other[0]}={1 << other[1]} and {name}={1 << i} "
                                  f"both map to {c} in {LL.out_dims[d][0]}; the element's holders "
                                  "would be an XOR pattern, not a replica")
            owner[key] = (a, i)
    shard = []
    for d, s in enumerate(shape):
        for j in reversed(range(s.bit_length() - 1)):
            if (d, j) not in owner:
                raise LayoutError(f"from_linear: no basis reaches {1 << j} in {LL.out_dims[d][0]}; the "
                                  "layout is not surjective and those elements have no holder")
            a, i = owner[(d, j)]
            shard.append(Iter(2, 1 << i, a))
    return canonicalize(Layout._make(tuple(shard) or (Iter(1, 1),), tuple(replica))), shape


# --- export ---------------------------------------------------------------------------------
def swizzle_bases(sw: Swizzle, bits: int) -> list[int]:
    """The F2 matrix of ``Swizzle(B, M, S)`` on ``bits``-bit offsets: column i is ``sw(2^i)``.

    Law: ``sw(x) == XOR of column i over the set bits i of x`` for every x < 2^bits.
    """
    sw = Swizzle(*sw).check()
    return [sw(1 << i) for i in range(bits)]


def _witness(L, shape) -> str:
    """A non-linearity witness on the flat index, as App. G states it, when one is cheap."""
    n = prod(shape)
    if n < 4:
        return ""
    # one holder per element (replicas give several; Coords have no order, their items do)
    f = [min(L.map(x), key=lambda c: sorted(c.items())) for x in (1, 2, 3)]
    for a in sorted(set(f[0]) | set(f[1]) | set(f[2])):
        v1, v2, v3 = f[0][a], f[1][a], f[2][a]
        if v1 >= 0 and v2 >= 0 and v3 != v1 ^ v2:
            where = "" if a == MEMORY else f" on {a}"
            return f"; e.g. f(1)={v1}, f(2)={v2}, f(3)={v3} ≠ f(1) XOR f(2) = {v1 ^ v2}{where}"
    return ""


def _invert_f2(columns: list[int], width: int) -> list[int] | None:
    """Rows of the inverse of the square F2 matrix whose column k is ``columns[k]`` (bit rows)."""
    n = len(columns)
    rows = [0] * width
    for k, col in enumerate(columns):
        for r in range(width):
            if col >> r & 1:
                rows[r] |= 1 << k
    aug = [(rows[r], 1 << r) for r in range(width)]
    for c in range(n):
        piv = next((r for r in range(c, width) if aug[r][0] >> c & 1), None)
        if piv is None:
            return None
        aug[c], aug[piv] = aug[piv], aug[c]
        for r in range(width):
            if r != c and aug[r][0] >> c & 1:
                aug[r] = (aug[r][0] ^ aug[c][0], aug[r][1] ^ aug[c][1])
    return [aug[k][1] for k in range(n)]


def to_linear(L, shape: Sequence[int], names: Mapping[str, str] | None = None,
              out_names: Sequence[str] | None = None) -> LinearLayout:
    """The linear layout (hardware → tensor) of an F2-linear Axe layout over ``shape``.

    Law: for every tensor element u and every ``c ∈ f_{L⟨shape⟩}(u)``, ``LL(c) == u`` (each
    axis's component of c fed to its input dimension), and the elements' holders exhaust the
    hardware index space ``∏_axes [0, 2^n_axis)``.  Refused with :class:`LayoutError` otherwise.
    """
    shape = tuple(shape)
    who = f"to_linear({L}, {shape})"
    inner, sw, sw_axis = (L.inner, L.swizzle, L.axis) if isinstance(L, SwizzledLayout) else (L, None, None)
    if not L.admits(shape):
        raise LayoutError(f"{who}: the shape's size {prod(shape)} is not the layout's size {L.size}")
    for d, s in enumerate(shape):
        if not _pow2(s):
            raise LayoutError(f"{who}: dimension {d} has extent {s}, not a power of two; a linear layout "
                              f"is a map of F2 vector spaces of sizes 2^k{_witness(L, shape)}")
    if inner.offset or (sw is not None and L.base):
        raise LayoutError(f"{who}: offset {inner.offset or L.base} makes the map affine, not linear")
    blocks = group_blocks(inner.shard, shape)
    if isinstance(blocks, str):
        raise LayoutError(f"{who}: {blocks}")
    # columns: (axis, pre-swizzle value, tensor value or None for a replica digit)
    cols = []
    for d, blk in enumerate(blocks):
        bit = 0
        for e, s, a in reversed(blk):
            cols.extend(_digit_columns(who, e, s, a, (d, bit)))
            bit += e.bit_length() - 1
    for e, s, a in inner.replica:
        cols.extend(_digit_columns(who, e, s, a, None))
    used: dict[str, int] = {}
    for a, v, t in cols:
        if used.get(a, 0) & v:
            raise LayoutError(f"{who}: two digits share bits of {v} on {a}, so sums carry and the map is "
                              f"not XOR-linear{_witness(L, shape)}")
        used[a] = used.get(a, 0) | v
    for a, bits in used.items():
        if bits & (bits + 1):
            raise LayoutError(f"{who}: on {a} the layout uses index bits {bin(bits)}; a linear layout gives "
                              "every bit of an input dimension a basis, and no basis can mean 'holds nothing'")
    axes = sorted(used)
    width = {a: used[a].bit_length() for a in axes}
    base_bit, acc = {}, 0
    for a in axes:
        base_bit[a] = acc
        acc += width[a]
    vectors = []
    for a, v, t in cols:
        if sw is not None and a == sw_axis:
            v = sw(v)
        vectors.append(v << base_bit[a])
    if len(vectors) != acc:
        raise LayoutError(f"{who}: {len(vectors)} digits for {acc} hardware bits; a digit spans "
                          "several bits, leaving hardware indices without an element")
    inv = _invert_f2(vectors, acc)
    if inv is None:
        raise LayoutError(f"{who}: the swizzled map is not invertible on the hardware bits")
    nm = dict(_DEFAULT_NAMES)
    nm.update({canonical_axis(k): v for k, v in (names or {}).items()})
    bases = {}
    for a in axes:
        vs = []
        for i in range(width[a]):
            h = base_bit[a] + i
            out = [0] * len(shape)
            for k, (_, _, t) in enumerate(cols):
                if t is not None and inv[k] >> h & 1:
                    out[t[0]] ^= 1 << t[1]
            vs.append(tuple(out))
        bases[nm.get(a, a)] = vs
    names_out = list(out_names) if out_names is not None else [f"dim{d}" for d in range(len(shape))]
    return LinearLayout(bases, tuple(zip(names_out, shape)))


def _digit_columns(who, e, s, a, tensor):
    if e == 1:
        return []
    if not _pow2(e):
        raise LayoutError(f"{who}: iter {e}:{s}@{a} has an extent that is not a power of two")
    if s < 0:
        raise LayoutError(f"{who}: iter {e}:{s}@{a} has a negative stride; F2 offsets are non-negative")
    out = []
    for b in range(e.bit_length() - 1):
        out.append((a, s << b, None if tensor is None else (tensor[0], tensor[1] + b)))
    return out


# --- Triton's encodings (distributed layouts) -------------------------------------------------
# Triton builds a distributed layout in two parts: a CTA layout (register, lane, warp bases of
# one block) and a CGA layout (block bases), then fits the CTA part to the tensor's per-block
# shape.  The conventions below are the ones Triton's LinearLayoutConversionsTest pins down
# (re-typed as data in tests/test_triton_conversions.py):
#   * a tensor dimension larger than the CTA tile repeats it through further register bases,
#     dimensions taken in the layout's own order (fastest first), each filled before the next;
#   * a dimension smaller than the tile zeroes every basis component past it (broadcast) --
#     register bases included: they stay, as zero bases, so each thread holds copies and the
#     register count is the tile's, not the tensor's;
#   * block bases: per dimension in CTA order, the split bits first, then zero bases for the
#     CTAs that hold copies (CTAsPerCGA / CTASplitNum); the CTA part is fitted to
#     max(1, shape / CGA size) per dimension, the CGA part to the shape.


def _unit(rank: int, d: int, value: int) -> tuple:
    v = [0] * rank
    v[d] = value
    return tuple(v)


class _Product:
    """Bases built as Triton's layout product: each factor continues where the last one ended.

    ``take(name, d, n)`` appends log2(n) bases of input ``name`` that count on output
    dimension d from its current size (an identity factor); ``copies(name, n)`` appends log2(n)
    zero bases (a broadcast factor, which does not grow the output).
    """

    def __init__(self, rank: int):
        self.rank = rank
        self.size = [1] * rank
        self.bases = {"register": [], "lane": [], "warp": []}

    def take(self, name: str, d: int, n: int) -> None:
        for _ in range(n.bit_length() - 1):
            self.bases[name].append(_unit(self.rank, d, self.size[d]))
            self.size[d] *= 2

    def copies(self, name: str, n: int) -> None:
        self.bases[name] += [(0,) * self.rank] * (n.bit_length() - 1)


def _extent(bases: Mapping[str, list], d: int) -> int:
    """Size of output dimension d spanned by single-bit bases: twice the largest component."""
    top = max((v[d] for vs in bases.values() for v in vs), default=0)
    return 1 << top.bit_length()


def _fit(bases: dict, order: Sequence[int], target: Sequence[int]) -> dict:
    """Triton's fitting of a CTA layout to ``target``: grow through registers, then zero past it.

    Law: afterwards every output dimension d spans exactly ``target[d]`` and no component is
    ``>= target[d]``; no basis is removed, so the input sizes only grow.
    """
    rank = len(target)
    bases = {k: list(vs) for k, vs in bases.items()}
    for d in order:
        size = _extent(bases, d)
        while size < target[d]:
            bases["register"].append(_unit(rank, d, size))
            size *= 2
    return {k: [tuple(c if c < target[d] else 0 for d, c in enumerate(v)) for v in vs]
            for k, vs in bases.items()}


def _cga(rank: int, cga) -> tuple[tuple, tuple, tuple]:
    """``(CTAsPerCGA, CTASplitNum, CTAOrder)``, Triton's default (one CTA) when ``cga`` is None."""
    if cga is None:
        return (1,) * rank, (1,) * rank, tuple(reversed(range(rank)))
    per, split, order = (tuple(int(x) for x in t) for t in cga)
    for name, t in (("CTAsPerCGA", per), ("CTASplitNum", split)):
        if len(t) != rank or not all(_pow2(x) for x in t):
            raise ValueError(f"cga: {name} {t} must have {rank} power-of-two entries")
    if any(p % s for p, s in zip(per, split)):
        raise ValueError(f"cga: CTASplitNum {split} must divide CTAsPerCGA {per}")
    _check_order("cga: CTAOrder", order, rank)
    return per, split, order


def _check_order(who: str, order: Sequence[int], rank: int) -> None:
    if sorted(order) != list(range(rank)):
        raise ValueError(f"{who} {tuple(order)} is not a permutation of {rank} dimensions")


def _with_cga(cta: dict, order: Sequence[int], shape: Sequence[int], cga) -> LinearLayout:
    """The whole layout: CTA bases fitted per block, CGA (``block``) bases fitted to ``shape``."""
    rank = len(shape)
    per, split, corder = _cga(rank, cga)
    block_raw = []                      # (dimension, multiple of the per-block size, or 0)
    for d in corder:
        block_raw += [(d, 1 << k) for k in range(split[d].bit_length() - 1)]
        block_raw += [(d, 0)] * ((per[d] // split[d]).bit_length() - 1)
    cga_size = [min(split[d], shape[d]) for d in range(rank)]
    cta_shape = [max(1, shape[d] // cga_size[d]) for d in range(rank)]
    bases = _fit(cta, order, cta_shape)
    bases["block"] = [_unit(rank, d, k * cta_shape[d] if 0 < k < shape[d] else 0) for d, k in block_raw]
    return LinearLayout(bases, tuple((f"dim{d}", s) for d, s in enumerate(shape)))


def _check_shape(who: str, shape: Sequence[int], *named) -> int:
    rank = len(shape)
    for name, t in (("shape", shape),) + named:
        if len(t) != rank or not all(_pow2(int(x)) for x in t):
            raise ValueError(f"{who}: {name} {tuple(t)} must have {rank} power-of-two entries")
    return rank


def blocked(shape: Sequence[int], size_per_thread: Sequence[int], threads_per_warp: Sequence[int],
            warps_per_cta: Sequence[int], order: Sequence[int], cga=None) -> LinearLayout:
    """Triton's ``#blocked`` layout as a linear layout (Prop. 4.6 / 9.1 of the paper).

    Per level (registers, lanes, warps), the dimensions in ``order`` (fastest first) take the
    next bits of their output dimension; ``cga = (CTAsPerCGA, CTASplitNum, CTAOrder)`` adds the
    block bases.  Law: equal, basis for basis, to Triton's ``toLinearLayout(shape, #blocked)``
    (see the conventions above; zero bases are broadcast, register ones included).
    """
    rank = _check_shape("blocked", shape, ("sizePerThread", size_per_thread),
                        ("threadsPerWarp", threads_per_warp), ("warpsPerCTA", warps_per_cta))
    _check_order("blocked: order", order, rank)
    p = _Product(rank)
    for name, counts in (("register", size_per_thread), ("lane", threads_per_warp), ("warp", warps_per_cta)):
        for d in order:
            p.take(name, d, counts[d])
    return _with_cga(p.bases, order, shape, cga)


def _mma_tile(rank: int, inner: int, outer: int, m: int, n: int, k_width: int) -> _Product:
    """Register and lane bases of one mma fragment tile (PTX ``mma`` / ``wgmma`` fragments).

    Registers take ``k_width`` consecutive elements of the inner dimension, lanes 4 along the
    inner then 8 along the outer dimension, then registers repeat m/8 times along the outer and
    n/(4·k_width) times along the inner dimension.
    """
    p = _Product(rank)
    p.take("register", inner, k_width)
    p.take("lane", inner, 4)
    p.take("lane", outer, 8)
    p.take("register", outer, m // 8)
    p.take("register", inner, n // (4 * k_width))
    return p


def _mma_warp_order(version: int, rank: int) -> tuple:
    # Ampere numbers warps row-major; Hopper column-major (a warpgroup's 4 warps go down M).
    if version == 3:
        return tuple(range(rank))
    return tuple(reversed(range(rank)))


def nvidia_mma(shape: Sequence[int], version: int, instr_shape: Sequence[int],
               warps_per_cta: Sequence[int], cga=None) -> LinearLayout:
    """Triton's ``#nvidia_mma`` accumulator layout (``version`` 2: Ampere mma, 3: Hopper wgmma).

    ``instr_shape`` is the tile per warp (v2: ``(…, 16, 8)``; v3: ``(M, N, K)``, of which M, N
    count).  Law: equal to Triton's ``toLinearLayout(shape, #nvidia_mma)``.
    """
    rank = len(shape)
    if version not in (2, 3):
        raise ValueError(f"nvidia_mma: version {version} is not 2 (Ampere) or 3 (Hopper)")
    tile = tuple(instr_shape)[:rank] if version == 2 else (1,) * (rank - 2) + tuple(instr_shape)[:2]
    _check_shape("nvidia_mma", shape, ("instrShape", tile), ("warpsPerCTA", warps_per_cta))
    if tile[-2] % 8 or tile[-1] % 8:
        raise ValueError(f"nvidia_mma: instrShape {tuple(instr_shape)}: M and N must be multiples of 8")
    order = tuple(reversed(range(rank)))
    p = _mma_tile(rank, rank - 1, rank - 2, tile[-2], tile[-1], 2)
    for d in _mma_warp_order(version, rank):
        p.take("warp", d, warps_per_cta[d])
    return _with_cga(p.bases, order, shape, cga)


def nvidia_dot(shape: Sequence[int], op_idx: int, k_width: int, version: int,
               warps_per_cta: Sequence[int], cga=None) -> LinearLayout:
    """Triton's ``#dot_op<{opIdx, parent = #nvidia_mma, kWidth}>`` register layout.

    Operand A (``op_idx`` 0) is M×K, B (1) is K×N; a fragment holds ``k_width`` consecutive K
    elements per register group, and the warps of the parent's K direction broadcast (zero
    bases).  Hopper (version 3) reads B from shared memory, so only A exists there.  Law: equal
    to Triton's ``toLinearLayout(shape, #dot_op)``.
    """
    rank = len(shape)
    if op_idx not in (0, 1) or (version == 3 and op_idx == 1) or version not in (2, 3):
        raise ValueError(f"nvidia_dot: operand {op_idx} of an mma v{version} has no register layout")
    _check_shape("nvidia_dot", shape, ("warpsPerCTA", warps_per_cta), ("kWidth", (k_width,) * rank))
    k_dim = rank - 1 if op_idx == 0 else rank - 2
    other = rank - 2 if op_idx == 0 else rank - 1
    m, n = (16, 8 * k_width) if op_idx == 0 else (8, 8 * k_width)
    p = _mma_tile(rank, k_dim, other, m, n, k_width)
    for d in _mma_warp_order(version, rank):
        if d == k_dim:
            p.copies("warp", warps_per_cta[d])      # the parent's K-direction warps share A/B
        else:
            p.take("warp", d, warps_per_cta[d])
    order = (k_dim, other) + tuple(reversed(range(rank - 2)))
    return _with_cga(p.bases, order, shape, cga)
