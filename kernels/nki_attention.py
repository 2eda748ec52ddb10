"""The Trainium body of :mod:`kernels.attention` (its ``TARGETS`` rows ``trn1``, ``neuronxcc.nki``, and
``trn2``, ``nki.*``): flash-attention forward ``O = softmax(Q·Kᵀ·scale [causal])·V`` for every
:class:`kernels.attention.Problem` — ``[B, S, H, D]`` tensors, grouped-query heads (query head h reads
kv head ``h // group``), head size 64 or 128, bf16 or fp16, any scale, ``seq_q != seq_kv``, ragged
lengths, the causal mask (torch's, top-left aligned), the optional log-sum-exp ``LSE (B, H, seq_q)``.

Per (batch, query head, 128 queries): Qᵀ stays in SBUF (d on the partitions: 64 or 128 of them);
each key block of 512 loads Kᵀ (d on the partitions) and V (keys on the partitions in 4 blocks of
128); ``S = Q·Kᵀ`` is one ``nc_matmul`` (K = d, M = 128, N = 512, one PSUM bank); the running max,
rescale factor and row sums are (128, 1) float32 SBUF columns; P is transposed on TensorE (4 × 128×128)
so the keys lie on the partitions for ``P·V`` (4 accumulating ``nc_matmul``).  Rows and keys past
the ends: masked loads (zeroed tiles), masked stores, and key columns past ``seq_kv`` set to
:data:`MASKED` (``Ax.neuron.keep_columns``) in the last key block only.

Causal: a query tile sees the key blocks up to the one holding its rows' diagonal; the blocks above
it are not visited.  Query tiles are grouped by how many key blocks they see (the ``BK // BQ`` tiles
of one diagonal block share the count), each group a loop with a static trip count, and only the
last block of a tile is masked (``Ax.neuron.keep_lower``: key > query row to :data:`MASKED`).  Every
row sees key 0 in its first block, so each block's row max is a real score and a masked score
``MASKED·scale`` is far below it for any positive scale.

Law (tests/test_attention_trn.py, on the NumPy models of NeuronCore-v2 and -v3 against float64
SDPA): ``O[b, i, h] = Σ_k p_ik V[b, k, h // group] / Σ_k p_ik`` with ``p_ik = exp(scale·q·k − m_i)``
over the keys row i sees, and ``LSE[b, h, i] = m_i + log Σ_k p_ik``.
"""

from tvm.script import tirx as T
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as IRB

import axe.lang as Ax
from axe.layout import F, P, S

BQ, BK = 128, 512
#: the score of a masked key: ``MASKED · scale`` underflows ``exp`` against any real row max
MASKED = -1.0e30


