"""GPU cases for the flash-attention forward (:mod:`kernels.attention`, issue 28): builds for ragged
sequence lengths (1, 77, 1000, 2061 = 2048 + 13), causal and not, head size 64 and 128, bf16 and
fp16, grouped-query heads (kv heads 1, 2 and 4 under 4 query heads), query and key lengths that
differ, with and without the log-sum-exp, the default configuration per head size and mask
(``kernels/parts/attention_variants.py``: ``DEFAULTS``) and the other named ones, and a causal
case with 64 heads whose CTAs go in two sections of 32 (``kernels.attention.tile_order``), the
persistent forms over several rounds of CTAs; each checked against torch's
``F.scaled_dot_product_attention`` in fp32 on the same inputs (kv heads expanded), on fresh random
data, outputs poisoned with NaN and followed by a guard batch that must stay NaN.

Accuracy: axe's max error (of max |ref|) must be within 3x torch's own SDPA run in the input dtype
on the same inputs (the FlashAttention tests' criterion), or under an absolute floor that a result
rounded once to the dtype meets; the LSE within 2e-3 of fp32 torch's logsumexp.

Build and run (artifact names start with ``attention_``)::

    .venv/bin/python scripts/gpu_build.py --match 'attention_'
    python3 tests/gpu/run_all.py --only $(ls .carry/artifacts | grep '^attention_')
"""

import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from kernels.parts.attention_variants import VARIANTS  # noqa: E402,F401  (TVM-free: the GPU machine imports it)
SHORT = {"bfloat16": "bf16", "float16": "f16"}
BATCH, Q_HEADS = 2, 4




def _case(seq_q, seq_kv, d, causal, dtype="bfloat16", kv_heads=2, lse=True, variant=None, q_heads=Q_HEADS,
          batch=BATCH):
    name = (f"attention_{SHORT[dtype]}_d{d}_q{seq_q}" + (f"_kv{seq_kv}" if seq_kv != seq_q else "")
            + ("_causal" if causal else "") + f"_h{q_heads}k{kv_heads}" + ("" if lse else "_nolse")
            + (f"_b{batch}" if batch != BATCH else "") + (f"_{variant}" if variant else ""))
    return name, dict(batch=batch, seq_q=seq_q, seq_kv=seq_kv, q_heads=q_heads, kv_heads=kv_heads, head_dim=d,
                      dtype=dtype, causal=causal, lse=lse, variant=variant)


