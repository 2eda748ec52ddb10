"""The sm_100a (Blackwell) body of :mod:`kernels.attention`: the same :class:`~kernels.attention.Problem`,
tensors and launch signature as the sm_90a body, with the tensor-core work on ``tcgen05.mma`` and the
accumulators in tensor memory (TMEM).  **Compile-verified only**: no Blackwell GPU is lent, so it is
built, assembled by ptxas for sm_100a and its PTX checked (``tests/test_attention_sm100.py``), never run.

One CTA of 256 threads per (query tile of 128 rows, query head, batch), in :func:`kernels.attention.tile_order`:

- warp 0, the producer: the tile's Q rows once (``q_full``), then every key tile's K and V by TMA
  into two ``stages``-deep rings (``Ax.cuda.pipeline``; K and V apart, so S = Q·Kᵀ starts before V
  lands); the MMAs' commits free the slots;
- warp 1, the MMA thread (one elected lane): ``S_0 = Q·K_0ᵀ`` and ``S_1`` into the two S buffers of
  TMEM; then per key tile j: wait for ``P_j`` (``p_full``), issue ``S_{j+2} = Q·K_{j+2}ᵀ`` into S_j's
  buffer (the softmax has read ``S_j`` out of it) and ``O += P_j·V_j`` into the O tile of TMEM (P
  from TMEM, FA4's way: the "ts" form), all ``tcgen05.mma.cta_group::1``, each committed
  (``tcgen05.commit``) to its barrier (``s_full`` of its buffer, ``o_done``) and to its ring slot's
  *empty* barrier;
- warpgroup 1, softmax, correction and epilogue (thread t holds TMEM lanes 32·(t/32) + …: all 128
  rows, ``tcgen05.ld.16x256b``, four rows per thread, a quad per row): per key tile, S out of TMEM
  into fp32 registers, the ragged / causal mask, the online softmax
  (:class:`kernels.parts.online_softmax.OnlineSoftmax`: running max and sum, exp2 with
  ``scale·log2 e``); once ``P_{j−1}·V_{j−1}`` has completed (``o_done``) it writes P, rounded to the
  input type and packed two to a 32-bit word (``Ax.cuda.pack_pairs``), into P's TMEM tile by
  ``tcgen05.st`` (32 columns at a time), rescales O in TMEM by α (ld, multiply, st, 32 columns at a
  time), then every thread arrives on ``p_full``.  So the
  softmax of ``S_{j+1}`` (already computed: S is double-buffered) runs while the tensor cores
  compute ``P_j·V_j`` and ``S_{j+2}``.  At the end ``O / l`` goes out of TMEM through the (by then
  free) Q slot by stmatrix and TMA stores, which clip rows past ``seq_q``; the LSE by per-thread
  stores.

TMEM: one allocation per CTA (two allocations could deadlock two co-resident CTAs, each holding
its first and waiting for its second): S buffers 0 and 1 (``bn`` columns each), O (``head_dim``), P
(``bn / 2``: two 16-bit values a column; ``Ax.cuda.tmem_retype`` gives its 16-bit and 32-bit views).
Every mbarrier wait is bounded (``remote=True`` waits: a wait that never completes ends the launch
after ``CTA_WAIT_TIMEOUT_NS`` with a report naming the barrier, stage and phase), since a hang on
hardware no one here can run would otherwise be silent.  :func:`protocol` is the synchronisation as
data, which the CPU test runs on a model of mbarriers, TMA and the tensor core.

Law (the same as the sm_90a body's, whatever the tiling): for every query row i,
``O[i] = Σ_k p_ik V[k] / Σ_k p_ik`` with ``p_ik = exp(scale·q_i·k_k − m_i)`` over the keys row i sees;
:func:`kernels.attention.online_softmax_reference` with ``bm=ROWS``, ``bn=`` this body's key tile is
the NumPy model of the loop (the CPU test checks it against a direct softmax at this tiling).
"""

import math

from tvm.script import tirx as T
from tvm.script.ir_builder import tirx as IRB

