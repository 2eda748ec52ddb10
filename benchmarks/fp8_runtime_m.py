#!/usr/bin/env python3
"""The FP8 GEMM at M = 8192 (GPU, no TVM): every artifact built for a shape — the static 256-wide
CTA pair and the run-time-M ones (what ``torch.ops.axe.gemm_fp8`` runs in the large buckets: 256 or
128 wide, single CTAs or pairs) — beside cuBLAS's blockwise
``_scaled_mm``, in one process: each checked against fp32 of the dequantized operands, then timed
from CUDA graphs in interleaved rounds; prints one line per shape.

Artifacts: ``.carry/gemm_fp8/gemm_fp8_8192xNxK_bn256_c2`` (``build_gemm_fp8.py --variants bn256_c2``) and
``.carry/gemm_fp8/gemm_fp8_dyn_NxK_<variant>`` (``gemm_fp8.make_dynamic(N, K, ...)`` saved with
``build_gemm.save_built``).  Usage: ``python3 benchmarks/fp8_runtime_m.py [NxK ...]``.
"""
import glob
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
for n, k in [(53248, 16384), (49152, 12288), (3584, 14336), (28672, 8192)]:
    if only and f"{n}x{k}" not in only:
        continue
    A, SA = quantize_rows(torch.randn(M, k, device="cuda"))
    W, SB = quantize_blocks(torch.randn(n, k, device="cuda"))
    ref = reference(A, W, SA, SB)["C"]
    C = torch.empty(M, n, device="cuda", dtype=torch.bfloat16)
    names = sorted(glob.glob(os.path.join(ART, f"gemm_fp8_{M}x{n}x{k}_bn256_c2")) +
                   glob.glob(os.path.join(ART, f"gemm_fp8_dyn_{n}x{k}_*")))
    if not names:
        continue
    fns = {os.path.basename(p).replace(f"_{n}x{k}", ""): (lambda kern: lambda: kern(A, W, SA, SB, C))(rt.load(p))
           for p in names}
    _, fns["cublas"] = Cublas().call(A, W, SA, SB)
    for key, f in fns.items():
        C.fill_(float("nan"))
        out = f()
        torch.cuda.synchronize()
        print(n, k, key, "rel err %.2e" % rel_err(out if key == "cublas" else C, ref), flush=True)
    graphs = {key: capture(torch, f)[0] for key, f in fns.items()}
    timers = {key: (lambda g=g: graph_ms(torch, g, 5, inner=3)) for key, g in graphs.items()}
    t = {key: median(v) for key, v in round_robin(timers, 5).items()}
    for key, v in t.items():
        print(f"{n}x{k} M={M}: {key:36s} {v:7.3f} ms  cuBLAS/this {t['cublas'] / v:.3f}", flush=True)
    del graphs, A, W, SA, SB, ref, C
    torch.cuda.empty_cache()
