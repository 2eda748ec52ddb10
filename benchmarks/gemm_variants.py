#!/usr/bin/env python3
"""Time variants of ``kernels/gemm.py`` (``make`` keyword sets) side by side on a few M = 8192 MLP
shapes, each checked against cuBLAS first.

CPU machine: ``.venv/bin/python benchmarks/gemm_variants.py --build [--variants NAME ...]`` writes
``.carry/gemm_var/<variant>__<N>x<K>_<dtype>/``.  GPU machine: ``python3 benchmarks/gemm_variants.py``
times every artifact found there (do_bench median, random data) and prints axe/cuBLAS per variant.
"""

import argparse
import glob
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

#: variant name -> make() keywords
VARIANTS = {
    "default": {},                                  # 4 stages, no wgmma group in flight, two 64x128 store chunks
    "sk": {"stream_k": True},                       # stream-K tail: the last whole wave and the partial one split evenly
    "w1": {"in_flight": 1},                         # one wgmma group in flight (holds two slots)
    "s3": {"stages": 3, "in_flight": 1, "epilogue": 256},   # the first default: 3 stages, one 64x256 store
    "e64": {"epilogue": 64},                        # four 64x64 store chunks through two buffers
    "c2": {"cluster": 2},                           # CTA pairs sharing B through TMA multicast
    "g8": {"group": 8},                             # rasterization bands of 8 / 32 block-rows
    "g32": {"group": 32},
    "c2g32": {"cluster": 2, "group": 32},
    "pp": {"schedule": "pingpong"},                 # consumers on their own 64x256 tiles, taking turns
}
#: (N, K): the shapes furthest from cuBLAS in the first benchmark, and one near it
SHAPES = [(4096, 14336), (14336, 3584), (12288, 4096)]
OUT = os.path.join(ROOT, ".carry", "gemm_var")


def build(names, dtype):
    os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")
    from gemm import M
    from kernels import gemm as kgemm
    for v in names:
        for n, k in SHAPES:
            name = f"{v}__{n}x{k}_{dtype}"
            art = kgemm.build(M, n, k, dtype=dtype, b_major="col", name="gemm_var", **VARIANTS[v])
            art.save(os.path.join(OUT, name))
            print("built", name, art.launch["resources"], flush=True)


def run():
    import torch

    import axe.runtime as rt
    sys.path.insert(0, os.path.join(ROOT, "tests", "gpu"))
    from cases_gemm import TOL
    from gemm import M, _bench, checked_run
    rows = []
    for path in sorted(glob.glob(os.path.join(OUT, "*", "launch.json"))):
        name = os.path.basename(os.path.dirname(path))
        v, rest = name.split("__")
        shape, dtype = rest.split("_")
        n, k = map(int, shape.split("x"))
        tdt = getattr(torch, dtype)
        kern = rt.load(os.path.dirname(path))
        a, w, c, ref, err, ok = checked_run(kern, n, k, tdt, TOL[dtype])
        t_axe = _bench(lambda: kern(a, w, c))
        t_cub = _bench(lambda: torch.matmul(a, w.t(), out=ref))
        tf = 2.0 * M * n * k / 1e9
        rows.append((v, n, k, tf / t_axe, tf / t_cub, ok, err))
        print(f"{v:12s} {n:6d}x{k:<6d} axe {tf / t_axe:6.0f} cuBLAS {tf / t_cub:6.0f} ratio {t_cub / t_axe:.3f}"
              f" {'ok' if ok else 'WRONG'} err {err:.1e}", flush=True)
        del a, w, c, ref
    return rows


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", action="store_true")
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS))
    ap.add_argument("--dtype", default="float16")
    args = ap.parse_args()
    build(args.variants, args.dtype) if args.build else run()
