#!/usr/bin/env python3
"""Does compute-sanitizer's initcheck count a TMA store as a write?  A fresh cudaMalloc'd buffer is
written only by an axe kernel whose stores are TMA stores (the fused gate/up GEMM's 2048-row tile),
then read by torch (a sum).  Under initcheck, a report in torch's reduction = TMA writes are not
tracked (so reads of TMA-written memory are false positives); none = they are."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

import axe.runtime as rt  # noqa: E402

k = rt.load(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".carry", "artifacts",
                         "serving_gemm_silu_mul_28672x4096_m2048_default"))
N, K, M = 28672, 4096, 256
x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) * 0.03
torch.cuda.synchronize()
# a size no earlier allocation had, so the caching allocator takes a fresh cudaMalloc
y = torch.empty(M + 7777, N // 2, device="cuda", dtype=torch.bfloat16)[:M]
k(x, w, y)
torch.cuda.synchronize()
print("sum of the TMA-written output:", float(y.float().sum()), flush=True)
