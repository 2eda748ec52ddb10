#!/usr/bin/env python3
"""GPU check of ``torch.ops.axe.fused_moe`` and ``torch.ops.axe.gemm_fp8`` against torch.

- here (TVM + nvcc): ``CUDA_PATH=/usr/local/cuda .venv/bin/python tests/gpu/run_moe_fp8_ops.py build
  [--cache DIR] [--only moe|fp8]`` builds every artifact the run calls into ``DIR`` (default
  ``$AXE_CACHE_DIR``, else ``.carry/moe_fp8_cache``) for sm_90a;
- there (TVM absent): ``AXE_CACHE_DIR=DIR python tests/gpu/run_moe_fp8_ops.py run [--only moe|fp8]``.

``fused_moe`` on :data:`MOE_SHAPES` (Qwen3-30B-A3B's block, and E=64, H=4096, I=1024, top-6,
whose I is not a multiple of 48) for every T in :data:`TOKENS` (each configuration, the one-CTA
and the many-CTA alignment), softmax-top-k routing and a skewed one (every token's first choices
among 4 experts), against :func:`axe.torch.moe_ops.reference` (fp32): ``‖out − ref‖ / ‖ref‖ <
2e-2`` (the kernel rounds the SiLU·up intermediate and each expert's output to bf16); then one
CUDA-graph capture replayed on new inputs.  ``gemm_fp8`` on :data:`FP8_SHAPES` for M in
:data:`FP8_MS` (a bucket's first and last M, one whole bucket in DeepGEMM's layout without a copy,
and a row-major scale copied) against :func:`axe.torch.fp8_ops.reference`, ``< 1e-2`` (the bound
``tests/gpu/cases_gemm_fp8.py`` derives).  Prints one line per check; exit status 1 if any fails.
"""

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
DEFAULT_CACHE = os.path.join(ROOT, ".carry", "moe_fp8_cache")

#: (name, E, H, I, top_k)
MOE_SHAPES = [("qwen3-30b-a3b", 128, 2048, 768, 8), ("e64-h4096-i1024-top6", 64, 4096, 1024, 6)]
TOKENS = (1, 7, 8, 9, 100, 512, 513, 2048)
MOE_TOL = 2e-2
#: (name, N, K): DeepSeek-V3's fused q_a + kv_a projection and its shared-expert down projection
FP8_SHAPES = [("ds_qkv_a", 2112, 7168), ("ds_o", 7168, 2048)]
FP8_MS = (1, 7, 16, 17, 64, 128, 129, 300)   # the decode tile (buckets 16, 64), the 128-row tile above
FP8_TOL = 1e-2


def build(cache_dir, only):
    os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")
    import traceback

    from axe.torch import fp8_ops, moe_ops
    from axe.torch.cache import ArtifactCache
    cache = ArtifactCache(cache_dir, shipped=[])
    todo = []
    if only in (None, "moe"):
        for _, E, H, I, k in MOE_SHAPES:
            todo += [(moe_ops.KERNELS[n], s) for n, s in moe_ops.all_specs(E, H, I, k, "bfloat16")]
    if only in (None, "fp8"):
        for _, N, K in FP8_SHAPES:
            for Mb in sorted({fp8_ops.bucket(m) for m in FP8_MS}):
                todo.append((fp8_ops.KERNEL, fp8_ops.spec(Mb, N, K)))
    failed = 0
    for i, (jk, spec) in enumerate(todo):
        jk._cache, jk.progress = cache, False
        print(f"[{i + 1}/{len(todo)}] {jk.kernel} {spec}", flush=True)
        try:
            jk.artifact_path("sm_90a", spec)
        except Exception:  # noqa: BLE001 - report each, then fail
            failed += 1
            traceback.print_exc()
    print(f"cache {cache_dir}: {len(cache.entries())} entries, {failed} failed")
    return 1 if failed else 0


def _rel(got, ref):
    return float((got.float() - ref).norm() / ref.norm().clamp(min=1e-30))


