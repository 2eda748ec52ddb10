"""The attention of kernels/attention.py on Trainium (its trn1 and trn2 rows: kernels/nki_attention.py's
body), built and run on the NumPy models of NeuronCore-v2 and -v3, against a float64 NumPy SDPA.

Tolerance, from the rounding the kernel does: Q, K, V are given in bf16/fp16 and the reference reads
the same rounded values; scores, the running max and sums, exp, the rescaled accumulator and the P·V
products are float32 (relative error ~1e-6 over a row of ≤ 1000 keys).  Two roundings to the input
type remain: P before P·V (each weight p_k becomes p_k (1 + δ_k), |δ_k| ≤ u, while the sum l uses the
unrounded p, so the row's output moves by ≤ u · max_k |V_k|) and O at the end (≤ u · |O| ≤ u · max |V|);
u = 2^-8 (bf16) or 2^-11 (fp16), round to nearest.  So ``|O − O_ref| ≤ (2u + 1e-5) · max |V|`` per
(batch, kv head).  LSE is float32 throughout: ``|LSE − LSE_ref| ≤ 1e-5 · (1 + |LSE_ref|)``.
"""

import math

import ml_dtypes
import numpy as np
import pytest

from axe.lang import compile_kernel
from kernels import attention as A
from kernels.nki_attention import BK, BQ

NP = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}
UNIT_ROUNDOFF = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}


def sdpa(Q, K, V, causal, scale):
    """float64 SDPA on [B, S, H, D] arrays, query head h reading kv head h // (Hq // Hkv); torch's
    causal mask (key index > query index masked, top-left aligned).  Returns (O, LSE)."""
    q, k, v = (x.astype(np.float64) for x in (Q, K, V))
    B, Sq, Hq, _ = q.shape
    Skv, Hk = k.shape[1], k.shape[2]
    O, L = np.zeros(q.shape), np.zeros((B, Hq, Sq))
    for b in range(B):
        for h in range(Hq):
            kv = h // (Hq // Hk)
            s = q[b, :, h] @ k[b, :, kv].T * scale
            if causal:
                s[np.arange(Skv)[None, :] > np.arange(Sq)[:, None]] = -np.inf
            m = s.max(1, keepdims=True)
            e = np.exp(s - m)
            O[b, :, h] = e @ v[b, :, kv] / e.sum(1, keepdims=True)
            L[b, h] = m[:, 0] + np.log(e.sum(1))
    return O, L


def _inputs(p, seed):
    rng = np.random.default_rng(seed)
    shapes = p.shapes()
    return {n: rng.standard_normal(shapes[n]).astype(NP[p.dtype]) for n in ("Q", "K", "V")}


# (batch, seq_q, seq_kv, q_heads, kv_heads, head_dim, dtype, causal, scale)
CASES = [
    (1, 77, 600, 8, 2, 64, "float16", True, None),          # GQA 4:1, causal, seq_q < seq_kv, ragged
    (1, 1000, 600, 2, 2, 128, "bfloat16", True, None),      # 1:1, causal, seq_q > seq_kv: rows past the keys
    (1, 600, 1000, 4, 1, 128, "bfloat16", False, 0.3),      # GQA 4:1, any scale, two key blocks, ragged
    (2, 128, 77, 2, 2, 64, "float16", False, None),         # batch 2, one key block shorter than the tile
    (1, 1000, 1000, 1, 1, 64, "bfloat16", True, 0.05),      # square causal, ragged, small scale
]