CASES = dict(
    [_case(s, s, d, c) for s in (1, 77, 1000, 2061) for d in (64, 128) for c in (False, True)]
    + [_case(s, s, d, c, "float16") for s, d in ((77, 128), (2061, 128), (1000, 64)) for c in (False, True)]
    + [_case(77, 1000, 128, False), _case(77, 1000, 128, True), _case(1000, 77, 64, True),
       _case(1000, 1000, 128, True, kv_heads=1), _case(1000, 1000, 64, False, kv_heads=4),
       _case(2061, 2061, 128, True, lse=False), _case(1000, 1000, 64, False, "float16", lse=False)]
    # the other named configurations (the cases above run each head size's and mask's default)
    + [_case(s, s, 128, c, variant=v) for v in ("ov", "simple") for s in (77, 2061) for c in (False, True)]
    + [_case(2061, 2061, 64, c, variant="simple") for c in (False, True)]
    + [_case(2061, 2061, 128, True, q_heads=32, kv_heads=8), _case(2061, 2061, 64, True, q_heads=32, kv_heads=32)]
    + [_case(1, 1, 64, True, variant="ov"), _case(1000, 1000, 64, True, kv_heads=1, variant="pp"),
       _case(77, 1000, 128, True, "float16", variant="pp")]
    + [_case(2061, 2061, 128, c, variant="pp176") for c in (False, True)]
    + [_case(2061, 2061, 64, c, variant="ov3") for c in (False, True)]
    # persistent: several rounds of 132 CTAs, the last one partial (1088 and 704 tiles), and one round
    + [_case(2061, 2061, 128, c, q_heads=32, kv_heads=8, variant="pp_p") for c in (False, True)]
    + [_case(2061, 2061, 64, c, q_heads=32, kv_heads=32, variant="pp3_p") for c in (False, True)]
    + [_case(1000, 1000, 64, True, q_heads=32, kv_heads=4, variant="ov3_p"), _case(77, 1000, 128, True, variant="pp_p")]
    # persistent with the CTA order a head at a time (section=1) when causal
    + [_case(2061, 2061, 128, True, q_heads=32, kv_heads=8, variant="pp_p1"),
       _case(2061, 2061, 64, True, q_heads=32, kv_heads=32, variant="pp3_p1")]
    # the benchmark's first causal shape (b=32 h=32 seq=512 d=64), where it hung (2026-11-27: the
    # persistent ping-pong's turns were not chained across a CTA's tiles); the default and the
    # persistent ping-pongs, 3072 / 4096 tiles: 24 / 32 rounds of 132 CTAs
    + [_case(512, 512, 64, True, q_heads=32, kv_heads=32, batch=32, lse=False, variant=v) for v in (None, "pp_p", "pp3_p")]
    # fewer ALU-pipe instructions (the warpgroup index broadcast, the block mask): ragged and whole-tile
    # lengths, both masks, query and key lengths that differ, persistent over several rounds, fp16
    + [_case(s, s, 64, c, variant="pp3_pm") for s in (1, 77, 1000, 2061) for c in (False, True)]
    + [_case(2061, 2061, 64, c, q_heads=32, kv_heads=32, variant=v) for c in (False, True)
       for v in ("pp3_pm", "pp3_pu")]
    + [_case(77, 1000, 64, True, variant="pp3_pm"), _case(1000, 77, 64, True, variant="pp3_pm"),
       _case(1000, 1000, 64, True, "float16", kv_heads=1, variant="pp3_pm"), _case(77, 77, 64, True, variant="pp3_pu"),
       _case(512, 512, 64, True, q_heads=32, kv_heads=32, batch=32, lse=False, variant="pp3_pm")]
    + [_case(s, s, 64, c, variant="pp3m") for s in (1, 2061) for c in (False, True)]
    + [_case(s, s, d, c, variant="pp_p1m") for s in (77, 2061) for d in (64, 128) for c in (False, True)]
    + [_case(2061, 2061, 128, True, q_heads=32, kv_heads=8, variant="pp_p1m"),
       _case(77, 1000, 128, True, variant="pp_p1m")]
    + [_case(s, s, 128, c, variant="pp176m") for s in (77, 2061) for c in (False, True)]
    + [_case(1000, 1000, 128, True, "float16", variant="pp176m"), _case(1000, 77, 128, True, variant="pp176m")]
    + [_case(s, s, d, c, variant=v) for v in ("ppm", "pp_pm") for s in (77, 2061) for d in (64, 128)
       for c in (False, True)]
    + [_case(1000, 77, 128, False, "float16", variant="ppm"), _case(2061, 2061, 128, False, q_heads=32, kv_heads=8,
                                                                    variant="pp_pm")]
    # skip_dead: key tiles past a warpgroup's last row not computed (192-row tiles, causal)
    + [_case(s, s, 64, True, variant=v) for s in (1, 77, 200, 1000, 2061) for v in ("pp3_pmd", "pp3md")]
    + [_case(2061, 2061, 64, c, q_heads=32, kv_heads=32, variant=v) for c in (False, True)
       for v in ("pp3_pmd", "pp3md")]
    + [_case(77, 1000, 64, True, variant="pp3_pmd"), _case(1000, 77, 64, True, variant="pp3_pmd"),
       _case(1000, 1000, 64, True, "float16", kv_heads=1, variant="pp3_pmd"),
       _case(512, 512, 64, True, q_heads=32, kv_heads=32, batch=32, lse=False, variant="pp3_pmd")])

