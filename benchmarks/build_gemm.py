#!/usr/bin/env python
"""Build the GEMM benchmark artifacts (run on the CPU machine): ``kernels/gemm.py`` at M = 8192
for the 16 MLP weight shapes of ``benchmarks/gemm.py``, fp16 and bf16, B column-major (an
``nn.Linear`` weight, N×K), into ``.carry/gemm_bench/<name>/``.

Usage: ``.venv/bin/python benchmarks/build_gemm.py [--out DIR] [--dtypes float16 bfloat16] [--cluster 2]
[--schedule pingpong] [--target sm_100a]`` (``--target sm_100a``: the Blackwell build — tcgen05, TMEM
accumulator — named ``..._sm100`` with 148 persistent CTAs, which ``benchmarks/gemm.py`` loads on a
B200; ``--cluster 2``: CTA pairs sharing B through TMA multicast, ``kernels/gemm.py``'s
``cluster=2``; ``--schedule pingpong``: its ping-pong consumer schedule).
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
    from gemm import BUILD_TARGETS, M, SHAPES, artifact_name
    from kernels import gemm as kgemm
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
    args = ap.parse_args(argv)
    total = 0
    for dtype in args.dtypes:
        for model, proj, n, k in SHAPES:
            name = artifact_name(dtype, n, k, args.target)
            if os.path.exists(os.path.join(args.out, name, "launch.json")):
                continue   # shapes repeat across models (4096x14336 ...)
            t = time.time()
            art = kgemm.build(M, n, k, dtype=dtype, b_major="col", name=name, cluster=args.cluster,
                               stages=args.stages, epilogue=args.epilogue, schedule=args.schedule,
                               in_flight=args.in_flight, target=args.target,
                               sms=args.sms or BUILD_TARGETS[args.target][1])
            art.save(os.path.join(args.out, name))
            total += len(art.cubin)
            r = art.launch["resources"]
            print(f"built {name:28s} {len(art.cubin):7d} B  regs {r.get('registers')} "
                  f"spills {r.get('spill_stores')}/{r.get('spill_loads')}  {time.time() - t:4.1f} s")
    print(f"artifacts in {args.out}; {total / 2**20:.1f} MiB of cubins")
    return 0


if __name__ == "__main__":
    sys.exit(main())
