"""GPU cases for the block-scaled FP8 GEMM (``kernels/gemm_fp8.py``): both tile widths, ragged M
(not a multiple of 128, nor of 4: SA's rows are padded), an odd number of 128-column blocks (the
``bn = 256`` tile's last half lies past N), two k-blocks, a ragged last k-block, DeepSeek-V3
projection sizes, CTA pairs sharing B through TMA multicast (``cluster=2``, with an odd number of
block-rows), ``bn = 192`` (weight scales staged per 64 columns; a tile past N; odd k-blocks),
``bn = 64`` (the decode tile: two tiles per SB block), stream-K (``stream_k=True`` on 132 CTAs,
both tile widths: tiles filling 1.5 waves, all split, and 2.3 waves, one whole wave first; a tile's
two pieces meet through the workspace and a flag, and the three launches of a check reuse the
flags, which each launch must leave zero), split-K (:data:`SPLIT_K`: 2, 3, 4, 6 and 8 slices, tile
widths 64, 128 and 256, slices whose last one runs past K so SB's column is clamped, ragged M, N
and K) and a run-time M (:data:`DYNAMIC`: one artifact checked at several M — 1, a ragged count
inside the bucket, the bound — scheduled for a bucket bound with split-K, CTA pairs or stream-K,
or unbounded on the persistent grid, single CTAs or CTA pairs (``dyn_c2*``: odd block-row counts,
clusters without a tile); a bounded artifact must refuse bound + 1 rows), and the
transposed decode tile (:data:`TRANSPOSED` at static M 1, 7, 16, 33, 64 and ``dyn*_t*`` at run-time
M: ``tile_m`` 16, 32, 64, with split-K; the weights on the MMA's 128-row side, SA's row scales
along the accumulator's columns).

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
    # bn=64 (decode-sized M): a tile inside one SB block, odd tiles in a block's second half
    "b64_past_n": (777, 400, 1536, 64, 1),       # 7 tiles, the last 16 columns wide
    # stream-K on 132 CTAs: the last whole wave and the partial one split over all CTAs in k-blocks
    "sk_b128_w15": (1000, 3144, 1408, 128, 1),   # 8 x 25 = 200 tiles (1.52 waves, all split), 11 k-blocks
    "sk_b128_w23": (2000, 2392, 1008, 128, 1),   # 16 x 19 = 304 tiles (2.30 waves), K ragged: 8 k-blocks, the last 112 wide
    "sk_b256_w15": (1000, 6200, 1536, 256, 1),   # 8 x 25 = 200 tiles, 49 column blocks: the last tiles' second half past N
    "sk_b256_w23": (2047, 4760, 2048, 256, 1),   # 16 x 19 = 304 tiles, M % 4 != 0 (SA rows padded)
    "sk_k4": (1536, 2176, 512, 128, 1),          # 12 x 17 = 204 tiles of 4 k-blocks: the shortest K stream-K takes
    "sk_ds_o": (4096, 7168, 16384, 256, 1),      # DeepSeek-V3 o-projection: 896 tiles (6.8 waves), 128 k-blocks
}
STREAM_K = {s for s in SHAPES if s.startswith("sk_")}
#: split-K at static sizes: name -> (M, N, K, bn, split_k)
SPLIT_K = {
    "splitk2": (256, 1024, 2048, 128, 2),         # 16 k-blocks, slices of 8: every slice inside K
    "splitk3_past_k": (777, 576, 1408, 128, 3),   # 11 k-blocks, slices of 4: the last one runs a k-block past K
    "splitk4_b256": (300, 2112, 1936, 256, 4),    # K ragged (16 k-blocks, the last 16 wide), 17 column blocks
    "splitk6": (128, 1024, 6144, 128, 6),         # 48 k-blocks, slices of 8, 8 tiles x 6 = 48 units
    "splitk8_ds": (128, 7168, 16384, 128, 8),     # DeepSeek-V3 o-projection at decode: 56 x 8 = 448 units
    "splitk4_b64": (128, 2112, 7168, 64, 4),      # the 64-wide tile: 33 tiles x 4 slices of 14 k-blocks
}
#: a run-time M: name -> (N, K, make keywords, the row counts checked); ``max_rows`` bounds a bucket
DYNAMIC = {
    "dyn16_sk4": (4096, 14336, dict(bn=128, split_k=4, max_rows=16), (1, 7, 16)),
    "dyn64_b256_sk2": (2112, 1936, dict(bn=256, split_k=2, max_rows=64), (1, 33, 64)),
    "dyn128_sk3_past_k": (576, 7168, dict(bn=128, split_k=3, max_rows=128), (1, 65, 128)),
    "dyn128_plain": (7168, 2048, dict(bn=128, max_rows=128), (1, 100, 128)),
    "dyn16_b64": (4096, 14336, dict(bn=64, max_rows=16), (1, 9, 16)),
    "dyn128_b64_sk2": (576, 7168, dict(bn=64, split_k=2, max_rows=128), (1, 77, 128)),
    "dyn64_k1": (512, 128, dict(bn=128, max_rows=64), (1, 4, 64)),          # K = 128: SA's extent-1 dimension
    "dyn384_sk6": (1024, 6144, dict(bn=128, split_k=6, max_rows=384), (1, 250, 384)),
    "dyn512_c2": (2112, 1536, dict(bn=256, cluster=2, max_rows=512), (1, 257, 300, 512)),
    "dyn1024_stream_k": (3144, 1408, dict(bn=128, stream_k=True, max_rows=1024), (513, 1000, 1024)),
    "dyn_b192": (2112, 7168, dict(bn=192), (1, 100, 1000, 2049)),          # unbounded: grid min(132, tiles)
    "dyn_b256": (4096, 512, dict(bn=256), (1, 128, 4097)),
    # CTA pairs at an unbounded M (the large buckets' pick): 1, 1, 2, 3, 8 and 33 block-rows, so the
    # odd counts leave the last pair's second CTA past M; few pairs leave clusters without a tile
    # (1 block-row x 9 columns), 4097 rows give each cluster several; 17 column blocks (bn 256's last
    # half past N) and K = 7168 (56 k-blocks) on the 128-wide pair; Llama-3.1-8B's down projection
    # at the rule's pick in buckets 2048 and 4096
    "dyn_c2_b256": (2112, 1536, dict(bn=256, cluster=2), (1, 100, 129, 300, 1000, 4097)),
    "dyn_c2_b128": (576, 7168, dict(bn=128, cluster=2), (1, 100, 129, 300, 1000, 4097)),
    "dyn_c2_llama_down": (4096, 14336, dict(bn=256, cluster=2), (1025, 2047, 3001)),
    # the transposed decode tile at run-time M (bounded by tile_m)
    "dyn16_t16_llama_down": (4096, 14336, dict(tile_m=16, max_rows=16), (1, 7, 16)),
    "dyn16_t16_sk4": (4096, 14336, dict(tile_m=16, split_k=4, max_rows=16), (1, 7, 16)),
    "dyn64_t64_ds_sk2": (2112, 7168, dict(tile_m=64, split_k=2, max_rows=64), (1, 33, 64)),
    "dyn64_t64_k1": (576, 128, dict(tile_m=64, max_rows=64), (1, 5, 64)),
}
#: the transposed decode tile (Cᵀ = B·Aᵀ, 128 weight rows × tile_m rows of A) at static M ≤ tile_m:
#: name -> (M, N, K, make keywords); ragged N (not a multiple of 128: the last weight block past N)
#: and K (the last k-block part zeros), DeepSeek-V3's and Llama-3.1-8B's projections, split-K with a
#: slice past K
TRANSPOSED = {
    "t16_m1_llama_down": (1, 4096, 14336, dict(tile_m=16)),
    "t16_m7_ragged": (7, 400, 1936, dict(tile_m=16)),             # 4 weight blocks, the last 16 rows; 16 k-blocks, the last 16 deep
    "t16_m16_ds_sk4": (16, 2112, 7168, dict(tile_m=16, split_k=4)),
    "t32_m7_llama_up": (7, 14336, 4096, dict(tile_m=32)),
    "t64_m64_ds_o": (64, 7168, 2048, dict(tile_m=64)),
    "t64_m64_sk3_past_k": (64, 576, 1408, dict(tile_m=64, split_k=3)),   # 11 k-blocks in slices of 4
    "t64_m33_ds_kv": (33, 576, 7168, dict(tile_m=64, split_k=8)),        # M % 4 != 0: SA's rows padded
}
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


def _split_builder(shape):
    def build():
        sys.path.insert(0, ROOT)
        from kernels import gemm_fp8
        M, N, K, bn, split_k = SPLIT_K[shape]
        return gemm_fp8.build(M, N, K, bn, name=case_name(shape), split_k=split_k)
    return build


def _transposed_builder(shape):
    def build():
        sys.path.insert(0, ROOT)
        from kernels import gemm_fp8
        M, N, K, kw = TRANSPOSED[shape]
        return gemm_fp8.build(M, N, K, name=case_name(shape), **kw)
    return build


def _dynamic_builder(shape):
    def build():
        sys.path.insert(0, ROOT)
        from kernels import gemm_fp8
        N, K, kw, _ = DYNAMIC[shape]
        return gemm_fp8.build_dynamic(N, K, name=case_name(shape), **kw)
    return build


BUILDS = {**{case_name(s): _builder(s) for s in SHAPES}, **{case_name(s): _split_builder(s) for s in SPLIT_K},
          **{case_name(s): _dynamic_builder(s) for s in DYNAMIC},
          **{case_name(s): _transposed_builder(s) for s in TRANSPOSED}}


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


def check_at(kernel, torch, m, n, k, runs=3):
    """Launch ``kernel`` on fresh quantized m×n×k data ``runs`` times, C poisoned with NaN first;
    returns the worst relative error.  Also checks that the comparison can fail: the same output is
    far from the reference with SB's n-blocks reversed (a wrong scale assignment would not pass)."""
    sys.path.insert(0, ROOT)
    from kernels.fp8_blocks import reference
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
    return worst


