"""What the GEMM benchmarks share (torch- and TVM-free at import): the MLP weight shapes of eight
models and the autotuned Triton matmul they are compared with."""

MODELS = {   # hidden, intermediate
    "Qwen3-8B": (4096, 12288), "Qwen3-32B": (5120, 25600), "Llama-3.1-8B": (4096, 14336),
    "Llama-3.1-70B": (8192, 28672), "Llama-3.1-405B": (16384, 53248), "Gemma-2-9B": (3584, 14336),
    "Gemma-2-27B": (4608, 36864), "GPT-3-175B": (12288, 49152),
}
#: (model, projection, N, K)
SHAPES = [(m, p, n, k) for m, (h, i) in MODELS.items() for p, n, k in (("up", i, h), ("down", h, i))]


def triton_matmul(few=False):
    """A standard autotuned Triton matmul ``C = A·Bᵀ`` (B given N×K), fp32 accumulation.  ``few``:
    three configurations (two wide tiles and a 64-row one) and M not specialized, so that a sweep
    over M compiles each configuration once per (N, K)."""
    import triton
    import triton.language as tl

    configs = [
        triton.Config({"BM": 128, "BN": 256, "BK": 64, "G": 8}, num_stages=3, num_warps=8),
        triton.Config({"BM": 256, "BN": 128, "BK": 64, "G": 8}, num_stages=3, num_warps=8),
        triton.Config({"BM": 128, "BN": 128, "BK": 64, "G": 8}, num_stages=4, num_warps=4),
        triton.Config({"BM": 128, "BN": 256, "BK": 32, "G": 8}, num_stages=4, num_warps=8),
        triton.Config({"BM": 128, "BN": 128, "BK": 64, "G": 8}, num_stages=5, num_warps=8),
        triton.Config({"BM": 64, "BN": 256, "BK": 64, "G": 8}, num_stages=4, num_warps=4),
    ]

    if few:
        configs = [configs[0], configs[2], triton.Config({"BM": 64, "BN": 128, "BK": 64, "G": 8}, num_stages=5,
                                                         num_warps=4)]

    @triton.autotune(configs=configs, key=["M", "N", "K"])
    @triton.jit(do_not_specialize=["M"] if few else ())
    def kernel(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, G: tl.constexpr):
        pid = tl.program_id(0)
        n_m, n_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
        group = pid // (G * n_n)
        first = group * G
        rows = min(n_m - first, G)
        pm = first + (pid % (G * n_n)) % rows
        pn = (pid % (G * n_n)) // rows
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        pa = a + rm[:, None] * K + rk[None, :]
        pb = b + rn[None, :] * K + rk[:, None]
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, tl.cdiv(K, BK)):
            ka = rk + k0 * BK
            x = tl.load(pa, mask=(rm[:, None] < M) & (ka[None, :] < K), other=0.0)
            y = tl.load(pb, mask=(rn[None, :] < N) & (ka[:, None] < K), other=0.0)
            acc = tl.dot(x, y, acc)
            pa += BK
            pb += BK
        pc = c + rm[:, None] * N + rn[None, :]
        tl.store(pc, acc.to(c.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))

    def run(a, b, c):
        m, k = a.shape
        n = b.shape[0]
        kernel[lambda meta: (triton.cdiv(m, meta["BM"]) * triton.cdiv(n, meta["BN"]),)](a, b, c, m, n, k)
        return c

    return run
