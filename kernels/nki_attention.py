"""Multi-head attention forward for Trainium (trn1) in axe, flash-attention style, no mask:
``O = softmax(Q·Kᵀ / sqrt(d))·V`` per head, head dim 128, online softmax over key blocks of 512.

Per (head, 128 queries): Qᵀ stays in SBUF (d on the partitions); each key block loads Kᵀ (d on
the partitions) and V (keys on the partitions in 4 blocks of 128); ``S = Q·Kᵀ`` is one
``nc_matmul`` (K=128, M=128, N=512, one PSUM bank); the running max, the rescale factor and the
row sums are (128, 1) SBUF columns; P is transposed on TensorE (4 × 128×128) so the keys lie on
the partitions for ``P·V`` (4 accumulating ``nc_matmul``).  Ragged sequence ends: masked loads
(zeroed tiles) and the scores of keys past the end set to -30000 (``keep_columns``).
"""

from math import sqrt

from tvm.script import tirx as T

import axe.lang as Ax
from axe.layout import F, P, S

D, BQ, BK = 128, 128, 512
Q_TILE = S[(BQ, D):(1 @ F, 1 @ P)]                              # Q[q, d]: d on partitions (stationary)
K_TILE = S[(BK, D):(1 @ F, 1 @ P)]                              # K[k, d]: d on partitions (moving Kᵀ)
V_TILE = S[(BK // 128, 128, D):(128 @ F, 1 @ P, 1 @ F)]         # V[k, d]: keys on partitions, 4 blocks
PT_TILE = S[(BQ, BK // 128, 128):(1 @ F, 128 @ F, 1 @ P)]       # P[q, k]: keys on partitions, 4 blocks


def _cdiv(a, b):
    return -(-a // b)


def reference(Q, K, V):
    import numpy as np
    q, k, v = (x.astype(np.float32) for x in (Q, K, V))
    s = q @ k.transpose(0, 2, 1) / sqrt(q.shape[-1])
    p = np.exp(s - s.max(-1, keepdims=True))
    return {"O": (p / p.sum(-1, keepdims=True)) @ v}


def nki_attention(heads=2, seq=1024, dtype="bfloat16"):
    """The kernel for ``heads`` (batch × heads) sequences of ``seq`` tokens, head dim 128."""
    QT, KT, scale = _cdiv(seq, BQ), _cdiv(seq, BK), 1.0 / sqrt(D)

    @Ax.kernel(name="nki_attention", reference=reference, outputs=("O",), shape=(heads, seq, D), dtype=dtype,
               targets=("trn1",))
    def kernel():
        @T.prim_func
        def nki_attention(Q_: T.Buffer((heads, seq, D), dtype), K_: T.Buffer((heads, seq, D), dtype),
                          V_: T.Buffer((heads, seq, D), dtype), O_: T.Buffer((heads, seq, D), dtype)):
            Ax.neuron.core()
            Q, K = Ax.neuron.hbm(Q_, (1, BK, D)), Ax.neuron.hbm(K_, (1, BK, D))
            V, O = Ax.neuron.hbm(V_, (1, BK, D)), Ax.neuron.hbm(O_, (1, BK, D))
            for h in T.parallel(heads):
                for qi in T.parallel(QT):
                    q = Ax.neuron.sbuf((BQ, D), dtype, Q_TILE, name="q")
                    Ax.copy(q, Q[h:h + 1, qi * BQ:(qi + 1) * BQ, :])
                    m_run = Ax.neuron.sbuf((BQ, 1), "float32", name="m_run")
                    Ax.elementwise(m_run, lambda: T.float32(-30000.0))
                    l_run = Ax.neuron.sbuf((BQ, 1), "float32", name="l_run")
                    o_acc = Ax.neuron.sbuf((BQ, D), "float32", name="o_acc")
                    for kj in T.serial(KT):
                        k = Ax.neuron.sbuf((BK, D), dtype, K_TILE, name="k")
                        v = Ax.neuron.sbuf((BK, D), dtype, V_TILE, name="v")
                        Ax.copy(k, K[h:h + 1, kj * BK:(kj + 1) * BK, :])
                        Ax.copy(v, V[h:h + 1, kj * BK:(kj + 1) * BK, :])
                        s = Ax.neuron.psum((BQ, BK), "float32", name="s")
                        Ax.gemm(s, q, Ax.permute(k, (1, 0)), accumulate=False)
                        Ax.neuron.keep_columns(s, kj * BK, seq)
                        mx = Ax.neuron.sbuf((BQ, 1), "float32", name="mx")
                        Ax.reduce(mx, s, "max", dims=1)
                        m_new = Ax.neuron.sbuf((BQ, 1), "float32", name="m_new")
                        Ax.elementwise(m_new, lambda a, b: T.max(a, b * T.float32(scale)), m_run, mx)
                        p = Ax.neuron.sbuf((BQ, BK), "float32", name="p")
                        Ax.elementwise(p, lambda x, mm: T.exp(x * T.float32(scale) - mm), s, m_new)
                        rs = Ax.neuron.sbuf((BQ, 1), "float32", name="rs")
                        Ax.reduce(rs, p, "sum", dims=1)
                        alpha = Ax.neuron.sbuf((BQ, 1), "float32", name="alpha")
                        Ax.elementwise(alpha, lambda a, b: T.exp(a - b), m_run, m_new)
                        Ax.elementwise(l_run, lambda l_, a, r: l_ * a + r, l_run, alpha, rs)
                        pt_ps = Ax.neuron.psum((BQ, BK), "float32", PT_TILE, name="pt_ps")
                        Ax.copy(pt_ps, p)
                        pt = Ax.neuron.sbuf((BQ, BK), dtype, PT_TILE, name="pt")
                        Ax.cast(pt, pt_ps)
                        pv = Ax.neuron.psum((BQ, D), "float32", name="pv")
                        Ax.gemm(pv, pt, v, accumulate=False)
                        Ax.elementwise(o_acc, lambda o, a, x: o * a + x, o_acc, alpha, pv)
                        Ax.copy(m_run, m_new)
                    out = Ax.neuron.sbuf((BQ, D), dtype, name="out")
                    Ax.elementwise(out, lambda o, l_: T.Cast(dtype, o / l_), o_acc, l_run)
                    Ax.copy(O[h:h + 1, qi * BQ:(qi + 1) * BQ, :], out)
        return nki_attention
    return kernel


attention_1024 = nki_attention()
