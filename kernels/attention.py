"""Flash-attention forward in axe: ``O = softmax(Q·Kᵀ·scale [+ causal mask])·V`` per (batch, query
head), grouped-query heads (query head h reads key/value head ``h // (q_heads // kv_heads)``), head
size 64 or 128, bf16 or fp16, any sequence lengths.

Tensors, as torch lays them out for attention without a transpose: ``Q``, ``O`` are
``(batch, seq_q, q_heads, head_dim)`` and ``K``, ``V`` ``(batch, seq_kv, kv_heads, head_dim)``,
contiguous (``[B, S, H, D]``); the optional log-sum-exp ``LSE`` is ``(batch, q_heads, seq_q)``
fp32, ``LSE = log Σ_k exp(scale · q·k)`` over the keys a row sees.  The causal mask is torch's
(``is_causal=True`` of ``F.scaled_dot_product_attention``): query row i sees keys ``0..i``
(top-left aligned when ``seq_q != seq_kv``).

One source, per-target table :data:`TARGETS`:

- **sm_90a** (Hopper): one CTA per (query tile of ``64 · consumers`` rows, head, batch), in an order
  that keeps K and V in L2 (:func:`tile_order`: the query tiles of a few heads at a time, longest
  causal tiles first among them).  Warpgroup 0 is the producer (``setmaxnreg`` down): one thread loads
  the CTA's Q rows once and then every K and V tile by TMA into two ``stages``-deep rings of
  128-byte-swizzled shared slots with mbarriers (:func:`Ax.cuda.pipeline`; one ring for K, one for
  V, so S = Q·Kᵀ starts before V lands).  Each consumer warpgroup owns 64 query rows: per key tile
  ``S = Q·Kᵀ`` on wgmma (both operands from shared memory, fp32 accumulators in registers), the
  ragged / causal mask on the tiles that need it, the online softmax in fp32 registers (row max and
  row sum: in-thread then quad shuffles; exp2 with ``scale·log2 e`` folded in), ``O *= α``, P cast
  to the input type *in registers* — the wgmma D fragment of S is, 16 columns at a time, the A
  fragment of the next wgmma — and ``O += P·V`` on wgmma with A from registers (``rs``).  Finally
  ``O / l`` goes out by stmatrix into the warpgroup's own Q slot and one TMA store, which clips
  rows past ``seq_q``; the LSE by per-thread stores.  K and V rows past ``seq_kv`` arrive as TMA's
  zeros and are masked to −∞ before the max.  The consumers' key loop is a configuration
  (:data:`LOOPS`): ``simple`` (each step waited for), ``overlap`` (FA3's overlap inside a warpgroup:
  S_j and P_{j−1}·V_{j−1} issued together, the softmax of S_j under the P·V) and ``pingpong`` (the
  overlap with the consumer warpgroups taking turns at the tensor cores); named configurations,
  and the default per head size and mask, are in :mod:`kernels.parts.attention_variants`.
- **trn1 / trn2** (Trainium, ``neuronxcc.nki`` / ``nki.*``): :mod:`kernels.nki_attention`'s NKI body,
  for every problem the sm_90a body takes — the Trainium form of the same loop (S and P tiles in
  PSUM and SBUF, P transposed on TensorE instead of staying in registers; key blocks above the
  causal diagonal skipped, the diagonal block masked by ``nisa.affine_select``); trn2 builds the
  same body and respells its statements for the ``nki.*`` API.
- **sm_100a** (Blackwell, compile-verified only: no Blackwell GPU is lent):
  :mod:`kernels.parts.attention_tcgen05`, the same loop on ``tcgen05.mma`` with S and O in tensor
  memory — 128 query rows per CTA; a TMA producer warp, one MMA thread (S = Q·Kᵀ into two S buffers,
  then O += P·V with P from TMEM, each committed to an mbarrier) and a softmax warpgroup (S out of
  TMEM by ``tcgen05.ld``, the mask and online softmax in fp32 registers, P packed into TMEM by
  ``tcgen05.st``, O rescaled in TMEM), ``O / l`` out by stmatrix + TMA; every mbarrier wait
  bounded.  The sm_90a variants and configuration entries are refused there by name.

Law (checked on GPUs by ``tests/gpu/cases_attention.py`` against fp32 torch, and on the CPU by the
NumPy model :func:`online_softmax_reference` against a direct softmax): for every query row i,
``O[i] = Σ_k p_ik V[k] / Σ_k p_ik`` with ``p_ik = exp(scale·q_i·k_k − m_i)`` over the keys row i
sees, whatever the tiling.
"""

import math

from tvm.script import tirx as T
from tvm.script.ir_builder import tirx as IRB

import axe.lang as Ax
from axe.layout import R, S, tx
from kernels.parts import attention_variants
from kernels.parts.attention_tiles import (LOG2E, ROWS, SMS, Tiles, box, mat, params, real_maps,  # noqa: F401
                                          section_heads, tile_order)
from kernels.parts.fragments import coords, registers_of
from kernels.parts.online_softmax import OnlineSoftmax

DTYPES = ("bfloat16", "float16")
#: how the consumers mask a tile the diagonal or the sequence's end crosses: ``element`` compares
#: every score's key with its row and the end and selects −∞ (:func:`_mask`: ALU-pipe compares and
#: selects); ``block`` leaves alone the 64-key blocks every row keeps whole and moves each score of
#: the others below every finite score with two FMA-pipe instructions (:func:`_mask_by_block`)
MASKS = ("element", "block")
HEAD_DIMS = (64, 128)
#: a per-row value over wgmma's D fragment: lane l of warp w holds rows 16w + l//4 and + 8, and the
#: four lanes of a quad hold the same rows
ROW_VALUES = S[(4, 2, 8):(32 @ tx, 1, 4 @ tx)] + R[4:1 @ tx]

