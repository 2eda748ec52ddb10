#!/usr/bin/env python
"""Build every GPU test kernel into ``.carry/artifacts/<name>/`` (run on the CPU machine).

Collects ``BUILDS`` from every ``tests/gpu/cases_*.py`` (see ``tests/gpu/cases_runtime.py``),
builds each artifact with TVM + nvcc and saves it.  ``.carry/`` is git-ignored and travels to
the GPU machine when named in the device tool's ``carry``; ``tests/gpu/run_all.py`` runs them
there.  Usage: ``.venv/bin/python scripts/gpu_build.py [--out DIR] [--only NAME ...] [--match REGEX]``.
"""

import argparse
import glob
import importlib.util
import os
import shutil
import sys
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")


def load_cases():
    """Import every tests/gpu/cases_*.py; returns [(module name, module)]."""
    mods = []
    for path in sorted(glob.glob(os.path.join(ROOT, "tests", "gpu", "cases_*.py"))):
        name = os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        mods.append((name, mod))
    return mods


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, ".carry", "artifacts"))
    ap.add_argument("--only", nargs="*", help="artifact names to build (default: all)")
    ap.add_argument("--match", default=None, metavar="REGEX",
                    help="build the artifacts whose names match REGEX (re.match), e.g. 'moe_|gemm_fp8_|.*_timeout$'")
    args = ap.parse_args(argv)
    cases = load_cases()
    if args.match:
        import re
        names = [n for _, mod in cases for n in getattr(mod, "BUILDS", {})]
        args.only = [n for n in names if re.match(args.match, n)] + (args.only or [])
        if not args.only:
            ap.error(f"--match {args.match!r}: no artifact name matches")
    if not args.only and os.path.isdir(args.out):
        shutil.rmtree(args.out)  # no stale artifacts from removed cases
    os.makedirs(args.out, exist_ok=True)
    from axe.progress import Progress
    jobs = [(case_name, name, builder) for case_name, mod in cases
            for name, builder in getattr(mod, "BUILDS", {}).items() if not args.only or name in args.only]
    with Progress(len(jobs), "build", stream=sys.stdout) as p:
        for case_name, name, builder in jobs:
            try:
                with p.step(f"{name:24s} ({case_name})"):
                    art = builder()
                    art.save(os.path.join(args.out, name))
                p.note(f"  {name}: {len(art.cubin)} B cubin")
            except Exception:  # noqa: BLE001 - report every failing case, then fail
                p.note(f"FAILED {name} ({case_name}):\n{traceback.format_exc()}")
    print(f"artifacts in {args.out}; {p.failed} failed")
    return 1 if p.failed else 0


if __name__ == "__main__":
    sys.exit(main())
