#!/usr/bin/env python
"""Build the MoE benchmark artifacts (run on the CPU machine): every kernel of ``kernels/moe.py``
(:func:`kernels.moe.builds`: route, align, permute, both grouped GEMMs in both tile
configurations, combine; bf16 and fp16; one artifact for every T) into ``.carry/moe/<name>/``.

Usage: ``.venv/bin/python benchmarks/build_moe.py [--out DIR] [--dtypes bfloat16 float16]
[--experiments] [--variant CFG:KEY=VAL,...]``.
"""

import argparse
import os
import shutil
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")


#: the questions the stage timings left open (benchmarks/results/moe-stages-*), answered on an
#: H200: 256-byte runs of each weight row (bk=128) help the 64-row tiles at every T (now their
#: default); L2 promotion of the operands does not help (moe-stages-2026-11-23b-h200.json), two
#: CTAs per SM do not (moe-stages-exp-2026-11-23-h200.json), GEMM 2 issuing its first weight
#: loads before it waits for GEMM 1 does not measurably (moe-stages-2026-11-23d-h200.json), nor
#: does GEMM 1 prefetching its guess of its first weights into L2 during the routing
#: (moe-stages-2026-11-23e-h200.json); the last two were removed again.  Built for re-measuring:
EXPERIMENTS = ("small_gather:ctas_per_sm=2,stages=3",)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, ".carry", "moe"))
    ap.add_argument("--dtypes", nargs="*", default=["bfloat16", "float16"])
    ap.add_argument("--wheels", default=os.path.join(ROOT, ".whl"), help="folder holding sglang-*.whl")
    ap.add_argument("--skip-kernels", action="store_true", help="only extract SGLang's files")
    ap.add_argument("--variant", action="append", default=[], metavar="CFG[:KEY=VAL,...]",
                    help="also build both grouped GEMMs of configuration CFG with these keyword changes, "
                         "named moe_gemm{1,2}_DTYPE_CFG_KEYVAL... (timed side by side by benchmarks/moe_stages.py)")
    ap.add_argument("--experiments", action="store_true",
                    help=f"also build the grouped-GEMM variants of EXPERIMENTS ({', '.join(EXPERIMENTS)})")
    args = ap.parse_args(argv)
    if args.experiments:
        args.variant += [v for v in EXPERIMENTS if v not in args.variant]
    failed = extract_sglang(args.wheels, os.path.join(args.out, "sglang"))
    return 1 if failed or (not args.skip_kernels and build_kernels(args)) else 0


def extract_sglang(wheels, dest):
    """SGLang's peer files from the one ``sglang-*.whl`` in ``wheels`` into ``dest``, its CUDA align
    built there; 1 if that fails."""
    from benchmarks import moe, moe_sglang
    try:
        wheel = moe.find_wheel(wheels, "sglang")
        shutil.rmtree(dest, ignore_errors=True)
        moe_sglang.extract(wheel, dest)
        t = time.time()
        moe_sglang.build_align(dest, os.path.join(os.environ["CUDA_PATH"], "bin", "nvcc"))
    except (OSError, ValueError, RuntimeError) as err:
        print(f"FAIL sglang peer files: {type(err).__name__}: {err}")
        return 1
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(dest) for f in fs)
    print(f"ok   sglang peer files from {os.path.basename(wheel)} and its CUDA align built ({time.time() - t:.0f} s) "
          f"({size / 2 ** 20:.1f} MiB) in {dest}")
    return 0


def build_kernels(args):
    """Every MoE kernel into ``args.out``; the number that failed to build."""
    import axe.lang as Ax
    from kernels import moe
    failed = 0
    kernels = {name: (kernel, 0) for name, kernel in moe.builds(tuple(args.dtypes)).items()}
    for spec in args.variant:
        kernels.update(variant_builds(spec, tuple(args.dtypes)))
    for name, (kernel, l2p) in kernels.items():
        t = time.time()
        try:
            art = with_l2_promotion(Ax.compile_kernel(kernel, "sm_90a"), l2p)
        except Exception as err:       # one failed build is reported; the rest still build
            failed += 1
            print(f"FAIL {name}: {type(err).__name__}: {str(err).splitlines()[0]}")
            continue
        dest = os.path.join(args.out, name)
        shutil.rmtree(dest, ignore_errors=True)
        art.save(dest)
        print(f"ok   {name} ({time.time() - t:.1f} s, {art.launch['resources']})")
    return failed


def variant_builds(spec, dtypes):
    """``{name: (kernel, l2p)}`` for ``spec`` = ``CFG:key=val,...`` (values are ints): configuration CFG of
    :data:`kernels.moe_host.CONFIGS` with the keywords of :func:`kernels.moe.make_grouped_gemm`
    changed, both grouped GEMMs, every dtype.  ``l2p=64|128|256`` is not a kernel keyword: it sets
    the L2 promotion of the operand tensor maps (``A_map``, ``B_map``) in the artifact's
    ``launch.json``, which the runtime encodes (see :func:`with_l2_promotion`)."""
    from kernels import moe
    from kernels.moe_host import CONFIGS, gemm_keywords
    cfg, _, rest = spec.partition(":")
    if cfg not in CONFIGS:
        raise SystemExit(f"--variant {spec!r}: configuration must be one of {sorted(CONFIGS)}")
    changes = dict(kv.split("=") for kv in rest.split(",") if kv)
    if "pad" in changes:        # the layer's align artifact pads for its configuration
        raise SystemExit(f"--variant {spec!r}: pad changes the permutation; add a configuration to "
                         "kernels/moe_host.py CONFIGS instead")
    tag = "_".join([cfg] + [f"{k}{v}" for k, v in changes.items()])
    l2p = int(changes.pop("l2p", 0))
    kw1, kw2 = (dict(kw, **{k: int(v) for k, v in changes.items()}) for kw in gemm_keywords(cfg))
    out = {}
    for dtype in dtypes:
        for role, make, kw in (("gemm1", moe.make_gemm1, kw1), ("gemm2", moe.make_gemm2, kw2)):
            name = f"moe_{role}_{dtype}_{tag}"
            out[name] = (make(dtype, name=name, **kw), l2p)
    return out


def with_l2_promotion(art, l2p):
    """``art`` with its operand tensor maps' L2 promotion set to ``l2p`` bytes (0: unchanged)."""
    for spec in art.launch["tensormaps"] if l2p else ():
        if spec["param"] in ("A_map", "B_map"):
            spec["l2_promotion"] = l2p
    return art


if __name__ == "__main__":
    sys.exit(main())