def _cdiv(a, b):
    return -(-a // b)


def _layouts(d):
    return {"q": S[(BQ, d):(1 @ F, 1 @ P)],                          # Q[q, d]: d on partitions (stationary)
            "k": S[(BK, d):(1 @ F, 1 @ P)],                          # K[k, d]: d on partitions (moving Kᵀ)
            "v": S[(BK // 128, 128, d):(128 @ F, 1 @ P, 1 @ F)],     # V[k, d]: keys on partitions, 4 blocks
            "pt": S[(BQ, BK // 128, 128):(1 @ F, 128 @ F, 1 @ P)]}   # P[q, k]: keys on partitions, 4 blocks


def query_groups(p):
    """``[(first query tile, tiles, key blocks seen, diagonal)]``: consecutive query tiles that see
    the same number of key blocks; ``diagonal``: their last block holds the causal diagonal."""
    kt = _cdiv(p.seq_kv, BK)
    groups = []
    for qi in range(_cdiv(p.seq_q, BQ)):
        j = qi * BQ // BK                 # the key block holding this tile's diagonal (tiles never straddle one)
        key = (min(kt, j + 1), j < kt) if p.causal else (kt, False)
        if groups and groups[-1][2:] == key:
            first, n, *_ = groups[-1]
            groups[-1] = (first, n + 1, *key)
        else:
            groups.append((qi, 1, *key))
    return groups


class _Body:
    """The kernel body for one problem: HBM views, tile layouts and the per-tile steps."""

    def __init__(self, p, Q_, K_, V_, O_, LSE_):
        self.p, self.L, self.dt = p, _layouts(p.head_dim), p.dtype
        d = p.head_dim
        self.Q, self.O = Ax.neuron.hbm(Q_, (1, BQ, 1, d)), Ax.neuron.hbm(O_, (1, BQ, 1, d))
        self.K, self.V = Ax.neuron.hbm(K_, (1, BK, 1, d)), Ax.neuron.hbm(V_, (1, BK, 1, d))
        self.LSE = Ax.neuron.hbm(LSE_, (1, 1, BQ)) if LSE_ is not None else None

    def query_tile(self, b, h, hk, q0, blocks, diagonal):
        p, L, dt, d = self.p, self.L, self.dt, self.p.head_dim
        q = Ax.neuron.sbuf((BQ, d), dt, L["q"], name="q")
        Ax.copy(q, self.Q[b:b + 1, q0:q0 + BQ, h:h + 1, :])
        st = {"q": q, "m": Ax.neuron.sbuf((BQ, 1), "float32", name="m_run"),
              "l": Ax.neuron.sbuf((BQ, 1), "float32", name="l_run"),
              "o": Ax.neuron.sbuf((BQ, d), "float32", name="o_acc")}
        Ax.elementwise(st["m"], lambda: T.float32(MASKED))
        if blocks > 1:                    # blocks wholly below the diagonal and inside seq_kv: no mask
            with IRB.serial(0, blocks - 1) as kj:
                IRBuilder.name("kj", kj)
                self.key_block(st, b, hk, kj * BK, None, False)
        self.key_block(st, b, hk, (blocks - 1) * BK, q0 if diagonal else None, True)
        out = Ax.neuron.sbuf((BQ, d), dt, name="out")
        Ax.elementwise(out, lambda o, l_: T.Cast(dt, o / l_), st["o"], st["l"])
        Ax.copy(self.O[b:b + 1, q0:q0 + BQ, h:h + 1, :], out)
        if self.LSE is not None:
            lse = Ax.neuron.sbuf((BQ, 1), "float32", name="lse")
            Ax.elementwise(lse, lambda m, l_: m + T.log(l_), st["m"], st["l"])
            Ax.copy(self.LSE[b:b + 1, h:h + 1, q0:q0 + BQ], lse)

    def key_block(self, st, b, hk, k0, diagonal_row0, last):
        """One step of the online softmax over keys ``k0 .. k0 + BK``; ``last``: the tile's last block
        (the one that can reach past ``seq_kv``); ``diagonal_row0``: the tile's first query row when
        this block holds the causal diagonal."""
        p, L, dt, d, scale = self.p, self.L, self.dt, self.p.head_dim, self.p.scale
        k = Ax.neuron.sbuf((BK, d), dt, L["k"], name="k")
        v = Ax.neuron.sbuf((BK, d), dt, L["v"], name="v")
        Ax.copy(k, self.K[b:b + 1, k0:k0 + BK, hk:hk + 1, :])
        Ax.copy(v, self.V[b:b + 1, k0:k0 + BK, hk:hk + 1, :])
        s = Ax.neuron.psum((BQ, BK), "float32", name="s")
        Ax.gemm(s, st["q"], Ax.permute(k, (1, 0)), accumulate=False)
        if last:
            Ax.neuron.keep_columns(s, k0, p.seq_kv, MASKED)
        if diagonal_row0 is not None:
            Ax.neuron.keep_lower(s, diagonal_row0, k0, MASKED)
        mx = Ax.neuron.sbuf((BQ, 1), "float32", name="mx")
        Ax.reduce(mx, s, "max", dims=1)
        m_new = Ax.neuron.sbuf((BQ, 1), "float32", name="m_new")
        Ax.elementwise(m_new, lambda a, x: T.max(a, x * T.float32(scale)), st["m"], mx)
        pr = Ax.neuron.sbuf((BQ, BK), "float32", name="p")
        Ax.elementwise(pr, lambda x, mm: T.exp(x * T.float32(scale) - mm), s, m_new)
        rs = Ax.neuron.sbuf((BQ, 1), "float32", name="rs")
        Ax.reduce(rs, pr, "sum", dims=1)
        alpha = Ax.neuron.sbuf((BQ, 1), "float32", name="alpha")
        Ax.elementwise(alpha, lambda a, x: T.exp(a - x), st["m"], m_new)
        Ax.elementwise(st["l"], lambda l_, a, r: l_ * a + r, st["l"], alpha, rs)
        pt_ps = Ax.neuron.psum((BQ, BK), "float32", L["pt"], name="pt_ps")
        Ax.copy(pt_ps, pr)
        pt = Ax.neuron.sbuf((BQ, BK), dt, L["pt"], name="pt")
        Ax.cast(pt, pt_ps)
        pv = Ax.neuron.psum((BQ, d), "float32", name="pv")
        Ax.gemm(pv, pt, v, accumulate=False)
        Ax.elementwise(st["o"], lambda o, a, x: o * a + x, st["o"], alpha, pv)
        Ax.copy(st["m"], m_new)


def body(p):
    """The NKI body of :class:`kernels.attention.Problem` ``p`` (a PrimFunc, built in the current
    trn1/trn2 build): parameters ``(Q_, K_, V_, O_[, LSE_])``."""
    B, Sq, Skv, Hq, Hk, d, dt, G = p.batch, p.seq_q, p.seq_kv, p.q_heads, p.kv_heads, p.head_dim, p.dtype, p.group
    with IRBuilder() as ib:
        with IRB.prim_func():
            IRB.func_name("attention")
            Q_ = IRB.arg("Q_", T.Buffer((B, Sq, Hq, d), dt))
            K_ = IRB.arg("K_", T.Buffer((B, Skv, Hk, d), dt))
            V_ = IRB.arg("V_", T.Buffer((B, Skv, Hk, d), dt))
            O_ = IRB.arg("O_", T.Buffer((B, Sq, Hq, d), dt))
            LSE_ = IRB.arg("LSE_", T.Buffer((B, Hq, Sq), "float32")) if p.lse else None
            Ax.neuron.core()
            body_ = _Body(p, Q_, K_, V_, O_, LSE_)
            with IRB.parallel(0, B) as b, IRB.parallel(0, Hk) as hk, IRB.parallel(0, G) as g:
                for v, name in ((b, "b"), (hk, "hk"), (g, "g")):
                    IRBuilder.name(name, v)
                for first, tiles, blocks, diagonal in query_groups(p):
                    with IRB.parallel(0, tiles) as qi:
                        IRBuilder.name("qi", qi)
                        body_.query_tile(b, hk * G + g, hk, (first + qi) * BQ, blocks, diagonal)
    return ib.get()
