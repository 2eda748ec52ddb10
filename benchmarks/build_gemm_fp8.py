#!/usr/bin/env python
"""Build the FP8 GEMM benchmark's artifacts (run on the CPU machine): ``kernels/gemm_fp8.py`` for
every shape of ``benchmarks/gemm_fp8.py`` (16 MLP shapes at M = 8192, DeepSeek-V3's six at
M = 4096), tile widths 128 and 256, alone and in CTA pairs (``cluster=2``), and 192 and stream-K
(``stream_k=True``) where ``gemm_fp8.built_for`` says, into ``.carry/gemm_fp8/<name>/``; with ``--wheel``, also
DeepGEMM's wheel (``sgl-deep-gemm``, ``pip download``: a py3-none manylinux wheel built for CUDA
13 and torch) into ``.carry/gemm_fp8/wheels/``, so one carry path holds everything.

Usage: ``.venv/bin/python benchmarks/build_gemm_fp8.py [--out DIR] [--only mlp|deepseek] [--bns 128 256] [--clusters 1 2] [--variants NAME ...] [--groups G ...] [--shapes NxK ...] [--wheel]``.
"""

import argparse
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")

WHEEL = "sgl-deep-gemm"


def main(argv=None):
    from build_gemm import save_built
    from gemm_fp8 import VARIANTS, artifact_name, built_for, shapes, variant_name, with_groups
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, ".carry", "gemm_fp8"))
    ap.add_argument("--only", choices=("mlp", "deepseek"), default=None)
    ap.add_argument("--bns", nargs="*", type=int, default=sorted({v[0] for v in VARIANTS}))
    ap.add_argument("--clusters", nargs="*", type=int, default=sorted({v[1] for v in VARIANTS}))
    names = [variant_name(*v) for v in VARIANTS]
    ap.add_argument("--variants", nargs="*", default=names, choices=names, help="variants to build (e.g. bn256_sk)")
    ap.add_argument("--groups", nargs="*", type=int, default=[None],
                    help="raster bands (block-rows) to build each variant with (default: the kernel's)")
    ap.add_argument("--shapes", nargs="*", default=None, metavar="NxK", help="only these weight shapes")
    ap.add_argument("--wheel", action="store_true", help=f"also download {WHEEL}'s wheel into OUT/wheels")
    args = ap.parse_args(argv)
    from kernels import gemm_fp8
    total, failed = 0, []
    for kind, model, proj, m, n, k in shapes():
        if args.only not in (None, kind) or (args.shapes and f"{n}x{k}" not in args.shapes):
            continue
        for bn, cluster, stream_k, group in with_groups(VARIANTS, args.groups):
            if (bn not in args.bns or cluster not in args.clusters or not built_for(m, n, bn, cluster, stream_k)
                    or variant_name(bn, cluster, stream_k) not in args.variants):
                continue
            name = artifact_name(m, n, k, bn, cluster, stream_k, group)
            kw = {} if group is None else {"group": group}
            try:
                total += save_built(args.out, name, lambda: gemm_fp8.build(m, n, k, bn, name=name, cluster=cluster,
                                                                           stream_k=stream_k, **kw))
            except Exception as err:  # noqa: BLE001 - report every shape that does not build
                failed.append(f"{name}: {type(err).__name__}: {err}")
                print(f"FAILED {name}: {err}", flush=True)
    if args.wheel:
        dest = os.path.join(args.out, "wheels")
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
                        "3.12", "--platform", "manylinux2014_x86_64", "-d", dest, WHEEL], check=True)
    print(f"artifacts in {args.out}; {total / 2**20:.1f} MiB of new cubins; {len(failed)} failed")
    for f in failed:
        print("  " + f)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
