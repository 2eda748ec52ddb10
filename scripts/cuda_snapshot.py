#!/usr/bin/env python
"""Record the emitted source of every GEMM-family artifact, and compare two records.

A restructuring of the kernels is safe when what they emit does not change.  This builds every
artifact that ``scripts/gpu_build.py``, ``benchmarks/build_gemm.py`` (each of its configurations),
``benchmarks/gemm_variants.py``, ``benchmarks/build_gemm_fp8.py``, ``benchmarks/build_moe.py`` and
``benchmarks/gemm_rs.py build`` produce, plus the kernel modules' examples (sm_90a, sm_100a, trn1),
with nvcc left out (TVM's CUDA or NKI source is what a kernel decides; nvcc is a function of it),
and writes per artifact its source and its launch description (``launch.json`` without the
compiler's resources and the cubin hash) under ``DIR/<family>/<name>/``.

Usage (CPU machine)::

    .venv/bin/python scripts/cuda_snapshot.py record DIR [--families gemm fp8 ...] [--quick]
    .venv/bin/python scripts/cuda_snapshot.py compare OLD NEW

``compare`` prints every artifact that differs, is missing or is new, and exits 1 if any does.
``--quick`` records one shape per configuration of the benchmark families (for iterating; the
full record is what a change is judged by).
"""

import argparse
import contextlib
import glob
import hashlib
import importlib.util
import io
import json
import os
import re
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")

FAMILIES = ("gpu_cases", "gemm", "gemm_variants", "fp8", "moe", "gemm_rs", "examples")
#: launch.json fields that come from nvcc/ptxas or the cubin, not from the kernel's source
COMPILER_FIELDS = ("resources", "cubin_sha256")


@contextlib.contextmanager
def no_nvcc():
    """Builds skip nvcc: the artifact holds the CUDA source, an empty cubin and no PTX."""
    from axe.backends.cuda import build as cuda_build
    real = cuda_build._nvcc
    cuda_build._nvcc = lambda *a, **k: (b"", "", "")
    try:
        yield
    finally:
        cuda_build._nvcc = real


def _module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _quiet(fn, *a):
    with contextlib.redirect_stdout(io.StringIO()):
        return fn(*a)


def family_gpu_cases(out, quick):
    """Every ``BUILDS`` entry of ``tests/gpu/cases_*.py`` (what ``scripts/gpu_build.py`` builds)."""
    gb = _module(os.path.join(ROOT, "scripts", "gpu_build.py"), "gpu_build")
    skipped = []
    for _, mod in gb.load_cases():
        for name, builder in getattr(mod, "BUILDS", {}).items():
            try:
                builder().save(os.path.join(out, name))
            except Exception as err:  # noqa: BLE001 - e.g. NVSHMEM headers absent: the rest still count
                skipped.append(name)
                print(f"  not built: {name}: {type(err).__name__}: {str(err).splitlines()[0][:160]}", flush=True)
    if skipped:
        print(f"  gpu_cases: {len(skipped)} not built (absent on both sides of a comparison)", flush=True)


def family_gemm(out, quick):
    """``benchmarks/build_gemm.py`` in each configuration its docstring names."""
    import build_gemm
    configs = {"default": ["--dynamic"], "cluster2": ["--cluster", "2"], "pingpong": ["--schedule", "pingpong"],
               "sm100": ["--target", "sm_100a"], "sm100_cluster2": ["--target", "sm_100a", "--cluster", "2"]}
    if quick:
        import gemm as bench
        bench.SHAPES[:] = bench.SHAPES[:1]
    for cfg, argv in configs.items():
        _quiet(build_gemm.main, ["--out", os.path.join(out, cfg)] + argv)


def family_gemm_variants(out, quick):
    """``benchmarks/gemm_variants.py --build``: every variant on its shapes (both dtypes)."""
    import gemm_variants
    if quick:
        gemm_variants.SHAPES[:] = gemm_variants.SHAPES[:1]
    gemm_variants.OUT = out
    for dtype in ("float16", "bfloat16"):
        _quiet(gemm_variants.build, list(gemm_variants.VARIANTS), dtype)


def family_fp8(out, quick):
    """``benchmarks/build_gemm_fp8.py``: every variant on every shape."""
    import build_gemm_fp8
    argv = ["--out", out] + (["--only", "deepseek"] if quick else [])
    _quiet(build_gemm_fp8.main, argv)


