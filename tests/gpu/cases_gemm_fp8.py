"""GPU cases for the block-scaled FP8 GEMM (``kernels/gemm_fp8.py``): both tile widths, ragged M
(not a multiple of 128, nor of 4: SA's rows are padded), an odd number of 128-column blocks (the
``bn = 256`` tile's last half lies past N), two k-blocks, a ragged last k-block, DeepSeek-V3
projection sizes, CTA pairs sharing B through TMA multicast (``cluster=2``, with an odd number of
block-rows), ``bn = 192`` (weight scales staged per 64 columns; a tile past N; odd k-blocks) and
stream-K (``stream_k=True`` on 132 CTAs, both tile widths: tiles filling 1.5 waves, all split, and
2.3 waves, one whole wave first; a tile's two pieces meet through the workspace and a flag, and
the three launches of a check reuse the flags, which each launch must leave zero).

Each check quantizes fresh random fp32 operands the way DeepSeek-V3 does (activations per row and
128 columns, weights per 128×128 block, scale = amax / 448; :mod:`kernels.fp8_blocks`), poisons C
with NaN, launches, and compares with the fp32 product of the *dequantized* operands — so
quantization error is not measured, only the kernel's arithmetic.

Tolerance, ‖C − ref‖ / ‖ref‖ < 1e-2, from the arithmetic: every product of two e4m3 values is
exact in fp32; the tensor cores sum a k-block's 128 products keeping at least 13 fraction bits
(DeepSeek-V3 report §3.3.2: about 14 on H800), so a k-block's sum is off by at most 128·2^-14 =
2^-7 of its magnitude in the worst case (random signs: about √128·2^-14 ≈ 7e-4); the promotion
and the sum over k-blocks are fp32 (2^-24 each); the bf16 output rounds to 2^-9 relative.  Worst
case 2^-7 + 2^-9 ≈ 9.8e-3; typical runs land near 2e-3, and a wrong scale, block or tile lands
near 1 (``run_check`` also checks that the same output is far from the reference with SB's
n-blocks reversed, so the comparison can tell scale blocks apart).
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: name -> (M, N, K, bn, cluster); the names in :data:`STREAM_K` are built with ``stream_k=True``
SHAPES = {
    "square": (1024, 1024, 1024, 128, 1),
    "square256": (1024, 1024, 1024, 256, 1),
    "ragged": (1000, 2112, 1536, 256, 1),     # M % 128 != 0, 17 column blocks: bn=256's last half skipped
    "ragged128": (777, 576, 1536, 128, 1),     # M % 4 != 0 (SA rows padded to 780)
    "k1": (256, 512, 128, 128, 1),             # one k-block: the shortest K built (SA's extent-1 dim, packed stride)
    "k2": (256, 512, 256, 128, 1),             # two k-blocks
    "kragged": (384, 768, 208, 256, 1),        # K % 128 != 0: the last k-block half zeros (TMA fill)
    "ds_o": (4096, 7168, 2048, 256, 1),        # DeepSeek-V3 attention output projection
    "ds_kv": (512, 576, 7168, 128, 1),         # DeepSeek-V3 kv down-projection (N = 576)
    # CTA pairs sharing B by TMA multicast: 7 block-rows (the last pair's second CTA past M), 8
    "c2_ragged128": (777, 576, 1536, 128, 2),
    "c2_ragged": (1000, 2112, 1536, 256, 2),
    "c2_ds_o": (4096, 7168, 2048, 256, 2),
    # bn=192: tiles start at multiples of 64, SB staged per 64-column group
    "b192_ragged": (1000, 2112, 1536, 192, 1),   # 11 tiles, odd ones start mid-block
    "b192_past_n": (777, 400, 1408, 192, 1),     # last tile 16 columns wide (groups past N clamp),
                                                 # 11 k-blocks: the staging parity alternates by tile
    "b192_ds": (4096, 2112, 7168, 192, 1),       # DeepSeek-V3 fused q_a + kv_a projection
    "c2_b192": (777, 2112, 1536, 192, 2),        # CTA pairs, 7 block-rows
    # stream-K on 132 CTAs: the last whole wave and the partial one split over all CTAs in k-blocks
    "sk_b128_w15": (1000, 3144, 1408, 128, 1),   # 8 x 25 = 200 tiles (1.52 waves, all split), 11 k-blocks
    "sk_b128_w23": (2000, 2392, 1008, 128, 1),   # 16 x 19 = 304 tiles (2.30 waves), K ragged: 8 k-blocks, the last 112 wide
    "sk_b256_w15": (1000, 6200, 1536, 256, 1),   # 8 x 25 = 200 tiles, 49 column blocks: the last tiles' second half past N
    "sk_b256_w23": (2047, 4760, 2048, 256, 1),   # 16 x 19 = 304 tiles, M % 4 != 0 (SA rows padded)
    "sk_k4": (1536, 2176, 512, 128, 1),          # 12 x 17 = 204 tiles of 4 k-blocks: the shortest K stream-K takes
    "sk_ds_o": (4096, 7168, 16384, 256, 1),      # DeepSeek-V3 o-projection: 896 tiles (6.8 waves), 128 k-blocks
}
STREAM_K = {s for s in SHAPES if s.startswith("sk_")}
TOL = 1e-2


def case_name(shape):
    return f"gemm_fp8_{shape}"


def _builder(shape):
    def build():
        sys.path.insert(0, ROOT)
        from kernels import gemm_fp8
        M, N, K, bn, cluster = SHAPES[shape]
        return gemm_fp8.build(M, N, K, bn, name=case_name(shape), cluster=cluster, stream_k=shape in STREAM_K)
    return build


BUILDS = {case_name(s): _builder(s) for s in SHAPES}


def operands(m, n, k, torch):
    """Fresh quantized operands ``(A, B, SA, SB)`` on the GPU: A's rows span 6 decades and B's
    rows 4 and columns 2, so every scale block differs from its neighbours."""
    sys.path.insert(0, ROOT)
    from kernels.fp8_blocks import quantize_blocks, quantize_rows
    x = torch.randn(m, k, device="cuda") * torch.logspace(-3, 3, m, device="cuda")[:, None]
    w = (torch.randn(n, k, device="cuda") * torch.logspace(-1, 1, k, device="cuda")[None, :]
         * torch.logspace(-2, 2, n, device="cuda")[:, None])
    A, SA = quantize_rows(x)
    B, SB = quantize_blocks(w)
    return A, B, SA, SB


def rel_err(c, ref):
    return ((c.float() - ref).norm() / ref.norm()).item()


def run_check(kernel, torch, runs=3):
    """Launch ``kernel`` on fresh quantized data ``runs`` times; returns a line with the worst
    relative error.
    Also checks that the comparison can fail: the same output is far from the reference with SB's
    n-blocks reversed (a wrong scale assignment would not pass)."""
    sys.path.insert(0, ROOT)
    from kernels.fp8_blocks import reference
    args = {a["name"]: a for a in kernel.launch["args"]}
    m, k = args["A_"]["shape"]
    n = args["C_"]["shape"][1]
    worst = 0.0
    for _ in range(runs):
        A, B, SA, SB = operands(m, n, k, torch)
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        kernel(A, B, SA, SB, c)
        torch.cuda.synchronize()
        unwritten = c.isnan().sum().item()
        assert unwritten == 0, f"{m}x{n}x{k}: {unwritten} outputs never written"
        ref = reference(A, B, SA, SB)["C"]
        err = rel_err(c, ref)
        worst = max(worst, err)
        assert err < TOL, f"{m}x{n}x{k}: relative error {err:.2e} > {TOL}"
        wrong = reference(A, B, SA, SB.flip(0).contiguous())["C"]
        if SB.shape[0] > 1:
            assert rel_err(c, wrong) > 10 * TOL, "the check cannot tell SB's blocks apart"
    return f"{m}x{n}x{k} e4m3 block-scaled, {runs} random runs, rel err {worst:.1e} vs fp32 dequantized"


CHECKS = {name: run_check for name in BUILDS}
