#!/usr/bin/env python
"""Build the GEMM benchmark artifacts (run on the CPU machine): ``kernels/gemm.py`` at M = 8192
for the 16 MLP weight shapes of ``benchmarks/gemm.py``, fp16 and bf16, B column-major (an
``nn.Linear`` weight, N×K), into ``.carry/gemm_bench/<name>/``.

Usage: ``.venv/bin/python benchmarks/build_gemm.py [--out DIR] [--dtypes float16 bfloat16] [--cluster 2]
[--schedule pingpong] [--target sm_100a] [--dynamic]`` (``--target sm_100a``: the Blackwell build — tcgen05, TMEM
accumulator — named ``..._sm100`` with 148 persistent CTAs, which ``benchmarks/gemm.py`` loads on a
B200; ``--cluster 2``: CTA pairs sharing B through TMA multicast, ``kernels/gemm.py``'s
``cluster=2``; ``--schedule pingpong``: its ping-pong consumer schedule; ``--dynamic``: also the
dynamic-M build of each shape, ``kernels/gemm.py:make_dynamic`` (one artifact for every M, named
``..._dyn``), which ``benchmarks/gemm.py --dynamic`` times beside the static one).
"""

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")


def main(argv=None):
    from gemm import BUILD_TARGETS, artifact_name
    from mlp_gemm import SHAPES
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, ".carry", "gemm_bench"))
    ap.add_argument("--dtypes", nargs="*", default=["float16", "bfloat16"])
    ap.add_argument("--cluster", type=int, default=1)
    ap.add_argument("--epilogue", type=int, default=None, help="columns per epilogue store chunk (default: the kernel's)")
    ap.add_argument("--in-flight", type=int, default=None, help="wgmma groups left in flight (default: the kernel's)")
    ap.add_argument("--schedule", default="cooperative", choices=("cooperative", "pingpong"))
    ap.add_argument("--stages", type=int, default=None)
    ap.add_argument("--target", choices=sorted(BUILD_TARGETS), default="sm_90a")
    ap.add_argument("--sms", type=int, default=None, help="persistent CTAs (default: the target's GPU's SM count)")
    ap.add_argument("--dynamic", action="store_true", help="also build each shape's dynamic-M artifact (..._dyn)")
    args = ap.parse_args(argv)
    kw = dict(b_major="col", cluster=args.cluster, stages=args.stages, epilogue=args.epilogue, schedule=args.schedule,
              in_flight=args.in_flight, target=args.target, sms=args.sms or BUILD_TARGETS[args.target][1])
    total = 0
    for dtype in args.dtypes:
        for model, proj, n, k in SHAPES:
            for dyn in (False, True) if args.dynamic else (False,):
                total += build_one(args.out, artifact_name(dtype, n, k, args.target, dyn), n, k, dtype, dyn, kw)
    print(f"artifacts in {args.out}; {total / 2**20:.1f} MiB of cubins")
    return 0


def build_one(out, name, n, k, dtype, dynamic, kw):
    """Build and save one artifact (static M = 8192, or ``dynamic``: any M) unless ``out/name``
    holds it already (shapes repeat across models: 4096x14336 ...); returns its cubin's bytes."""
    from gemm import M
    from kernels import gemm as kgemm
    return save_built(out, name, lambda: kgemm.build_dynamic(n, k, dtype=dtype, name=name, **kw) if dynamic else
                      kgemm.build(M, n, k, dtype=dtype, name=name, **kw))


def save_built(out, name, build):
    """``build()`` an artifact and save it as ``out/name`` unless that holds one already; prints one
    line (cubin bytes, registers, spills, seconds) and returns the cubin's bytes (0: it existed)."""
    if os.path.exists(os.path.join(out, name, "launch.json")):
        return 0
    t = time.time()
    art = build()
    art.save(os.path.join(out, name))
    r = art.launch["resources"]
    print(f"built {name:36s} {len(art.cubin):7d} B  regs {r.get('registers')} "
          f"spills {r.get('spill_stores')}/{r.get('spill_loads')}  {time.time() - t:4.1f} s", flush=True)
    return len(art.cubin)


if __name__ == "__main__":
    sys.exit(main())