def family_moe(out, quick):
    """``benchmarks/build_moe.py --skip-sglang``'s kernels: every MoE kernel, both dtypes, and the
    experiment variants."""
    import build_moe
    args = argparse.Namespace(out=out, dtypes=["bfloat16", "float16"], variant=list(build_moe.EXPERIMENTS))
    failed = _quiet(build_moe.build_kernels, args)
    if failed:
        raise RuntimeError(f"moe: {failed} kernels failed to build")


def family_gemm_rs(out, quick):
    """``benchmarks/gemm_rs.py build --world 2 4``: the fused kernel and its measurement aids."""
    bench = _module(os.path.join(ROOT, "benchmarks", "gemm_rs.py"), "gemm_rs_bench")
    _quiet(bench.main, ["build", "--world", "2", "4", "--out", out])


def family_examples(out, quick):
    """The kernel modules' examples on every target they build for."""
    import axe.lang as Ax
    from kernels import gemm, gemm_fp8, gemm_rs
    for k, targets in ((gemm.gemm_fp16, ("sm_90a", "sm_100a", "trn1")), (gemm.gemm_bf16_nt, ("sm_90a", "sm_100a", "trn1")),
                       (gemm_fp8.gemm_fp8_example, ("sm_90a",)), (gemm_rs.gemm_rs_llama8b_down_w2, ("sm_90a",))):
        for t in targets:
            Ax.compile_kernel(k, t).save(os.path.join(out, f"{k.name}_{t}"))


def normalize(art_dir, dest):
    """Copy an artifact's source files and its launch description minus compiler fields."""
    os.makedirs(dest, exist_ok=True)
    for f in sorted(os.listdir(art_dir)):
        path = os.path.join(art_dir, f)
        if f == "launch.json":
            with open(path) as fh:
                launch = json.load(fh)
            for k in COMPILER_FIELDS:
                launch.pop(k, None)
            with open(os.path.join(dest, f), "w") as fh:
                json.dump(launch, fh, indent=1, sort_keys=True)
        elif f.endswith((".cu", ".py", "manifest.json")):
            shutil.copy(path, os.path.join(dest, f))


def record(dest, families, quick):
    failed = []
    with no_nvcc():
        for fam in families:
            t = time.time()
            with tempfile.TemporaryDirectory(prefix=f"snap_{fam}_") as tmp:
                try:
                    globals()[f"family_{fam}"](tmp, quick)
                except Exception as err:  # noqa: BLE001 - record the rest, report this one
                    failed.append(fam)
                    print(f"FAILED {fam}: {type(err).__name__}: {err}", flush=True)
                arts = sorted({os.path.dirname(p) for p in glob.glob(os.path.join(tmp, "**", "launch.json"), recursive=True)
                              + glob.glob(os.path.join(tmp, "**", "*manifest.json"), recursive=True)})
                for a in arts:
                    normalize(a, os.path.join(dest, fam, os.path.relpath(a, tmp)))
            print(f"{fam}: {len(arts)} artifacts ({time.time() - t:.0f} s)", flush=True)
    return 1 if failed else 0


#: an absolute path into a checkout (launch.json's dispatch notes name source lines): records made in
#: two checkouts compare equal when only the checkout's folder differs
_CHECKOUT = re.compile(rb'/[^"\s]*?/(?=(?:kernels|tests|benchmarks|axe|scripts)/)')


def _digests(root):
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                data = fh.read()
            if f == "launch.json":
                data = _CHECKOUT.sub(b"<checkout>/", data)
            out[os.path.relpath(p, root)] = hashlib.sha256(data).hexdigest()
    return out


def compare(old, new):
    a, b = _digests(old), _digests(new)
    differ = sorted(p for p in a.keys() & b.keys() if a[p] != b[p])
    missing, added = sorted(a.keys() - b.keys()), sorted(b.keys() - a.keys())
    for label, paths in (("differs", differ), ("missing", missing), ("new", added)):
        for p in paths:
            print(f"{label:8s} {p}")
    same = len([p for p in a.keys() & b.keys() if a[p] == b[p]])
    print(f"{same} files identical, {len(differ)} differ, {len(missing)} missing, {len(added)} new")
    return 1 if differ or missing or added else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    r = sub.add_parser("record")
    r.add_argument("dest")
    r.add_argument("--families", nargs="+", choices=FAMILIES, default=list(FAMILIES))
    r.add_argument("--quick", action="store_true")
    c = sub.add_parser("compare")
    c.add_argument("old")
    c.add_argument("new")
    args = ap.parse_args(argv)
    if args.mode == "record":
        return record(args.dest, args.families, args.quick)
    return compare(args.old, args.new)


if __name__ == "__main__":
    sys.exit(main())
