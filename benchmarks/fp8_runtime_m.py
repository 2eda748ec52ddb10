#!/usr/bin/env python3
"""The FP8 GEMM at M = 8192 (GPU, no TVM): the static 256-wide CTA-pair artifact against the
run-time-M one (what ``torch.ops.axe.gemm_fp8`` runs in the large buckets) and cuBLAS's blockwise
``_scaled_mm``, in one process: each checked against fp32 of the dequantized operands, then timed
from CUDA graphs in interleaved rounds; prints one line per shape.

Artifacts: ``.carry/gemm_fp8/gemm_fp8_8192xNxK_bn256_c2`` (``build_gemm_fp8.py --variants bn256_c2``) and
``.carry/gemm_fp8/gemm_fp8_dyn_NxK_bn256_c2`` (``gemm_fp8.make_dynamic(N, K, 256, cluster=2, stages=4)``,
saved with ``build_gemm.save_built``).  Usage: ``python3 benchmarks/fp8_runtime_m.py [NxK ...]``.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import torch  # noqa: E402

import axe.runtime as rt  # noqa: E402
from axe.torch.timing import capture, graph_ms, median, round_robin  # noqa: E402
from gemm_fp8 import Cublas, rel_err  # noqa: E402
from kernels.fp8_blocks import quantize_blocks, quantize_rows, reference  # noqa: E402

only = sys.argv[1:]
M = 8192
ART = os.path.join(ROOT, ".carry", "gemm_fp8")
for n, k in [(53248, 16384), (49152, 12288), (3584, 14336)]:
    if only and f"{n}x{k}" not in only:
        continue
    A, SA = quantize_rows(torch.randn(M, k, device="cuda"))
    W, SB = quantize_blocks(torch.randn(n, k, device="cuda"))
    ref = reference(A, W, SA, SB)["C"]
    C = torch.empty(M, n, device="cuda", dtype=torch.bfloat16)
    st = rt.load(os.path.join(ART, f"gemm_fp8_{M}x{n}x{k}_bn256_c2"))
    dy = rt.load(os.path.join(ART, f"gemm_fp8_dyn_{n}x{k}_bn256_c2"))
    _, cub = Cublas().call(A, W, SA, SB)
    fns = {"static": lambda: st(A, W, SA, SB, C), "dynamic": lambda: dy(A, W, SA, SB, C), "cublas": cub}
    for key, f in fns.items():
        C.fill_(float("nan"))
        out = f()
        torch.cuda.synchronize()
        print(n, k, key, "rel err %.2e" % rel_err(out if key == "cublas" else C, ref), flush=True)
    graphs = {key: capture(torch, f)[0] for key, f in fns.items()}
    timers = {key: (lambda g=g: graph_ms(torch, g, 5, inner=3)) for key, g in graphs.items()}
    t = {key: median(v) for key, v in round_robin(timers, 5).items()}
    print(f"{n}x{k} M={M}: " + "  ".join(f"{key} {v:.3f} ms" for key, v in t.items())
          + f"  cublas/static {t['cublas']/t['static']:.3f} cublas/dynamic {t['cublas']/t['dynamic']:.3f}", flush=True)
    del graphs, A, W, SA, SB, ref, C
    torch.cuda.empty_cache()
