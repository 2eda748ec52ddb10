#!/usr/bin/env python3
"""Per-call time of decode GEMMs three ways (GPU, no TVM): a one-call CUDA graph replayed (the sweep's
timer), one graph holding 20 calls, and 20 eager calls back to back, each with programmatic launch on
and off (``AXE_PROGRAMMATIC_LAUNCH``), cuBLAS beside them: whether the time between launches, rather
than the kernel, separates axe from cuBLAS.  Reads the artifacts of ``benchmarks/gemm_decode.py build
--shapes Qwen3-8B_up Gemma-2-9B_down GPT-3-175B_down``; prints one line per side, way and setting.

Usage (GPU machine, in the tree that built them): ``python3 benchmarks/launch_gaps.py``.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import torch  # noqa: E402

import axe.runtime as rt  # noqa: E402
from axe.torch.timing import burst_ms, capture, graph_ms, median, round_robin  # noqa: E402

OUT = os.path.join(ROOT, ".carry", "gemm_decode")
CASES = [("Qwen3-8B_up", 12288, 4096, ["split_k1_stages8_tile_m16_tile_n128", "stages8_stream_k1_tile_m16_tile_n128"]),
         ("Gemma-2-9B_down", 3584, 14336, ["split_k4_stages8_tile_m16_tile_n128"]),
         ("GPT-3-175B_down", 12288, 49152, ["split_k1_stages8_tile_m16_tile_n128", "stages8_stream_k1_tile_m16_tile_n128"])]


def many(fn, n=20):
    def f():
        for _ in range(n):
            fn()
    return f


for label, n, k, cfgs in CASES:
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    a = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(1, n, device="cuda", dtype=torch.bfloat16)
    fns = {cf: (lambda kern: lambda: kern(a, w, c))(rt.load(os.path.join(OUT, f"{label}__{cf}"))) for cf in cfgs}
    fns["cublas"] = lambda: torch.matmul(a, w.t())
    res = {}
    for pdl in ("1", "0"):
        os.environ["AXE_PROGRAMMATIC_LAUNCH"] = pdl
        timers = {}
        for key, f in fns.items():
            if pdl == "0" and key == "cublas":
                continue
            g1 = capture(torch, f)[0]
            g20 = capture(torch, many(f))[0]
            timers[(key, pdl, "graph1")] = (lambda g=g1: graph_ms(torch, g, 20))
            timers[(key, pdl, "graph20")] = (lambda g=g20: graph_ms(torch, g, 10, inner=2) / 20)
            timers[(key, pdl, "eager20")] = (lambda f=f: burst_ms(torch, f, calls=20, blocks=5))
        for key, v in round_robin(timers, 5).items():
            res[key] = median(v) * 1e3
    for key, us in sorted(res.items()):
        print(f"{label:16s} {key[0]:40s} pdl={key[1]} {key[2]:8s} {us:8.1f} us", flush=True)
