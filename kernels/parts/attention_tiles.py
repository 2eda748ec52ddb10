"""Where a flash-attention CTA's tiles are, shared by the Hopper (``kernels/attention.py``) and
Blackwell (``kernels/parts/attention_tcgen05.py``) bodies: the CTA order that keeps K and V in L2
(:func:`section_heads`, :func:`tile_order`), the (batch, seq, heads·dim) view of a ``[B, S, H, D]``
tensor and its tensor maps at the real extents (:func:`flat3`, :func:`real_maps`), swizzled shared
tiles as TMA boxes (:func:`box`, :func:`mat`), and one CTA's regions of each tensor
(:class:`Tiles`)."""

from tvm.script import tirx as T
from tvm.script.ir_builder import IRBuilder

import axe.lang as Ax
from kernels.parts.tiles import swizzled

LOG2E = 1.4426950408889634
ROWS = 64                  # query rows per Hopper consumer warpgroup (one wgmma M)

#: bytes of K and V that one section of heads may keep in L2 (an H100's or H200's L2 is 50 MB, in two
#: partitions; FA3's scheduler budgets 32 MB the same way)
L2_KV_BYTES = 32 << 20
#: SMs of an H100 / H200 SXM: a section of causal tiles holds at least 4 CTAs' worth per SM of its
#: longest tile, so that the section's last long tiles do not run alone at the end
SMS = 132


def section_heads(p, q_tiles):
    """How many (batch, query head) pairs one section of :func:`tile_order` holds: 1 without a mask
    (all query tiles of a head run side by side and read its K and V from L2); causal, the smallest
    divisor of ``batch · q_heads`` that gives the section ``4 · SMS / q_tiles`` CTAs' worth of long
    tiles, unless K and V of that many heads exceed :data:`L2_KV_BYTES` (then the largest divisor
    within it).  A divisor: every section is full."""
    n = p.q_heads * p.batch
    if not p.causal:
        return 1
    kv_head = p.seq_kv * p.head_dim * 2 * 2
    cap = max(1, L2_KV_BYTES // kv_head) * p.group
    want = min(-(-4 * SMS // q_tiles), cap)
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    fits = [d for d in divisors if d >= want and d <= cap]
    return fits[0] if fits else max(d for d in divisors if d <= max(cap, 1))


def tile_order(bx, q_tiles, section):
    """CTA ``bx``'s ``(query tile, batch · q_heads + head)``: the CTAs go section by section of
    ``section`` heads, and within a section by query tile from the last (the longest when causal)
    to the first, the section's heads side by side.  Law: a bijection of ``0 .. q_tiles · heads − 1``
    onto (query tile, head) pairs when ``section`` divides the heads; ints or TIR expressions."""
    per = section * q_tiles
    r = bx % per
    return q_tiles - 1 - r // section, bx // per * section + r % section


def box(pool, at, rows, cols):
    """A swizzled (rows, cols) tile of the pool as a box of the 3-d (batch, seq, heads·dim) view."""
    return Ax.view(pool, swizzled(rows, cols, lead=(1,)), (1, rows, cols), base=at)


def mat(pool, at, rows, cols):
    return Ax.view(pool, swizzled(rows, cols), (rows, cols), base=at)


def flat3(buf, rows):
    """``buf`` (batch, seq, heads, dim) seen as (batch, seq, heads·dim): the TMA box of one head's rows
    is then (1, rows, dim) and the map clips at the sequence's end, not the batch's.  A sequence
    shorter than a tile is declared ``rows`` long (axe slices static shapes); :func:`real_maps`
    gives the tensor maps the real extents, so TMA zero-fills and clips past the real end."""
    b, s, h, d = (int(x) for x in buf.shape)
    return IRBuilder.name(buf.name, T.decl_buffer((b, max(s, rows), h * d), buf.dtype, data=buf.data))


def params(buffers, maps, q_rows, kv_rows):
    """The kernel's ``(Q, K, V, O)`` parameters from its ``[B, S, H, D]`` buffers and their tensor
    maps: each seen as (batch, seq, heads·dim) (:func:`flat3`), Q and O at least ``q_rows`` long, K
    and V ``kv_rows`` (the tiles' heights)."""
    return tuple(Ax.param(flat3(buf, rows), tensormap=m)
                 for buf, m, rows in zip(buffers, maps, (q_rows, kv_rows, kv_rows, q_rows)))


def real_maps(specs, tensors):
    """Set the tensor maps of ``tensors`` (``{map param: (batch, seq, heads, dim), elem bytes}``) to the
    tensors' real 3-d extents and strides (innermost first, as the specs hold them)."""
    for spec in specs:
        if spec["param"] in tensors:
            (b, s, h, d), eb = tensors[spec["param"]]
            spec["shape"] = [h * d, s, b]
            spec["strides_bytes"] = [h * d * eb, s * h * d * eb]


class Tiles:
    """Where one CTA's tiles are: its query tile, head and batch, the kv head, the key tiles it reads,
    and the (batch, seq, heads·dim) regions of each tensor."""

    _is_meta_class = True       # a parse-time value in the kernel body, not a TIR one

    def __init__(self, p, h, bx):
        qt, hb = tile_order(bx, h.q_tiles, h.section)
        self.qt = Ax.computed_once(qt)
        hb = Ax.computed_once(hb)
        self.b, self.hq = hb // p.q_heads, hb % p.q_heads
        self.hk = self.hq // p.group
        self.n_kv = Ax.computed_once(h.kv_count(self.qt))
        self.D, self.bm, self.bn = p.head_dim, h.bm, h.bn

    def rows(self, X, r0, n, head):
        """Rows ``[r0, r0 + n)`` of head ``head`` of the (batch, seq, heads·dim) tensor X."""
        D = self.D
        return X[self.b:self.b + 1, r0:r0 + n, head * D:(head + 1) * D]

    def q_rows(self, X, w):
        """Consumer w's 64 query rows (of Q or O)."""
        return self.rows(X, self.qt * self.bm + w * ROWS, ROWS, self.hq)

    def kv(self, X, j):
        """Key tile j (of K or V)."""
        return self.rows(X, j * self.bn, self.bn, self.hk)