import axe.lang as Ax
from axe.layout import R, S, tx
from kernels.parts.attention_tiles import LOG2E, Tiles, box, mat, params, real_maps, section_heads
from kernels.parts.fragments import coords, registers_of
from kernels.parts.online_softmax import OnlineSoftmax

ROWS = 128                 # query rows per CTA: one tcgen05.mma M (cta_group::1), one TMEM lane each
THREADS = 256              # warpgroup 0: producer warp, MMA warp; warpgroup 1: softmax
#: a per-row value over tcgen05.ld's 16x256b fragment of 128 rows (``Ax.cuda.tcgen05_fragment``):
#: thread t of the warpgroup holds rows 32·(t/32) + 16h + 8r + (t%32)/4 (h, r in {0, 1}), and the
#: four lanes of a quad hold the same rows
ROW_VALUES = S[(4, 2, 2, 8):(32 @ tx, 2, 1, 4 @ tx)] + R[4:1 @ tx]
#: S tiles in TMEM: S_{j+2} is issued into S_j's buffer once P_j is written
S_BUFFERS = 2
CHUNK = 32                 # O columns the correction moves through registers at a time
STORE = 64                 # O columns per TMA store (one 128-byte swizzle panel)
PACK = 32                  # P columns packed and stored into TMEM at a time (few word registers live)


