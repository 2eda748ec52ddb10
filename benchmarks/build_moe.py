#!/usr/bin/env python
"""Build the MoE benchmark artifacts (run on the CPU machine): every kernel of ``kernels/moe.py``
(:func:`kernels.moe.builds`: route, align, permute, both grouped GEMMs in both tile
configurations, combine; bf16 and fp16; one artifact for every T) into ``.carry/moe/<name>/``.

Usage: ``.venv/bin/python benchmarks/build_moe.py [--out DIR] [--dtypes bfloat16 float16]``.
"""

import argparse
import os
import shutil
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, ".carry", "moe"))
    ap.add_argument("--dtypes", nargs="*", default=["bfloat16", "float16"])
    args = ap.parse_args(argv)
    import axe.lang as Ax
    from kernels import moe
    failed = 0
    for name, kernel in moe.builds(tuple(args.dtypes)).items():
        t = time.time()
        try:
            art = Ax.compile_kernel(kernel, "sm_90a")
        except Exception as err:       # one failed build is reported; the rest still build
            failed += 1
            print(f"FAIL {name}: {type(err).__name__}: {str(err).splitlines()[0]}")
            continue
        dest = os.path.join(args.out, name)
        shutil.rmtree(dest, ignore_errors=True)
        art.save(dest)
        print(f"ok   {name} ({time.time() - t:.1f} s, {art.launch['resources']})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