def _builder(name, kw):
    def build():
        sys.path.insert(0, ROOT)
        import axe.lang as Ax
        from kernels.attention import make
        return Ax.compile_kernel(make(name=name, **kw), "sm_90a")
    return build


BUILDS = {name: _builder(name, kw) for name, kw in CASES.items()}


def _floor(dtype, torch):
    return 2e-3 if dtype == torch.float16 else 1.6e-2


def check_attention(kernel, torch):
    kw = CASES[kernel.launch["name"]]
    B, Sq, Skv, Hq, Hk, D = kw["batch"], kw["seq_q"], kw["seq_kv"], kw["q_heads"], kw["kv_heads"], kw["head_dim"]
    dt, causal = getattr(torch, kw["dtype"]), kw["causal"]
    F = torch.nn.functional
    q = torch.randn(B, Sq, Hq, D, device="cuda", dtype=dt)
    k = torch.randn(B, Skv, Hk, D, device="cuda", dtype=dt)
    v = torch.randn(B, Skv, Hk, D, device="cuda", dtype=dt)
    o_buf = torch.full((B + 1, Sq, Hq, D), float("nan"), device="cuda", dtype=dt)   # + a guard batch
    o = o_buf[:B]
    args = [q, k, v, o]
    if kw["lse"]:
        lse_buf = torch.full((B + 1, Hq, Sq), float("nan"), device="cuda", dtype=torch.float32)
        args.append(lse_buf[:B])
    kernel(*args)
    torch.cuda.synchronize()
    what = f"attention {kw['dtype']} d={D} q={Sq} kv={Skv} {'causal' if causal else 'full'} {Hq}q/{Hk}kv heads"
    assert not o.isnan().any(), f"{what}: {o.isnan().sum().item()} outputs never written (NaN)"
    assert o_buf[B].isnan().all(), f"{what}: wrote past the output (guard batch)"

    def sdpa(x, y, z):
        g = Hq // Hk
        x, y, z = (t.transpose(1, 2) for t in (x, y, z))
        y, z = y.repeat_interleave(g, dim=1), z.repeat_interleave(g, dim=1)
        return F.scaled_dot_product_attention(x, y, z, is_causal=causal).transpose(1, 2)
    want = sdpa(q.float(), k.float(), v.float())
    peer = sdpa(q, k, v)                           # torch in the input dtype: the accuracy the dtype allows
    top = want.abs().max().clamp_min(1e-12)
    err = ((o.float() - want).abs().max() / top).item()
    peer_err = ((peer.float() - want).abs().max() / top).item()
    tol = max(3 * peer_err, _floor(dt, torch))
    assert err <= tol, f"{what}: max error {err:.2e} of max|ref| > {tol:.2e} (torch {kw['dtype']} SDPA: {peer_err:.2e})"
    detail = f"{what}: err {err:.1e} (torch {kw['dtype']} {peer_err:.1e})"
    if kw["lse"]:
        lse = args[4]
        assert not lse.isnan().any(), f"{what}: {lse.isnan().sum().item()} LSE values never written"
        assert lse_buf[B].isnan().all(), f"{what}: wrote past the LSE (guard batch)"
        s = torch.einsum("bqhd,bkhd->bhqk", q.float(), k.float().repeat_interleave(Hq // Hk, dim=2)) / math.sqrt(D)
        if causal:
            s = s.masked_fill(torch.ones(Sq, Skv, device="cuda", dtype=torch.bool).triu(1), float("-inf"))
        lse_err = (lse - s.logsumexp(-1)).abs().max().item()
        assert lse_err < 2e-3, f"{what}: LSE off by {lse_err:.2e}"
        detail += f", LSE err {lse_err:.1e}"
    return detail


CHECKS = {name: check_attention for name in BUILDS}