def _trn1_limits(p):
    """Why the Trainium body (:func:`kernels.nki_attention.body`) cannot compute ``p``, or None: it
    takes every :class:`Problem` (what a NeuronCore cannot hold is refused by the model)."""
    return None


def _trn1_body(p):
    from kernels.nki_attention import body
    return body(p)


def _sm100_body(p, cfg):
    from kernels.parts.attention_tcgen05 import body      # it builds on this module's tiles and maps
    return body(p, cfg)


#: what differs per target: the form of the body — for sm_90a its tiling (key tile ``bn`` per head
#: size, ring ``stages``, consumer warpgroups of 64 query rows, producer registers, the consumers'
#: loop, the mask (:data:`MASKS`), whether the consumers broadcast their warpgroup index from lane 0
#: (``wg_broadcast``: :class:`_Consumer`); the named variant that replaces some of them by default per
#: head size and mask), for trn1 the NKI body and what it cannot take — and, for a target this source
#: cannot serve, why
TARGETS = {
    "sm_90a": dict(form="wgmma", bn={64: 128, 128: 128}, stages=2, consumers=2, producer_regs=40, schedule="simple",
                   persistent=False, section=None, mask="element", wg_broadcast=False, skip_dead=False,
                   default=attention_variants.default),
    "trn1": dict(form="nki", limits=_trn1_limits, body=_trn1_body),
    "trn2": dict(form="nki", limits=_trn1_limits, body=_trn1_body),      # the same body, respelled for nki.*
    "sm_100a": dict(form="tcgen05", bn={64: 128, 128: 128}, stages=2, body=_sm100_body),
}


class Problem:
    """The attention one build computes (static sizes), with its checks."""

    def __init__(self, batch, seq_q, seq_kv, q_heads, kv_heads, head_dim, dtype, causal, lse=False, scale=None):
        for name, v in (("batch", batch), ("seq_q", seq_q), ("seq_kv", seq_kv), ("q_heads", q_heads), ("kv_heads", kv_heads)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"attention: {name} must be a positive int, got {v!r}")
        if head_dim not in HEAD_DIMS:
            raise ValueError(f"attention: head_dim must be one of {HEAD_DIMS}, got {head_dim!r}")
        if dtype not in DTYPES:
            raise ValueError(f"attention: dtype must be one of {DTYPES}, got {dtype!r}")
        if q_heads % kv_heads:
            raise ValueError(f"attention: kv_heads={kv_heads} must divide q_heads={q_heads} (grouped-query heads)")
        self.batch, self.seq_q, self.seq_kv, self.q_heads, self.kv_heads = batch, seq_q, seq_kv, q_heads, kv_heads
        self.head_dim, self.dtype, self.causal, self.lse = head_dim, dtype, bool(causal), bool(lse)
        self.scale = float(scale) if scale is not None else 1.0 / math.sqrt(head_dim)
        if not self.scale > 0:
            raise ValueError(f"attention: scale must be positive, got {scale!r}")
        self.group = q_heads // kv_heads

    def shapes(self):
        """``{name: shape}`` of the tensors the kernel takes."""
        B, D = self.batch, self.head_dim
        out = {"Q": (B, self.seq_q, self.q_heads, D), "K": (B, self.seq_kv, self.kv_heads, D),
               "V": (B, self.seq_kv, self.kv_heads, D), "O": (B, self.seq_q, self.q_heads, D)}
        if self.lse:
            out["LSE"] = (B, self.q_heads, self.seq_q)
        return out