def fragment(cols):
    """The softmax warpgroup's registers of a (128, cols) fp32 TMEM tile (tcgen05.ld 16x256b)."""
    return Ax.cuda.tcgen05_fragment("16x256b", cols // 8, ROWS)


class Blackwell:
    """The sm_100a tiling of a :class:`~kernels.attention.Problem` (``cfg``: :data:`kernels.attention.TARGETS`
    ``["sm_100a"]``; ``bn`` an int or per head size): query tiles of :data:`ROWS`, key tiles of ``bn``,
    ``stages``-deep K and V rings, and where each tile lies in the shared pool."""

    def __init__(self, p, cfg):
        self.p = p
        D = p.head_dim
        bn = cfg["bn"][D] if isinstance(cfg["bn"], dict) else cfg["bn"]
        self.bn, self.stages, self.bm = bn, cfg["stages"], ROWS
        if bn not in (64, 128):
            # whole 128-byte swizzle panels of P; the softmax warpgroup holds a key tile's S (bn fp32) and
            # P per thread: at 192, ptxas spills
            raise ValueError(f"attention on sm_100a: the key tile bn={bn!r} must be 64 or 128 (S and P of a key "
                             "tile live in the softmax warpgroup's registers)")
        if not (isinstance(self.stages, int) and self.stages >= S_BUFFERS):
            # the MMA thread waits for K_{j+2} before issuing P_j·V_j, and the producer loads V_{j+1}
            # before K_{j+2}: V_{j+1}'s slot must not wait for P_j·V_j (protocol(n, 1) deadlocks)
            raise ValueError(f"attention on sm_100a: stages must be an int >= {S_BUFFERS} (S_{{j+2}} is issued "
                             f"before P_j·V_j), got {self.stages!r}")
        self.q_tiles = -(-p.seq_q // ROWS)
        self.kv_tiles = -(-p.seq_kv // bn)
        self.ctas = self.grid = self.q_tiles * p.q_heads * p.batch
        self.section = section_heads(p, self.q_tiles)
        self.q_at = 0
        self.k_at = ROWS * D
        self.v_at = self.k_at + self.stages * bn * D
        self.smem = self.v_at + self.stages * bn * D
        if self.smem * 2 > 227 * 1024:
            raise ValueError(f"attention on sm_100a: {self.stages} stages of {bn}x{D} K and V tiles and {ROWS} Q "
                             f"rows need {self.smem * 2 // 1024} KiB of shared memory, more than 227 KiB")
        # TMEM columns: the S buffers (fp32, bn each), O (fp32, D), P (16-bit, two a column: bn / 2);
        # at most 2·128 + 128 + 64 of 512
        self.o_col = S_BUFFERS * bn
        self.p_col = self.o_col + D
        self.tmem_columns = self.p_col + bn // 2

    def kv_count(self, qt):
        """Key tiles query tile ``qt`` reads: all, or (causal) those up to its last row's diagonal."""
        if not self.p.causal:
            return self.kv_tiles
        return T.min(self.kv_tiles, ((qt + 1) * ROWS + self.bn - 1) // self.bn)


def _when(cond, emit):
    """``emit()`` where ``cond`` holds: a Python bool (static sizes) decides at build time, a TIR
    condition guards the emitted code."""
    if not isinstance(cond, bool):
        with Ax.guard(cond):
            emit()
    elif cond:
        emit()


def s_full_wait(j):
    """``(stage, phase number)`` of ``s_full`` that S_j completes: its buffer ``j % S_BUFFERS``, that
    buffer's ``j // S_BUFFERS``-th completion (a wait passes on the number's parity)."""
    return j % S_BUFFERS, j // S_BUFFERS


def _each_buffer(j, emit):
    """``emit(b)`` for key tile j's S buffer ``b = j % S_BUFFERS``: chosen at build time for an int j,
    else one guarded branch per buffer (TMEM views have static columns)."""
    if isinstance(j, int):
        emit(j % S_BUFFERS)
        return
    for b in range(S_BUFFERS):
        with Ax.guard(j % S_BUFFERS == b):
            emit(b)


def _wait(bar, phase, stage=0):
    """A bounded wait (``remote=True`` is the bounded form: a barrier that never completes ends the
    launch with a report instead of hanging it)."""
    Ax.cuda.mbarrier_wait(bar, phase, stage, remote=True)


class _Sync:
    """The CTA's barriers: ``q_full`` (the Q rows landed), ``s_full[b]`` (the MMA thread's commit: S_j
    is in S buffer b = j % 2), ``p_full`` (all 128 softmax threads: P_j is in TMEM, O is rescaled), ``o_done``
    (the commit: O += P_j·V_j completed, so O may be read and P's tile rewritten), the K and V rings
    (bounded waits on both sides)."""

    _is_meta_class = True

    def __init__(self, b):
        self.q = Ax.cuda.mbarrier(1, 1, "q_full")
        self.s = Ax.cuda.mbarrier(1, S_BUFFERS, "s_full")
        self.p = Ax.cuda.mbarrier(ROWS, 1, "p_full")
        self.o = Ax.cuda.mbarrier(1, 1, "o_done")
        self.k = Ax.cuda.pipeline(b.stages, producers=1, consumers=1, name="k", remote=True)
        self.v = Ax.cuda.pipeline(b.stages, producers=1, consumers=1, name="v", remote=True)


def _produce(b, t, pool, Q, K, V, sync):
    """Warp 0: the tile's Q rows, then K and V tile by tile into their rings."""
    D, bn = b.p.head_dim, b.bn
    Ax.copy(box(pool, b.q_at, ROWS, D), t.rows(Q, t.qt * ROWS, ROWS, t.hq), barrier=sync.q, stage=0)
    with T.serial(0, t.n_kv) as j:
        s = sync.k.slot(j)
        sync.k.acquire(j)
        Ax.copy(box(pool, b.k_at + s * (bn * D), bn, D), t.kv(K, j), barrier=sync.k.full, stage=s)
        sync.v.acquire(j)
        Ax.copy(box(pool, b.v_at + s * (bn * D), bn, D), t.kv(V, j), barrier=sync.v.full, stage=s)


def _issue(b, t, pool, s_t, o_t, p_t, sync):
    """Warp 1: S_0 and S_1, then per key tile j, once P_j is written, S_{j+2} (into S_j's buffer) and
    O += P_j·V_j (the first P·V overwrites O), each by one elected thread and committed to its
    barriers."""
    D, bn = b.p.head_dim, b.bn
    q = mat(pool, b.q_at, ROWS, D)

    def qk(j):
        s = sync.k.slot(j)
        sync.k.wait(j)
        k = Ax.permute(mat(pool, b.k_at + s * (bn * D), bn, D), (1, 0))

        def mma(buf):
            with Ax.cuda.elect_one():
                Ax.gemm(s_t[buf], q, k, accumulate=False, barrier=(sync.s[buf], sync.k.empty[s]))
        _each_buffer(j, mma)

    def pv(j, first):
        _wait(sync.p, j % 2)
        Ax.cuda.tcgen05_fence_after()       # after the softmax's tcgen05.ld of S_j and st of O
        _when(j + S_BUFFERS < t.n_kv, lambda: qk(j + S_BUFFERS))
        s = sync.v.slot(j)
        sync.v.wait(j)
        v = mat(pool, b.v_at + s * (bn * D), bn, D)
        with Ax.cuda.elect_one():
            Ax.gemm(o_t, p_t, v, accumulate=not first, barrier=(sync.o, sync.v.empty[s]))

    _wait(sync.q, 0)
    qk(0)
    for j in range(1, S_BUFFERS):
        _when(j < t.n_kv, lambda: qk(j))
    pv(0, True)
    with T.serial(1, t.n_kv) as j:
        pv(j, False)


def _mask(s_acc, width, row0, col0, seq_kv, causal, tid):
    """Scores of keys past ``seq_kv`` (causal: after the row's own position) set to −∞; each register's
    (row, key) read off the tcgen05.ld fragment (:func:`kernels.parts.fragments.coords`)."""
    flat, shape = s_acc.flat(), (ROWS, width)
    for r in range(registers_of(s_acc.layout, shape)):
        row, col = coords(s_acc.layout, shape, r, tid)
        ok = col0 + col < seq_kv
        ok = T.And(ok, col0 + col <= row0 + row) if causal else ok
        IRB.buffer_store(flat, T.if_then_else(ok, flat[r], T.float32(-math.inf)), [r])


class _Softmax:
    """Warpgroup 1: its registers (S of a key tile, P packed two to a word, an O chunk) and its steps."""

    _is_meta_class = True

    def __init__(self, b, s_t, o_t, p_words, sync, tid):
        p, bn = b.p, b.bn
        self.b, self.s_t, self.o_t, self.p_words, self.sync, self.tid = b, s_t, o_t, p_words, sync, tid
        self.s = Ax.registers((ROWS, bn), "float32", fragment(bn), name="s_acc")
        # PACK columns of P, neighbours paired in one 32-bit word: tcgen05.st's 16x128b fragment
        self.words = Ax.registers((ROWS, PACK // 2), "uint32", Ax.cuda.tcgen05_fragment("16x128b", PACK // 8, ROWS),
                                  name="p_words")
        self.chunk = Ax.registers((ROWS, CHUNK), "float32", fragment(CHUNK), name="o_chunk")
        self.sm = OnlineSoftmax(ROWS, ROW_VALUES, p.scale * LOG2E)

    def step(self, j, row0, first):
        """Key tile j: S out of TMEM, mask, online softmax; after P_{j−1}·V_{j−1}, P_j into its TMEM tile
        (rounded to the input type, two to a column) and O *= α; then ``p_full``."""
        b, p, bn = self.b, self.b.p, self.b.bn
        stage, phase = s_full_wait(j)
        _wait(self.sync.s, phase % 2, stage)
        _each_buffer(j, lambda buf: Ax.copy(self.s, self.s_t[buf]))
        need = (j + 1) * bn > p.seq_kv
        if p.causal:
            need = T.Or(need, (j + 1) * bn - 1 > row0)
        _when(need, lambda: _mask(self.s, bn, row0, j * bn, p.seq_kv, p.causal, self.tid))
        self.sm.update(self.s)
        if not first:                       # P_{j−1}·V_{j−1} has read P's tile and written O
            _wait(self.sync.o, (j - 1) % 2)
        for c in range(bn // PACK):         # P first: S's registers are free before O's chunks load
            Ax.cuda.pack_pairs(self.words, self.s[:, c * PACK:(c + 1) * PACK], p.dtype)
            Ax.copy(self.p_words[:, c * PACK // 2:(c + 1) * PACK // 2], self.words)
        if not first:
            for c in range(b.p.head_dim // CHUNK):
                cols = slice(c * CHUNK, (c + 1) * CHUNK)
                Ax.copy(self.chunk, self.o_t[:, cols])
                self.sm.rescale(self.chunk)
                Ax.copy(self.o_t[:, cols], self.chunk)
        Ax.cuda.tcgen05_fence_before()      # the ld of S, st of O and st of P before the arrival
        T.evaluate(T.ptx.mbarrier.arrive.shared.b64(self.sync.p.ptr(0), T.uint32(1)))


def _softmax(b, t, pool, s_t, o_t, p_words, O, LSE_, sync, tid):
    """Warpgroup 1: the key loop, then ``O / l`` out through the Q slot (TMA clips rows past
    ``seq_q``) and the LSE."""
    p, D = b.p, b.p.head_dim
    w = _Softmax(b, s_t, o_t, p_words, sync, tid)
    row0 = t.qt * ROWS
    w.step(0, row0, True)
    with T.serial(1, t.n_kv) as j:
        w.step(j, row0, False)
    _wait(sync.o, (t.n_kv - 1) % 2)
    o = Ax.registers((ROWS, D), "float32", fragment(D), name="o_acc")
    out = Ax.registers((ROWS, D), p.dtype, fragment(D), name="o_out")
    Ax.copy(o, o_t)
    w.sm.finish(out, o)
    if p.lse:
        _store_lse(LSE_, w.sm, t, row0, p.seq_q, tid)
    leader = tid == 0

    def store(j, buf):
        Ax.copy(O[t.b:t.b + 1, row0:row0 + ROWS, t.hq * D + j * STORE:t.hq * D + (j + 1) * STORE], buf,
                fence=False, wait=False)
    Ax.cuda.staged_store(out, STORE, lambda j: box(pool, b.q_at + j * (ROWS * STORE), ROWS, STORE), store, 1,
                         leader, bufs=D // STORE)
    Ax.cuda.tma_store_wait(0, pred=leader)


def _store_lse(LSE_, sm, t, row0, seq_q, tid):
    """Each row's log-sum-exp by the first lane of its quad (rows past ``seq_q``: none)."""
    for r in range(sm.regs):
        row, _ = coords(ROW_VALUES, (ROWS, 1), r, tid)
        with Ax.guard(T.And(tid % 4 == 0, row0 + row < seq_q)):
            IRB.buffer_store(LSE_, sm.lse(r), [t.b, t.hq, row0 + row])


def _tmem_tiles(tm, b):
    """The S buffers (``bn`` columns each), O (``head_dim`` columns) and P (the input type: P·V's A,
    and the same cells as 32-bit words for tcgen05.st) in the CTA's TMEM allocation."""
    p = tm[:, b.p_col:b.tmem_columns]
    return (tuple(tm[:, i * b.bn:(i + 1) * b.bn] for i in range(S_BUFFERS)), tm[:, b.o_col:b.p_col],
            Ax.cuda.tmem_retype(p, b.p.dtype), Ax.cuda.tmem_retype(p, "uint32"))


def body(p, cfg):
    """The sm_100a PrimFunc of problem ``p`` (``cfg``: the sm_100a row of ``TARGETS``); parameters as
    the sm_90a body's."""
    b = Blackwell(p, cfg)
    B, Sq, Skv, Hq, Hk, D, dtype = p.batch, p.seq_q, p.seq_kv, p.q_heads, p.kv_heads, p.head_dim, p.dtype
    lse_shape = (B, Hq, Sq) if p.lse else (1,)

    @T.prim_func
    def attention(Q_: T.Buffer((B, Sq, Hq, D), dtype), K_: T.Buffer((B, Skv, Hk, D), dtype),
                  V_: T.Buffer((B, Skv, Hk, D), dtype), O_: T.Buffer((B, Sq, Hq, D), dtype),
                  LSE_: T.Buffer(lse_shape, "float32"),
                  Q_map: T.handle("tensormap"), K_map: T.handle("tensormap"), V_map: T.handle("tensormap"),
                  O_map: T.handle("tensormap")):
        Ax.cuda.min_blocks_per_sm(1)
        bx, tx_ = Ax.launch(b.grid, THREADS)
        Q, K, V, O = params((Q_, K_, V_, O_), (Q_map, K_map, V_map, O_map), ROWS, b.bn)
        pool = Ax.cuda.dynamic_shared(b.smem, dtype)
        sync = _Sync(b)
        tm = Ax.cuda.tmem((ROWS, b.tmem_columns), "float32", name="tmem")
        s_t, o_t, p_t, p_words = _tmem_tiles(tm, b)
        t = Tiles(p, b, bx)
        with Ax.cuda.role(0, 1):
            with Ax.warps(0, 1):
                _produce(b, t, pool, Q, K, V, sync)
            with Ax.warps(1, 2):
                _issue(b, t, pool, s_t, o_t, p_t, sync)
        with Ax.cuda.role(1, 2, each=True):
            _softmax(b, t, pool, s_t, o_t, p_words, O, LSE_, sync, tx_ % 128)
        Ax.cuda.tmem_free(tm)
    real_maps(Ax.current_build().tensormaps, {f"{n}_map": (shape, 2) for n, shape in p.shapes().items() if n != "LSE"})
    return attention


def protocol(n, stages):
    """CPU model of the body's synchronisation for a query tile with ``n`` key tiles and ``stages``-deep
    rings: per agent, the operations in the order :func:`_produce`, :func:`_issue` and
    :meth:`_Softmax.step` issue them.  ``("wait", barrier, stage, phase number)`` (the hardware waits
    on its parity; −1: a fresh barrier's, which passes at once), ``("arrive", barrier, stage)``,
    ``("tma", resource, version, barrier, stage)`` (an asynchronous copy that writes and then
    arrives), ``("mma", reads, write)`` and ``("commit", barriers)`` (queued for the tensor core in
    issue order; a commit arrives once every earlier MMA has run), ``("read" | "write", resource,
    version)``.  Resources: ``Q``, ``("K" | "V", slot)``, ``("S", buffer)``, ``P``, ``O`` (versions
    ``("acc", j)`` after P_j·V_j, ``("scaled", j)`` after its rescale by α_{j+1}); the epilogue stages
    ``O / l`` in Q's slot."""
    def ring(j):
        return j % stages, j // stages

    producer = [("tma", "Q", 0, "q_full", 0)]
    for j in range(n):
        s, k = ring(j)
        producer += [("wait", "k_empty", s, k - 1), ("tma", ("K", s), j, "k_full", s),
                     ("wait", "v_empty", s, k - 1), ("tma", ("V", s), j, "v_full", s)]

    def qk(j):
        s, k = ring(j)
        buf = j % S_BUFFERS
        return [("wait", "k_full", s, k), ("mma", [("Q", 0), (("K", s), j)], (("S", buf), j)),
                ("commit", [("s_full", buf), ("k_empty", s)])]

    mma = [("wait", "q_full", 0, 0)] + [op for j in range(min(n, S_BUFFERS)) for op in qk(j)]
    for j in range(n):
        s, k = ring(j)
        mma += [("wait", "p_full", 0, j)] + (qk(j + S_BUFFERS) if j + S_BUFFERS < n else [])
        mma += [("wait", "v_full", s, k),
                ("mma", [("P", j), (("V", s), j)] + ([("O", ("scaled", j - 1))] if j else []), ("O", ("acc", j))),
                ("commit", [("o_done", 0), ("v_empty", s)])]
    softmax = []
    for j in range(n):
        softmax += [("wait", "s_full") + s_full_wait(j), ("read", ("S", j % S_BUFFERS), j)]
        if j:
            softmax += [("wait", "o_done", 0, j - 1), ("read", "O", ("acc", j - 1)), ("write", "O", ("scaled", j - 1))]
        softmax += [("write", "P", j), ("arrive", "p_full", 0)]
    softmax += [("wait", "o_done", 0, n - 1), ("read", "O", ("acc", n - 1)), ("write", "Q", "O / l")]
    return {"producer": producer, "mma": mma, "softmax": softmax}
