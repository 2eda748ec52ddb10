#!/usr/bin/env python3
"""Split-K against the data-parallel GEMM and cuBLAS where there are too few output tiles to fill
the GPU (M = 128, Llama-3.1-8B's MLP weights, bf16, B an ``nn.Linear`` weight), side by side in one
run: ``kernels/gemm.py`` with ``split_k`` = 1 (the persistent data-parallel schedule), 2, 4, 8.

CPU machine: ``.venv/bin/python benchmarks/gemm_split_k.py build`` writes ``.carry/gemm_splitk/``.
GPU machine: ``python3 benchmarks/gemm_split_k.py run [--json PATH]`` checks every artifact against
cuBLAS (fresh random data, C poisoned with NaN), then times each side from a CUDA graph in
interleaved rounds (median of the rounds' medians) and writes ``benchmarks/results/
gemm_split_k-<date>-<device>.json`` (rows: M, N, K, config, us, cublas_us, ratio = cuBLAS / axe, rel_err).
"""

import argparse
import glob
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from result_file import write_rows  # noqa: E402
OUT = os.path.join(ROOT, ".carry", "gemm_splitk")
M = 128
#: (name, N, K): Llama-3.1-8B down (16 tiles at M = 128) and up/gate (56 tiles)
SHAPES = [("llama8b_down", 4096, 14336), ("llama8b_up", 14336, 4096)]
SLICES = (1, 2, 4, 8)


def build():
    os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")
    from kernels import gemm
    for label, n, k in SHAPES:
        for s in SLICES:
            name = f"{label}_x{s}"
            art = gemm.build(M, n, k, "bfloat16", "col", name=f"gemm_splitk_{name}", split_k=s)
            art.save(os.path.join(OUT, name))
            print("built", name, art.launch["resources"], flush=True)


def run(path, rounds, eager=False):
    import torch

    import axe.runtime as rt
    from axe.torch.timing import capture, eager_ms, graph_ms, median, round_robin
    from gemm_decode import checked
    rows = []
    for label, n, k in SHAPES:
        a = torch.randn(M, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        ref = (a.float() @ w.float().t())
        graphs, errs, kernels = {}, {}, []
        for s in SLICES:
            # the kernel objects live as long as their graphs: a graph replays into the scratch
            # workspace and flags its kernel allocated, which the allocator would reuse once freed
            kern = rt.load(os.path.join(OUT, f"{label}_x{s}"))
            kernels.append(kern)
            errs[s], graphs[s] = checked(torch, kern, a, w, ref, f"{label} split_k={s}")
        graphs["cublas"] = lambda: torch.matmul(a, w.t())
        if eager:
            timers = {key: (lambda f=f: eager_ms(torch, f, 20)) for key, f in graphs.items()}
        else:
            graphs = {key: capture(torch, f)[0] for key, f in graphs.items()}
            timers = {key: (lambda g=g: graph_ms(torch, g, 20)) for key, g in graphs.items()}
        timed = round_robin(timers, rounds)
        us = {key: median(v) * 1e3 for key, v in timed.items()}
        for s in SLICES:
            rows.append({"M": M, "N": n, "K": k, "shape": label, "config": f"split_k={s}", "us": us[s],
                         "cublas_us": us["cublas"], "ratio": us["cublas"] / us[s], "rel_err": errs[s]})
            print(f"{label:14s} split_k={s}: {us[s]:7.1f} us  cuBLAS {us['cublas']:7.1f} us  "
                  f"ratio {us['cublas'] / us[s]:.2f}  err {errs[s]:.1e}", flush=True)
    path = write_rows(torch, "gemm_split_k", rows, f"{'eager launches' if eager else 'CUDA graph replays'}, median of "
                      f"{rounds} interleaved rounds", path)
    print("wrote", path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("build", "run"))
    ap.add_argument("--json", default=None)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--eager", action="store_true", help="time eager launches instead of CUDA graph replays")
    args = ap.parse_args(argv)
    if args.mode == "build":
        return build()
    if not glob.glob(os.path.join(OUT, "*", "launch.json")):
        raise SystemExit(f"no artifacts in {OUT}: run `benchmarks/gemm_split_k.py build` on the CPU machine")
    return run(args.json, args.rounds, args.eager)


if __name__ == "__main__":
    sys.exit(main())