class Hopper:
    """The sm_90a tiling of a :class:`Problem` (``cfg``: :data:`TARGETS` ``["sm_90a"]``, any entry
    replaced by ``make``'s keywords; ``bn`` an int or per head size)."""

    def __init__(self, p: Problem, cfg):
        self.p = p
        D = p.head_dim
        bn = cfg["bn"][D] if isinstance(cfg["bn"], dict) else cfg["bn"]
        self.bn, self.stages, self.consumers, self.schedule = bn, cfg["stages"], cfg["consumers"], cfg["schedule"]
        if self.schedule not in LOOPS:
            raise ValueError(f"attention: schedule must be one of {sorted(LOOPS)}, got {self.schedule!r}")
        if not (isinstance(bn, int) and 16 <= bn <= 256 and bn % 16 == 0):
            raise ValueError(f"attention: the key tile bn={bn!r} must be a multiple of 16 in 16..256 (one wgmma N, "
                             "one TMA box)")
        if self.schedule == "pingpong" and self.consumers < 2:
            raise ValueError(f"attention: the ping-pong schedule takes turns between 2 or 3 consumer warpgroups, "
                             f"not {self.consumers}")
        if self.consumers not in (1, 2, 3) or self.stages < 1:
            raise ValueError(f"attention: consumers must be 1..3 warpgroups and stages >= 1, got "
                             f"{self.consumers} and {self.stages}")
        self.bm = ROWS * self.consumers
        self.mask = cfg.get("mask", "element")
        if self.mask not in MASKS:
            raise ValueError(f"attention: mask must be one of {MASKS}, got {self.mask!r}")
        self.wg_broadcast = bool(cfg.get("wg_broadcast", False))
        self.skip_dead = bool(cfg.get("skip_dead", False))
        if self.skip_dead and self.schedule == "simple":
            raise ValueError("attention: skip_dead runs in the overlap and pingpong loops, not schedule='simple'")
        self.persistent = bool(cfg["persistent"])
        self.producer_regs = cfg["producer_regs"]
        self.consumer_regs = min(240, (65536 // 128 - self.producer_regs) // self.consumers // 8 * 8)
        self.threads = 128 * (1 + self.consumers)
        self.q_tiles = -(-p.seq_q // self.bm)
        self.kv_tiles = -(-p.seq_kv // self.bn)
        self.ctas = self.q_tiles * p.q_heads * p.batch
        heads = p.q_heads * p.batch
        self.section = cfg.get("section") or section_heads(p, self.q_tiles)
        if not (isinstance(self.section, int) and self.section >= 1 and heads % self.section == 0):
            raise ValueError(f"attention: section={self.section!r} (heads per section of the CTA order) must be a "
                             f"positive divisor of batch · q_heads = {heads}")
        # persistent: min(tiles, SMS) CTAs, each taking tiles i·grid + (bx, or grid − 1 − bx on odd
        # rounds i: long and short causal tiles pair up) in turn
        self.grid = min(self.ctas, SMS) if self.persistent else self.ctas
        self.rounds = -(-self.ctas // self.grid)
        self.q_at = 0
        # persistent: O goes out through slots of its own, so a warpgroup's Q slot is free for the
        # next tile's rows as soon as its last Q·Kᵀ has completed (the load hides under the tile's end)
        self.o_at = self.consumers * ROWS * D if self.persistent else self.q_at
        self.k_at = self.consumers * ROWS * D * (2 if self.persistent else 1)
        self.v_at = self.k_at + self.stages * self.bn * D
        self.smem = self.v_at + self.stages * self.bn * D
        if self.smem * 2 > 227 * 1024:
            raise ValueError(f"attention: {self.stages} stages of {self.bn}x{D} K and V tiles and {self.bm} Q rows"
                             f"{' (and as many O rows: persistent)' if self.persistent else ''} need "
                             f"{self.smem * 2 // 1024} KiB of shared memory, more than 227 KiB")

    def kv_count(self, qt):
        """Key tiles query tile ``qt`` reads: all, or (causal) those up to its last row's diagonal."""
        if not self.p.causal:
            return self.kv_tiles
        return T.min(self.kv_tiles, ((qt + 1) * self.bm + self.bn - 1) // self.bn)


def _mask(s_acc, width, row0, col0, seq_kv, causal, tid):
    """Scores of keys past ``seq_kv`` (and, causal, after the row's own position) set to −∞; each
    register's (row, key) read off the accumulator's layout (:func:`kernels.parts.fragments.coords`)."""
    flat = s_acc.flat()
    for r in range(registers_of(s_acc.layout, (ROWS, width))):
        row, col = coords(s_acc.layout, (ROWS, width), r, tid)
        key = col0 + col
        ok = key < seq_kv
        if causal:
            ok = T.And(ok, key <= row0 + row)
        IRB.buffer_store(flat, T.if_then_else(ok, flat[r], T.float32(-math.inf)), [r])


def mask_blocks(layout, width, block=ROWS, threads=128):
    """The registers of a (64 rows, ``width`` keys) accumulator by key block of ``block`` columns:
    ``[(first column, columns, [(register, row offset, column offset)])]``, where a register's
    ``(row, col)`` is its offsets plus its thread's (:func:`kernels.parts.fragments.coords` is a sum of
    a register part and a thread part: the offsets are ``coords(r, tx=0)``).  Law: every element of
    a register lies, for every thread, inside the register's block (checked by enumerating the
    ``threads``; a layout where it does not is refused)."""
    shape = (ROWS, width)
    out = [(b0, min(block, width - b0), []) for b0 in range(0, width, block)]
    for r in range(registers_of(layout, shape)):
        row, col = coords(layout, shape, r, 0)
        cols = {coords(layout, shape, r, t)[1] // block for t in range(threads)}
        if cols != {col // block}:
            raise ValueError(f"attention: register {r} of the {shape} accumulator spans key blocks {sorted(cols)} of "
                             f"{block} columns across threads; the block mask needs each register in one block")
        out[col // block][2].append((r, row, col))
    return out


#: ``sat(a − b)`` in one instruction (``FADD.SAT``: 0 where a <= b, 1 where a >= b + 1 for integers)
_SAT_SUB = ("__forceinline__ __device__ float axe_sat_sub(float a, float b) {\n"
            "  float r;\n  asm(\"sub.sat.f32 %0, %1, %2;\" : \"=f\"(r) : \"f\"(a), \"f\"(b));\n  return r;\n}\n")
#: what the ``block`` mask adds to a masked score (exact in fp32).  Law: for scores of magnitude below
#: 2^100 and ``c = scale·log2 e`` above 1e-35, a masked score ends below every kept one and ``c`` times it,
#: less the (finite) running max, is below −150, whose ``exp2`` is 0 in fp32 — as for −∞
MASKED = -2.0 ** 127


def block_bound(lo, rr, row0, row_t, col_t, seq_kv, ragged, causal, minimum):
    """The largest column offset (within the block starting at key ``lo``) that register row offset
    ``rr`` of a thread with parts ``(row_t, col_t)`` keeps: key ``lo + cc + col_t`` of row ``row0 + rr
    + row_t`` is kept iff ``cc <= bound`` (before ``seq_kv`` if ``ragged``; causal, at most the row).
    Ints or TIR (``minimum``: ``min`` or ``T.min``)."""
    b = seq_kv - 1 - lo - col_t if ragged else None
    if causal:
        c = row0 + row_t + rr - lo - col_t
        b = c if b is None else minimum(b, c)
    return b


def block_whole(lo, w, row0, seq_kv, ragged, causal):
    """The conditions under which every row of the warpgroup (rows ``row0 …``) keeps every key of the
    block ``lo … lo + w − 1`` (all must hold; none: the block never needs a mask).  Ints or TIR."""
    return ([lo + w <= seq_kv] if ragged else []) + ([lo + w - 1 <= row0] if causal else [])


def _mask_by_block(s_acc, width, row0, col0, seq_kv, causal, tid):
    """:func:`_mask`'s result (on scores within :data:`MASKED`'s law) without a compare or a select per
    score: blocks of 64 keys that every row of the warpgroup keeps (:func:`block_whole`) are left
    alone; in the others, register ``(rr, cc)`` (offsets in its block, :func:`mask_blocks`) becomes
    ``s + MASKED·sat(cc − bound[rr])`` — ``s`` itself where ``cc <= bound`` (:func:`block_bound`,
    converted to float once per block and row offset), ``s + MASKED`` where not — two instructions of
    the FMA pipe.  Every row keeps key 0, so its running max is finite from the first tile on and a
    masked score's ``exp2`` is 0 as −∞'s (a NaN or ±∞ score stays one, where :func:`_mask` hides it).
    ``seq_kv``'s term is left out where it cannot bite (``seq_kv`` a multiple of the tile)."""
    flat = s_acc.flat()
    ragged = seq_kv % width != 0
    row_t, col_t = coords(s_acc.layout, (ROWS, width), 0, tid)
    for b0, w, regs in mask_blocks(s_acc.layout, width):
        lo = col0 + b0
        whole = block_whole(lo, w, row0, seq_kv, ragged, causal)
        if not whole:
            continue
        with Ax.guard(T.Not(whole[0] if len(whole) == 1 else T.And(*whole))):
            bound = {rr: Ax.computed_once(T.Cast("float32", block_bound(lo, rr, row0, row_t, col_t, seq_kv, ragged,
                                                                        causal, T.min)), "float32")
                     for rr in sorted({rr for _, rr, _ in regs})}
            for r, rr, cc in regs:
                drop = T.cuda.func_call("axe_sat_sub", T.float32(cc - b0), bound[rr], source_code=_SAT_SUB,
                                        return_type="float32")
                IRB.buffer_store(flat, drop * T.float32(MASKED) + flat[r], [r])


class _QSlots:
    """The barriers of the consumers' Q slots, one per slot: ``full`` (the producer's Q load has
    landed) and, persistent, ``empty`` (the consumer's last Q·Kᵀ of the tile has completed)."""

    _is_meta_class = True

    def __init__(self, h):
        self.full = Ax.cuda.mbarrier(1, h.consumers, "q_full")
        self.empty = Ax.cuda.mbarrier(1, h.consumers, "q_empty") if h.persistent else None


class _Count:
    """The key tiles a role has streamed through the rings before the current query tile (the rings'
    running iteration count): 0 without persistence, else a register cell advanced tile by tile."""

    _is_meta_class = True

    def __init__(self, persistent):
        self.cell = None
        if persistent:
            self.cell = T.alloc_buffer((1,), "int32", scope="local")
            IRB.buffer_store(self.cell, 0, [0])

    def start(self):
        return 0 if self.cell is None else Ax.computed_once(self.cell[0])

    def advance(self, n):
        if self.cell is not None:
            IRB.buffer_store(self.cell, self.cell[0] + n, [0])


def _each_tile(h, bx, body):
    """``body(i, tile)`` for the query tiles CTA ``bx`` computes (round ``i``, tile index for
    :func:`tile_order`): tile bx alone, or persistent, one per round (the last round may have none)."""
    if not h.persistent:
        body(0, bx)
        return
    with T.serial(0, h.rounds) as i:
        tile = i * h.grid + T.if_then_else(i % 2 == 0, bx, h.grid - 1 - bx)
        with Ax.guard(tile < h.ctas if h.ctas % h.grid else None):
            body(i, tile)


def _produce(h, bx, pool, Q, K, V, qfull, qempty, kpipe, vpipe):
    """The producer warp: per query tile, each consumer's Q rows (into its slot once the consumer has
    freed it: persistent), then K and V tile by tile into their rings."""
    D, bn = h.p.head_dim, h.bn
    kv = _Count(h.persistent)

    def tile(i, cta_tile):
        t = Tiles(h.p, h, cta_tile)
        base = kv.start()
        for w in range(h.consumers):
            if h.persistent:
                Ax.cuda.mbarrier_wait(qempty, 1 - i % 2, stage=w)   # fresh barriers: parity 1 passes at once
            Ax.copy(box(pool, h.q_at + w * ROWS * D, ROWS, D), t.q_rows(Q, w), barrier=qfull, stage=w)
        with T.serial(0, t.n_kv) as j:
            g = base + j
            s = kpipe.slot(g)
            kpipe.acquire(g)
            Ax.copy(box(pool, h.k_at + s * (bn * D), bn, D), t.kv(K, j), barrier=kpipe.full, stage=s)
            vpipe.acquire(g)
            Ax.copy(box(pool, h.v_at + s * (bn * D), bn, D), t.kv(V, j), barrier=vpipe.full, stage=s)
        kv.advance(t.n_kv)
    _each_tile(h, bx, tile)


class _Consumer:
    """One consumer warpgroup's registers and steps over key tile j of the current query tile
    (:meth:`start`): ``qk`` (S = Q·K_jᵀ), ``softmax`` (mask, online softmax, P in place), ``pv``
    (O += P·V_j); each wgmma step waits for ``wait`` groups (False: none) and frees its slot only
    when told (:meth:`done_k`, :meth:`done_v`, :meth:`done_q`).  The rings count key tiles from
    ``base`` (those of earlier query tiles)."""

    _is_meta_class = True

    def __init__(self, h, pool, kpipe, vpipe, qempty, tx_):
        p, bn, D = h.p, h.bn, h.p.head_dim
        self.h, self.pool, self.kpipe, self.vpipe, self.qempty = h, pool, kpipe, vpipe, qempty
        self.wg = Ax.cuda.warpgroup_index()
        if h.wg_broadcast:
            # lane 0's value to the whole warp: ptxas then knows the index is warp-uniform and builds the
            # wgmma descriptors of this warpgroup's Q slot (and what follows from them) on the uniform
            # datapath, not per thread on the ALU pipe
            self.wg = Ax.computed_once(T.tvm_warp_shuffle(T.uint32(0xFFFFFFFF), self.wg, 0, 32, 32))
        self.leader, self.tid = tx_ % 128 == 0, tx_ % 128
        self.s = Ax.registers((ROWS, bn), "float32", Ax.cuda.wgmma_fragment(bn, "tx"), name="s_acc")
        self.p = Ax.registers((ROWS, bn), p.dtype, Ax.cuda.wgmma_fragment(bn, "tx"), name="p_reg")
        self.o = Ax.registers((ROWS, D), "float32", Ax.cuda.wgmma_fragment(D, "tx"), name="o_acc")
        self.sm = OnlineSoftmax(ROWS, ROW_VALUES, p.scale * LOG2E)
        self.q = mat(pool, h.q_at + self.wg * (ROWS * D), ROWS, D)

    def start(self, t, base):
        """A new query tile ``t`` whose key tiles are the rings' iterations ``base …``."""
        self.t, self.base = t, base
        self.row0 = t.qt * self.h.bm + self.wg * ROWS                  # this warpgroup's first query row
        Ax.elementwise(self.o, lambda: T.float32(0))
        if self.h.persistent:
            self.sm.reset()

    def done_q(self, j, n):
        """Persistent: once the last Q·Kᵀ (key tile ``n − 1``) has completed, the Q slot may take the
        next query tile's rows."""
        if self.h.persistent:
            with Ax.guard(T.And(j == n - 1, self.leader)):
                T.evaluate(T.ptx.mbarrier.arrive.shared.b64(self.qempty.ptr(self.wg), T.uint32(1)))

    def qk(self, j, wait=0):
        h, D, g = self.h, self.h.p.head_dim, self.base + j
        self.kpipe.wait(g)
        k = mat(self.pool, h.k_at + self.kpipe.slot(g) * (h.bn * D), h.bn, D)
        Ax.gemm(self.s, self.q, Ax.permute(k, (1, 0)), accumulate=False, wait=wait)

    def done_k(self, j):
        self.kpipe.release(self.base + j, pred=self.leader)

    def softmax(self, j):
        """Mask where the tile holds keys past the end or (causal) past a row (:data:`MASKS`: by
        element or by 64-key block); P = exp2(c·S − m)."""
        p, bn = self.h.p, self.h.bn
        need = (j + 1) * bn > p.seq_kv
        if p.causal:
            need = T.Or(need, (j + 1) * bn - 1 > self.row0)
        mask = _mask if self.h.mask == "element" else _mask_by_block
        with Ax.guard(need):
            mask(self.s, bn, self.row0, j * bn, p.seq_kv, p.causal, self.tid)
        self.sm.update(self.s)

    def to_p(self):
        """P in the input type, in registers: S's D fragment is P·V's A fragment."""
        Ax.cast(self.p, self.s)

    def pv(self, j, wait=0):
        h, D, g = self.h, self.h.p.head_dim, self.base + j
        self.vpipe.wait(g)
        Ax.gemm(self.o, self.p, mat(self.pool, h.v_at + self.vpipe.slot(g) * (h.bn * D), h.bn, D), accumulate=True,
                wait=wait)

    def done_v(self, j):
        self.vpipe.release(self.base + j, pred=self.leader)


def _loop_simple(c, n):
    """Each key tile in turn: S, softmax, rescale, P·V, every wgmma waited for."""
    with T.serial(0, n) as j:
        c.qk(j)
        c.done_k(j)
        c.done_q(j, n)
        c.softmax(j)
        c.sm.rescale(c.o)
        c.to_p()
        c.pv(j)
        c.done_v(j)


def turn_rules(first, last, round0, chained):
    """The two exceptions of :class:`_Turns` for a wgmma block: ``(free, mute)`` — warpgroup 0 does not
    wait for its turn (``free``), the last warpgroup does not pass it on (``mute``).  ``first`` /
    ``last``: the block is the tile's first / last; ``round0``: the CTA's first tile (bool or TIR);
    ``chained`` (persistent): the turns run on from tile to tile — only the CTA's very first block is
    free and no block is mute (warpgroup 0 takes the last pass after its last tile,
    :func:`_absorb_turn`).  Unchained across tiles, warpgroup 0 would start tile i + 1 without
    waiting and pass the turn to warpgroup 1 a second time before warpgroup 1 had taken the first
    (its wait for tile i's last block): two arrivals of one warpgroup complete the 256-thread named
    barrier, warpgroup 1's wait then needs one more that never comes (the benchmark's hang at
    b=32 h=32 seq=512 causal, pp_p / pp3_p).  Plain Python on bools: :func:`turn_schedule` models it."""
    free = first and (round0 if chained else True)
    mute = last and not chained
    return free, mute


def _not(x):
    return T.bool(not x) if isinstance(x, bool) else T.Not(x)


class _Turns:
    """The consumer warpgroups take turns issuing their wgmma blocks (FA3's ping-pong), through named
    barriers ``ORDER + wg`` ("warpgroup wg's turn"), so that one's softmax runs under the others'
    tensor-core work.  Block k of warpgroup w > 0 follows block k of warpgroup w − 1, and block k of
    warpgroup 0 follows block k − 1 of the last; every wait has its arrival (:func:`turn_rules`:
    the exceptions at the ends; persistent, the chain runs on across the CTA's tiles)."""

    _is_meta_class = True
    ORDER = 5                   # named barriers 5, 6, 7 (1..3 are the consumers' store barriers)

    def __init__(self, wg, n, round0=True, chained=False):
        self.wg, self.n, self.round0, self.chained = wg, n, round0, chained

    def take(self, first):
        """Wait for my turn (warpgroup 0's first block goes at once: of the tile, or persistent, of the CTA)."""
        free, _ = turn_rules(first, False, self.round0, self.chained)
        with Ax.guard(T.Or(self.wg != 0, _not(free))):
            Ax.cuda.named_barrier(self.ORDER + self.wg, 256)

    def give(self, last):
        """Pass the turn to the next warpgroup (unchained, the last one's last block passes it to no one)."""
        _, mute = turn_rules(False, last, self.round0, self.chained)
        with Ax.guard(T.Or(self.wg != self.n - 1, _not(mute))):
            Ax.cuda.named_barrier_arrive(self.ORDER + (self.wg + 1) % self.n, 256)


def _absorb_turn(h, wg):
    """Persistent ping-pong: warpgroup 0 takes the turn the last warpgroup passed after its last block
    (so no arrival is left pending on a named barrier when the CTA exits)."""
    if h.persistent and h.schedule == "pingpong":
        with Ax.guard(wg == 0):
            Ax.cuda.named_barrier(_Turns.ORDER, 256)


def turn_schedule(consumers, ns, chained):
    """CPU model of the ping-pong's named-barrier operations: per consumer warpgroup, the list of
    ``("sync" | "arrive", barrier)`` it executes over query tiles with ``ns`` key tiles each (one CTA's
    tiles in order), block by block as :func:`_loop_overlap` issues them (n + 1 blocks a tile), by
    the rules of :func:`turn_rules`, and :func:`_absorb_turn`'s last wait."""
    out = []
    for wg in range(consumers):
        ops = []
        for i, n in enumerate(ns):
            for k in range(n + 1):
                free, mute = turn_rules(k == 0, k == n, i == 0, chained)
                if wg != 0 or not free:
                    ops.append(("sync", _Turns.ORDER + wg))
                ops.append(("issue", (i, k)))
                if wg != consumers - 1 or not mute:
                    ops.append(("arrive", _Turns.ORDER + (wg + 1) % consumers))
        if chained and wg == 0:
            ops.append(("sync", _Turns.ORDER))
        out.append(ops)
    return out


def _loop_overlap(c, n, turns=None):
    """FA3's overlap inside a warpgroup: S_j = Q·K_jᵀ and O += P_{j−1}·V_{j−1} are issued together; O
    is rescaled by α_{j−1} while S_j is on the tensor cores (before P_{j−1}·V_{j−1}, which was
    computed against the max that α_{j−1} moves O to), and the softmax of S_j runs while P·V is.
    ``turns``: the warpgroups' wgmma blocks take turns (:class:`_Turns`)."""
    take = (lambda first: turns.take(first)) if turns else (lambda first: None)
    give = (lambda last: turns.give(last)) if turns else (lambda last: None)
    if c.h.skip_dead and c.h.p.causal:
        return _loop_overlap_live(c, n, take, give)
    _first_block(c, n, take, give)
    with T.serial(1, n) as j:
        take(False)
        _block(c, j, n, give)
    take(False)
    _last_pv(c, n - 1, give, True)
    c.done_v(n - 1)


def _first_block(c, m, take, give):
    """Block 0: S_0, its softmax and P_0 (``m``: the key tiles the warpgroup computes)."""
    take(True)
    c.qk(0, wait=False)
    give(False)
    Ax.cuda.wgmma_wait(0)
    Ax.cuda.fence_registers(c.s)
    c.done_k(0)
    c.done_q(0, m)
    c.softmax(0)
    c.to_p()


def _block(c, j, m, give):
    """Block j (1 <= j < m, after the turn is taken): S_j and P_{j−1}·V_{j−1} issued, the softmax of
    S_j under P·V, then P_j."""
    c.qk(j, wait=False)
    c.sm.rescale(c.o)                       # α_{j−1}: the softmax of S_j has not run yet
    c.pv(j - 1, wait=False)
    give(False)
    Ax.cuda.wgmma_wait(1)                   # S_j complete (groups complete in order); P·V may run on
    Ax.cuda.fence_registers(c.s)
    c.done_k(j)
    c.done_q(j, m)
    c.softmax(j)
    Ax.cuda.wgmma_wait(0)
    Ax.cuda.fence_registers(c.o)
    c.done_v(j - 1)
    c.to_p()


def _last_pv(c, j, give, last):
    """O = α_j·O + P_j·V_j for the last tile ``j`` the warpgroup computes, waited for (V_j not freed)."""
    c.sm.rescale(c.o)
    c.pv(j, wait=False)
    give(last)
    Ax.cuda.wgmma_wait(0)
    Ax.cuda.fence_registers(c.o)


def _loop_overlap_live(c, n, take, give):
    """:func:`_loop_overlap` for a causal tile whose last key tiles lie past this warpgroup's last row
    (``skip_dead``: 192 query rows a CTA read up to one key tile that the first warpgroups see none
    of): the ``m`` live tiles run as there, each dead one only waits for its K and V and frees them,
    and the blocks and turns stay the same (``n + 1`` a tile: :func:`turn_schedule`'s protocol).  Each
    wgmma stage (issue to wait) lies inside one branch, so ptxas keeps them asynchronous."""
    m = Ax.computed_once(T.min(n, (c.row0 + ROWS - 1) // c.h.bn + 1))     # >= 1: tile 0 holds key 0
    _first_block(c, m, take, give)
    with T.serial(1, n) as j:
        take(False)
        with IRB.If(j < m):
            with IRB.Then():
                _block(c, j, m, give)
            with IRB.Else():
                _past_live(c, j, m, give, False)
                c.kpipe.wait(c.base + j)
                c.done_k(j)
                c.done_v(j - 1)
    take(False)
    _past_live(c, n, m, give, True)
    c.done_v(n - 1)


def _past_live(c, j, m, give, last):
    """Block ``j >= m`` of :func:`_loop_overlap_live`: the last live tile's P·V where ``j == m``, else
    V_{j−1} only waited for (it is freed after); the turn passed on either way."""
    with IRB.If(j == m):
        with IRB.Then():
            _last_pv(c, j - 1, give, last)
        with IRB.Else():
            c.vpipe.wait(c.base + j - 1)
            give(last)


def _loop_pingpong(c, n):
    """:func:`_loop_overlap` with the consumer warpgroups taking turns (persistent: chained across tiles)."""
    _loop_overlap(c, n, _Turns(c.wg, c.h.consumers, c.round == 0 if c.h.persistent else True, c.h.persistent))


#: the consumers' key loops by schedule name (data in :data:`TARGETS`, not a code path per kernel)
LOOPS = {"simple": _loop_simple, "overlap": _loop_overlap, "pingpong": _loop_pingpong}


def _consume(h, bx, pool, O, LSE_, qfull, qempty, kpipe, vpipe, tx_):
    """A consumer warpgroup: per query tile, its 64 query rows against every key tile, then ``O / l``
    (and the LSE)."""
    p, D = h.p, h.p.head_dim
    c = _Consumer(h, pool, kpipe, vpipe, qempty, tx_)
    kv = _Count(h.persistent)
    o_out = Ax.registers((ROWS, D), p.dtype, Ax.cuda.wgmma_fragment(D, "tx"), name="o_out")

    def tile(i, cta_tile):
        t = Tiles(p, h, cta_tile)
        c.round = i
        c.start(t, kv.start())
        Ax.cuda.mbarrier_wait(qfull, i % 2, stage=c.wg)
        LOOPS[h.schedule](c, t.n_kv)
        c.sm.finish(o_out, c.o)
        if p.lse:
            _store_lse(LSE_, c.sm, t, c.row0, p.seq_q, c.tid)
        # out through this warpgroup's O slot (not persistent: its Q slot, whose last Q·Kᵀ has
        # completed; persistent: the store's wait for the previous tile's read comes first); TMA clips
        # rows past seq_q
        Ax.cuda.staged_store(o_out, D, lambda j: box(pool, h.o_at + c.wg * (ROWS * D), ROWS, D),
                             lambda j, buf: Ax.copy(t.q_rows(O, c.wg), buf, fence=False, wait=False), 1 + c.wg,
                             c.leader)
        kv.advance(t.n_kv)
    _each_tile(h, bx, tile)
    _absorb_turn(h, c.wg)
    Ax.cuda.tma_store_wait(0, pred=c.leader)


def _hopper(p: Problem, h: Hopper):
    B, Sq, Skv, Hq, Hk, D, dtype = p.batch, p.seq_q, p.seq_kv, p.q_heads, p.kv_heads, p.head_dim, p.dtype
    lse_shape = (B, Hq, Sq) if p.lse else (1,)

    @T.prim_func
    def attention(Q_: T.Buffer((B, Sq, Hq, D), dtype), K_: T.Buffer((B, Skv, Hk, D), dtype),
                  V_: T.Buffer((B, Skv, Hk, D), dtype), O_: T.Buffer((B, Sq, Hq, D), dtype),
                  LSE_: T.Buffer(lse_shape, "float32"),
                  Q_map: T.handle("tensormap"), K_map: T.handle("tensormap"), V_map: T.handle("tensormap"),
                  O_map: T.handle("tensormap")):
        Ax.cuda.min_blocks_per_sm(1)
        bx, tx_ = Ax.launch(h.grid, h.threads)
        Q, K, V, O = params((Q_, K_, V_, O_), (Q_map, K_map, V_map, O_map), h.bm, h.bn)
        pool = Ax.cuda.dynamic_shared(h.smem, dtype)
        qb = _QSlots(h)
        kpipe = Ax.cuda.pipeline(h.stages, producers=1, consumers=h.consumers, name="k")
        vpipe = Ax.cuda.pipeline(h.stages, producers=1, consumers=h.consumers, name="v")
        with Ax.cuda.role(0, 1, regs=h.producer_regs):
            with Ax.warps(0, 1):
                _produce(h, bx, pool, Q, K, V, qb.full, qb.empty, kpipe, vpipe)
        with Ax.cuda.role(1, 1 + h.consumers, regs=h.consumer_regs, each=True):
            _consume(h, bx, pool, O, LSE_, qb.full, qb.empty, kpipe, vpipe, tx_)
    real_maps(Ax.current_build().tensormaps, {f"{n}_map": (shape, 2) for n, shape in p.shapes().items() if n != "LSE"})
    return attention


def _store_lse(LSE_, sm, t, row0, seq_q, tid):
    """Each row's log-sum-exp by the first lane of its quad (rows past ``seq_q``: none)."""
    for r in range(sm.regs):
        row, _ = coords(sm.rows, (ROWS, 1), r, tid)
        q = row0 + row
        with Ax.guard(T.And(tid % 4 == 0, q < seq_q)):
            IRB.buffer_store(LSE_, sm.lse(r), [t.b, t.hq, q])


def reference(Q, K, V, causal=False, scale=None):
    """fp32 torch ``F.scaled_dot_product_attention`` on (B, S, H, D) tensors, kv heads expanded."""
    import torch
    q, k, v = (x.float().transpose(1, 2) for x in (Q, K, V))
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    return {"O": o.transpose(1, 2)}


def online_softmax_reference(q, k, v, causal=False, scale=None, bm=64, bn=128, masked=-math.inf):
    """The tiled online softmax the GPU body runs, in NumPy (float64): query tiles of ``bm`` rows,
    key tiles of ``bn``, running max in log2 units and rescaled sums; ``q`` (Sq, D), ``k``/``v``
    (Skv, D); a masked score becomes ``masked`` (−∞, or the ``block`` mask's :data:`MASKED`).
    Returns ``(O, LSE)``."""
    import numpy as np
    Sq, D = q.shape
    Skv = k.shape[0]
    c = (scale if scale is not None else 1 / math.sqrt(D)) * LOG2E
    O = np.zeros((Sq, D))
    L = np.zeros(Sq)
    for q0 in range(0, Sq, bm):
        rows = np.arange(q0, q0 + bm)
        qq = np.zeros((bm, D))
        qq[:min(bm, Sq - q0)] = q[q0:q0 + bm]
        m = np.full(bm, -np.inf)
        l_ = np.zeros(bm)
        o = np.zeros((bm, D))
        last = -(-Skv // bn) if not causal else min(-(-Skv // bn), -(-(q0 + bm) // bn))
        for j in range(last):
            cols = np.arange(j * bn, j * bn + bn)
            kk, vv = np.zeros((bn, D)), np.zeros((bn, D))
            kk[:min(bn, Skv - j * bn)] = k[j * bn:j * bn + bn]
            vv[:min(bn, Skv - j * bn)] = v[j * bn:j * bn + bn]
            s = qq @ kk.T
            ok = cols[None, :] < Skv
            if causal:
                ok = ok & (cols[None, :] <= rows[:, None])
            s = np.where(ok, s, masked)
            m_new = np.maximum(m, s.max(1) * c)
            m_use = np.where(m_new == -np.inf, 0, m_new)
            p = np.exp2(s * c - m_use[:, None])
            alpha = np.exp2(m - m_use)
            l_ = l_ * alpha + p.sum(1)
            o = o * alpha[:, None] + p @ vv
            m = m_new
        n = min(bm, Sq - q0)
        O[q0:q0 + n] = (o / l_[:, None])[:n]
        L[q0:q0 + n] = ((m + np.log2(l_)) * math.log(2))[:n]
    return O, L


def make(batch, seq_q, seq_kv, q_heads, kv_heads, head_dim, dtype="bfloat16", causal=False, lse=False, scale=None,
         name=None, variant=None, **config):
    """The attention kernel (an :class:`axe.lang.Kernel`) for these static sizes; arguments
    ``(Q, K, V, O[, LSE])`` as the module docstring says.  The sm_90a configuration: the row of
    :data:`TARGETS`, then the named ``variant`` of :mod:`kernels.parts.attention_variants` (by
    default the row's ``default`` for this head size and mask; ``"simple"`` is the row itself), then
    ``config``'s entries (``schedule``, ``bn``, ``stages``, ``consumers``, ``producer_regs``).
    Wrong sizes, types or configurations are refused here."""
    p = Problem(batch, seq_q, seq_kv, q_heads, kv_heads, head_dim, dtype, causal, lse, scale)
    row = TARGETS["sm_90a"]
    unknown = sorted(set(config) - set(row) - {"form", "default"})
    if unknown:
        raise ValueError(f"attention: unknown configuration {unknown}; the sm_90a row has "
                         f"{sorted(set(row) - {'form', 'default'})}")
    asked = variant
    variant = variant or row["default"](p.head_dim, p.causal, p.seq_kv)
    if variant not in attention_variants.VARIANTS:
        raise ValueError(f"attention: unknown variant {variant!r}; the named ones are "
                         f"{sorted(attention_variants.VARIANTS)}")
    hop = Hopper(p, {**row, **attention_variants.VARIANTS[variant], **config})

    def factory():
        target = Ax.current_build().target
        cfg = TARGETS.get(target) or TARGETS.get(Ax.target_family(target) == "neuron" and "trn1")
        if cfg is None or "refuse" in cfg:
            why = cfg["refuse"] if cfg else "no form of the attention body is written for it"
            raise Ax.TargetError(f"attention on {target}: {why}")
        if cfg["form"] == "nki":
            why = cfg["limits"](p)
            if why:
                raise Ax.TargetError(f"attention on {target}: {why}")
            return cfg["body"](p)
        func = _hopper(p, hop) if cfg["form"] == "wgmma" else _tcgen05(cfg, p, asked, config)
        return func if p.lse else Ax.without_params(func, ("LSE_",))

    short = "bf16" if dtype == "bfloat16" else "f16"
    return Ax.Kernel(name or f"attention_{short}_d{head_dim}{'_causal' if causal else ''}", factory,
                     reference=None, outputs=("O", "LSE") if lse else ("O",),
                     meta={"batch": batch, "seq_q": seq_q, "seq_kv": seq_kv, "q_heads": q_heads, "kv_heads": kv_heads,
                           "head_dim": head_dim, "dtype": dtype, "causal": p.causal, "scale": p.scale, "variant": variant,
                           "grid": (hop.grid,), "threads": hop.threads})


def _tcgen05(row, p, variant, config):
    """The sm_100a body with ``config``'s entries of its row; the sm_90a variants and entries are
    refused by name, since they configure a body this target does not run."""
    foreign = sorted(set(config) - set(row) - {"form", "body"}) + ([f"variant={variant!r}"] if variant else [])
    if foreign:
        raise Ax.TargetError(f"attention on sm_100a: {', '.join(foreign)} configure the sm_90a body; the sm_100a "
                             f"row takes {sorted(set(row) - {'form', 'body'})}")
    return row["body"](p, {**row, **config})


def build(*args, target="sm_90a", **kw):
    """Build :func:`make`'s kernel into an artifact."""
    return Ax.compile_kernel(make(*args, **kw), target)


def nki_attention(heads=2, seq=1024, dtype="bfloat16"):
    """Multi-head attention of ``heads`` heads over ``seq`` tokens, head size 128, no mask (the Axe
    paper's Figure 13 kernel, on Trainium the body of :mod:`kernels.nki_attention`): :func:`make`
    with ``Q, K, V`` of shape ``(1, seq, heads, 128)``."""
    return make(1, seq, seq, heads, heads, 128, dtype, name="nki_attention")


#: the paper's MHA at 1024 tokens (``axe build kernels/attention.py::attention_1024 --target trn1``)
attention_1024 = nki_attention()