@pytest.mark.parametrize("target", ["trn1", "trn2"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "b{}_q{}_kv{}_h{}:{}_d{}_{}{}".format(
    *c[:7], "_causal" if c[7] else ""))
def test_attention_matches_float64_sdpa(case, target):
    B, Sq, Skv, Hq, Hk, D, dtype, causal, scale = case
    k = A.make(B, Sq, Skv, Hq, Hk, D, dtype, causal, lse=True, scale=scale)
    art = compile_kernel(k, target)
    assert art.outputs == ("O", "LSE")
    assert ("neuronxcc" in art.source) == (target == "trn1")
    p = A.Problem(B, Sq, Skv, Hq, Hk, D, dtype, causal, True, scale)
    x = _inputs(p, seed=Sq + Skv + Hq)
    out, cost = art.run(**x)
    O, L = sdpa(x["Q"], x["K"], x["V"], causal, p.scale)
    vmax = np.abs(x["V"].astype(np.float64)).max(axis=1)                    # (B, Hkv, D) -> per kv head
    bound = (2 * UNIT_ROUNDOFF[dtype] + 1e-5) * vmax.max(-1)                # (B, Hkv)
    err = np.abs(out["O"].astype(np.float64) - O).max(axis=(1, 3))          # (B, Hq)
    assert (err <= np.repeat(bound, Hq // Hk, axis=1)).all(), (err, bound)
    assert np.abs(out["LSE"] - L).max() <= 1e-5 * (1 + np.abs(L).max())
    assert cost.flops == 4 * D * B * Hq * BQ * BK * _blocks_visited(Sq, Skv, causal)


def _blocks_visited(Sq, Skv, causal):
    """(query tile, key block) pairs with a key some row of the (128-row) tile may see: brute force."""
    return sum(1 for q0 in range(0, Sq, BQ) for k0 in range(0, Skv, BK) if not causal or k0 <= q0 + BQ - 1)


@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_causal_skips_the_blocks_above_the_diagonal_and_masks_only_the_diagonal_ones(target):
    Sq = Skv = 2048
    art = A.build(1, Sq, Skv, 1, 1, 128, "bfloat16", True, target=target)
    Z = np.zeros((1, Sq, 1, 128), ml_dtypes.bfloat16)
    _, cost = art.run(numerics=False, Q=Z, K=Z, V=Z)
    visited = _blocks_visited(Sq, Skv, True)
    assert visited == sum(range(1, Skv // BK + 1)) * (BK // BQ)             # 40 of the 64 pairs
    assert cost.counts["nisa.nc_matmul"] == visited * (1 + BK // 128)      # Q·Kᵀ and 4 P·V pieces each
    # one mask per query tile (its diagonal block); none on the blocks below it
    assert cost.counts.get("nisa.affine_select", 0) == Sq // BQ


def test_without_lse_the_kernel_has_no_lse_output():
    art = A.build(1, 300, 300, 2, 1, 64, "float16", False, target="trn2")
    assert art.outputs == ("O",) and "LSE" not in art.params and "nl.log" not in art.source


@pytest.mark.parametrize("kw, why", [
    (dict(head_dim=96), "head_dim must be one of"),
    (dict(dtype="float32"), "dtype must be one of"),
    (dict(q_heads=6, kv_heads=4), "kv_heads=4 must divide q_heads=6"),
    (dict(scale=-1.0), "scale must be positive"),
    (dict(seq_kv=0), "seq_kv must be a positive int")])
def test_refusals_name_the_reason(kw, why):
    args = dict(batch=1, seq_q=128, seq_kv=128, q_heads=2, kv_heads=1, head_dim=64, dtype="bfloat16", causal=True)
    args.update(kw)
    with pytest.raises(ValueError, match=why):
        A.build(**args, target="trn1")


def test_reference_of_this_file_is_torch_sdpa():
    """The oracle above against torch's own SDPA (GQA expanded, is_causal, seq_q != seq_kv)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    Q, K, V = (rng.standard_normal(s) for s in ((1, 70, 4, 64), (1, 90, 2, 64), (1, 90, 2, 64)))
    O, L = sdpa(Q, K, V, True, 0.2)
    q, k, v = (torch.from_numpy(x).transpose(1, 2) for x in (Q, K, V))
    k, v = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.2)
    np.testing.assert_allclose(O, want.transpose(1, 2).numpy(), atol=1e-12)
    s = (q @ k.transpose(-1, -2) * 0.2).masked_fill(torch.ones(70, 90).triu(1).bool(), -math.inf)
    np.testing.assert_allclose(L, torch.logsumexp(s, -1).numpy(), atol=1e-12)