def run_check(kernel, torch, runs=3):
    """:func:`check_at` at the artifact's static sizes; returns a line with the worst relative error."""
    args = {a["name"]: a for a in kernel.launch["args"]}
    m, k = args["A_"]["shape"]
    n = args["C_"]["shape"][1]
    worst = check_at(kernel, torch, m, n, k, runs)
    return f"{m}x{n}x{k} e4m3 block-scaled, {runs} random runs, rel err {worst:.1e} vs fp32 dequantized"


def dynamic_check(shape):
    """The check of a run-time-M artifact: :func:`check_at` at each of the case's row counts; a
    bounded artifact must refuse one row more than its bound (a ``LaunchError`` naming the bound)."""
    N, K, kw, ms = DYNAMIC[shape]

    def check(kernel, torch, runs=2):
        import axe.runtime as rt
        worst = max(check_at(kernel, torch, m, N, K, runs) for m in ms)
        bound = kw.get("max_rows")
        if bound is not None:
            A, B, SA, SB = operands(bound + 1, N, K, torch)
            c = torch.empty((bound + 1, N), device="cuda", dtype=torch.bfloat16)
            try:
                kernel(A, B, SA, SB, c)
            except rt.LaunchError as err:
                assert str(bound) in str(err), f"the refusal does not name the bound {bound}: {err}"
            else:
                raise AssertionError(f"{bound + 1} rows launched on an artifact scheduled for {bound}")
        return (f"run-time M in {ms} (bound {bound}) x{N}x{K} {kw}: {runs} random runs each, "
                f"rel err {worst:.1e} vs fp32 dequantized")
    return check


CHECKS = {**{case_name(s): run_check for s in list(SHAPES) + list(SPLIT_K) + list(TRANSPOSED)},
          **{case_name(s): dynamic_check(s) for s in DYNAMIC}}