def run_moe(torch, report):
    from axe.torch import moe_ops
    for name, E, H, I, k in MOE_SHAPES:
        g = torch.Generator(device="cuda").manual_seed(0)
        w1 = (torch.randn(E, 2 * I, H, device="cuda", generator=g) / H ** 0.5).bfloat16()
        w2 = (torch.randn(E, H, I, device="cuda", generator=g) / I ** 0.5).bfloat16()
        for T in TOKENS:
            for routing in ("softmax", "skewed"):
                x = torch.randn(T, H, device="cuda", generator=g).bfloat16()
                logits = torch.randn(T, E, device="cuda", generator=g)
                if routing == "skewed":
                    logits[:, :4] += 10
                w, ids = torch.topk(torch.softmax(logits, -1), k, -1)
                w, ids = w / w.sum(-1, keepdim=True), ids.to(torch.int32)
                out = torch.ops.axe.fused_moe(x, w1, w2, w, ids)
                err = _rel(out, moe_ops.reference(x, w1, w2, w, ids))
                report(f"fused_moe {name} T={T} {routing} ({moe_ops.config(T, I)})", err < MOE_TOL, f"rel {err:.2e}")
        T = 9                   # a CUDA graph of the op, replayed on new inputs
        x = torch.randn(T, H, device="cuda").bfloat16()
        w, ids = torch.topk(torch.softmax(torch.randn(T, E, device="cuda"), -1), k, -1)
        ids = ids.to(torch.int32)
        torch.ops.axe.fused_moe(x, w1, w2, w, ids)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = torch.ops.axe.fused_moe(x, w1, w2, w, ids)
        x.copy_(torch.randn_like(x))
        w2_, ids2 = torch.topk(torch.softmax(torch.randn(T, E, device="cuda"), -1), k, -1)
        w.copy_(w2_)
        ids.copy_(ids2)
        graph.replay()
        err = _rel(out, moe_ops.reference(x, w1, w2, w, ids))
        report(f"fused_moe {name} T={T} CUDA graph replay", err < MOE_TOL, f"rel {err:.2e}")


def run_fp8(torch, report):
    from axe.torch import fp8_ops
    from kernels.fp8_blocks import quantize_blocks
    for name, N, K in FP8_SHAPES:
        g = torch.Generator(device="cuda").manual_seed(1)
        b, sb = quantize_blocks(torch.randn(N, K, device="cuda", generator=g))
        for M in FP8_MS:
            x = torch.randn(M, K, device="cuda", generator=g) * torch.logspace(-3, 3, M, device="cuda")[:, None]
            blocks = torch.nn.functional.pad(x, (0, -K % 128)).view(M, -1, 128)
            scale = blocks.abs().amax(-1).clamp(min=1e-12) / 448.0                # (M, KB)
            a = (blocks / scale[..., None]).view(M, -1)[:, :K].to(fp8_ops.FP8).contiguous()
            for layout, sa in (("deepgemm", fp8_ops.deepgemm_scales(scale)), ("row-major", scale.contiguous())):
                c = torch.ops.axe.gemm_fp8(a, b, sa, sb)
                ref = fp8_ops.reference(a, b, sa, sb)
                err = _rel(c, ref)
                wrong = _rel(c, fp8_ops.reference(a, b, sa, sb.flip(0)))         # the check tells scale blocks apart
                report(f"gemm_fp8 {name} M={M} (bucket {fp8_ops.bucket(M)}) {layout}", err < FP8_TOL < wrong,
                       f"rel {err:.2e} (flipped scales {wrong:.2e})")


def run(only):
    import torch
    import axe.torch.fp8_ops  # noqa: F401 - registers the ops
    import axe.torch.moe_ops  # noqa: F401
    results = []

    def report(what, ok, detail):
        results.append(ok)
        print(f"{'PASS' if ok else 'FAIL'} {what}: {detail}", flush=True)

    for part, fn in (("moe", run_moe), ("fp8", run_fp8)):
        if only in (None, part):
            try:
                fn(torch, report)
            except Exception as err:  # noqa: BLE001 - the rest still runs
                import traceback
                traceback.print_exc()
                report(f"{part} checks", False, f"{type(err).__name__}: {err}")
    print(f"{sum(results)}/{len(results)} passed ({torch.cuda.get_device_name()})")
    return 0 if all(results) else 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("build", "run"))
    ap.add_argument("--cache", default=os.environ.get("AXE_CACHE_DIR") or DEFAULT_CACHE)
    ap.add_argument("--only", choices=("moe", "fp8"), default=None)
    args = ap.parse_args(argv)
    if args.what == "build":
        return build(args.cache, args.only)
    os.environ["AXE_CACHE_DIR"] = args.cache
    return run(args.only)


if __name__ == "__main__":
    sys.exit(main())
