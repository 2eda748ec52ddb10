"""GPU cases for the gemm schedules: one tile per kernel, checked against torch in fp32.

``wgmma_ss_bk``: 64×128×64, A and B K-major (B given as its transpose), 128-byte swizzle, TMA
loads; ``wgmma_ss_bmn``: 64×128×128, B MN-major (N contiguous), two swizzle atoms along K of A
and along N of B; ``wgmma_rs_bk``: A through ldmatrix into the register A fragment;
``wgmma_ss_sw32_bk`` / ``_sw64_bmn``: 32- and 64-byte swizzles (several atoms along K, resp. N:
LBO of MN-major); ``_sw0_bk`` / ``_sw0_bmn``: unswizzled core matrices (vector copies, proxy
fence); ``wgmma_ss_bf16_bk``: bf16, N=256; ``mma_sync_tile``: one warp, 16×8×16 through ldmatrix and mma.sync.  Fresh random inputs,
outputs poisoned with NaN before every launch.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def _builder(factory, **kw):
    def build():
        sys.path.insert(0, ROOT)
        sys.path.insert(0, HERE)
        import _kernels_gemm_ops as G

        import axe.lang as Ax
        return Ax.compile_kernel(getattr(G, factory)(**kw), "sm_90a")
    return build


BUILDS = {
    "wgmma_ss_bk": _builder("wgmma_tile", b_major="K", K=64, N=128),
    "wgmma_ss_bmn": _builder("wgmma_tile", b_major="MN", K=128, N=128),
    "wgmma_rs_bk": _builder("wgmma_tile", b_major="K", K=64, N=128, a_regs=True),
    "wgmma_ss_sw32_bk": _builder("wgmma_tile", b_major="K", K=64, N=64, sw=32, name="wgmma_ss_sw32_bk"),
    "wgmma_ss_sw64_bmn": _builder("wgmma_tile", b_major="MN", K=64, N=128, sw=64, name="wgmma_ss_sw64_bmn"),
    "wgmma_ss_sw0_bk": _builder("wgmma_tile", b_major="K", K=32, N=64, sw=0, name="wgmma_ss_sw0_bk"),
    "wgmma_ss_sw0_bmn": _builder("wgmma_tile", b_major="MN", K=32, N=64, sw=0, name="wgmma_ss_sw0_bmn"),
    "wgmma_ss_bf16_bk": _builder("wgmma_tile", b_major="K", K=64, N=256, dtype="bfloat16", name="wgmma_ss_bf16_bk"),
    "mma_sync_tile": _builder("mma_tile"),
}


def _shapes(kernel):
    return {a["name"]: (tuple(a["shape"]), a["dtype"]) for a in kernel.launch["args"] if "shape" in a}


def _check_tile(kernel, torch, b_transposed):
    sh = _shapes(kernel)
    ((m, k), dt), (bshape, _), ((_, n), _) = sh["A_"], sh["B_"], sh["C_"]
    dtype = getattr(torch, dt)
    worst = 0.0
    for _ in range(3):
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        b = torch.randn(*bshape, device="cuda", dtype=dtype)
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
        kernel(a, b, c)
        torch.cuda.synchronize()
        assert not c.isnan().any(), f"{c.isnan().sum().item()} of {m * n} outputs never written"
        ref = a.float() @ (b.float().t() if b_transposed else b.float())
        err = ((c - ref).abs().max() / ref.abs().max()).item()
        worst = max(worst, err)
        assert err < 1e-4, f"{m}x{n}x{k}: max error {err:.2e} of max |ref|; first bad {((c - ref).abs() > 1e-2).nonzero()[:4].tolist()}"
    return f"{m}x{n}x{k} {dt}→fp32, 3 random runs, max err {worst:.1e} of max|ref|"


def check_bk(kernel, torch):
    return _check_tile(kernel, torch, b_transposed=True)


def check_bmn(kernel, torch):
    return _check_tile(kernel, torch, b_transposed=False)


CHECKS = {
    "wgmma_ss_bk": check_bk,
    "wgmma_ss_bmn": check_bmn,
    "wgmma_rs_bk": check_bk,
    "wgmma_ss_sw32_bk": check_bk,
    "wgmma_ss_sw64_bmn": check_bmn,
    "wgmma_ss_sw0_bk": check_bk,
    "wgmma_ss_sw0_bmn": check_bmn,
    "wgmma_ss_bf16_bk": check_bk,
    "mma_sync_tile": check_bmn,
}
