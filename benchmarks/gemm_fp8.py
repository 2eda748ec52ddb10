#!/usr/bin/env python3
"""Block-scaled FP8 GEMM side by side (GPU, no TVM): axe (``kernels/gemm_fp8.py``), cuBLAS through
``torch._scaled_mm`` with 1×128 / 128×128 scales, DeepGEMM (carried as a wheel) and a Triton
block-scaled GEMM written here, on the 16 MLP shapes of ``benchmarks/gemm.py`` at M = 8192 and
DeepSeek-V3's six (N, K) pairs (DeepGEMM's test set) at M = 4096.

``C (bf16) = (SA ⊙ A)·(SB ⊙ W)ᵀ``: A M×K e4m3 with one fp32 scale per row and 128 columns, W N×K
e4m3 with one per 128×128 block, quantized from random normal data the DeepSeek-V3 way
(:mod:`kernels.fp8_blocks`).  Every peer's output is checked against the fp32 product of the
dequantized operands (‖C − ref‖/‖ref‖ < 1e-2, the tolerance argued in
``tests/gpu/cases_gemm_fp8.py``) before it is timed; a wrong one is timed and marked.  axe runs
the tile widths 128 and 256 (and 192 where :func:`built_for` says), alone and as CTA
pairs sharing B (``cluster=2``), and 256 with stream-K (``stream_k=True``) where the last wave is
partial enough to matter, and reports the fastest correct one.  Timing:
``triton.testing.do_bench`` median.  Every peer and shape is guarded: a failure is recorded with
its exact error and the run goes on.  The JSON (``$OUT`` or ``benchmarks/results/``) is rewritten
after every shape, so a run cut short still leaves its rows.

Peers, as found in the sources:

- cuBLAS: ``torch._scaled_mm(A, W.t(), scale_a, scale_b, out_dtype=bf16)`` takes blockwise scales
  when ``scale_a`` is (M, K/128) *outer-dim-major* (strides (1, M)) and ``scale_b`` is (K/128,
  N/128) with ``scale_b.t()`` row-major (ATen ``ScaledBlas.cpp``: ``is_blockwise_1x128_scaling``,
  ``is_blockwise_128x128_scaling``; cuBLASLt ``VEC128_32F`` / ``BLK128x128_32F``, CUDA >= 12.9,
  no fast accumulation).  If it raises, ``torch.nn.functional.scaled_mm`` with explicit
  ``ScalingType``\\ s is tried; both errors are recorded.
- DeepGEMM: ``deep_gemm.fp8_gemm_nt((A, sfa), (W, sfb), C)`` from the ``sgl-deep-gemm`` wheel (the
  maintained PyPI build of DeepGEMM; PyPI's ``deep-gemm`` has no wheel), imported as installed or
  unpacked from ``--wheels``.  Its kernels are JIT-compiled on first use with NVCC, or NVRTC when
  ``DG_JIT_USE_NVRTC=1`` (set here when no ``nvcc`` is found).  On the H200 (torch 2.11.0+cu130) the 0.2.5 wheel's
  ``deep_gemm/_C.so`` failed to load ("Could not load this library"): ``readelf -d`` shows a torch
  C++ extension with no RPATH/RUNPATH needing ``libtorch{,_cpu,_cuda}.so``, ``libc10{,_cuda}.so``,
  ``libcudart.so.13``, ``libcublas.so.13``, ``libcublasLt.so.13`` and ``libnvrtc.so.13`` by soname
  (82 undefined c10 symbols: tied to the torch ABI it was built against).  Torch's pip wheel keeps
  the CUDA 13 libraries under ``site-packages/nvidia/…/lib`` and reaches them through its own
  RPATH, so a dlopen of ``_C.so`` resolves them only if already loaded into the process —
  ``libnvrtc.so.13`` is not at ``import torch``: the likely cause (not verified on the GPU; a
  torch-version mismatch would show as an undefined symbol instead).
- Triton: :func:`triton_block_fp8` below, autotuned over 6 configurations.

The every-M sweep is ``benchmarks/gemm_fp8_allm.py`` (it takes this file's peers and checks).

Usage (GPU machine): ``python3 benchmarks/gemm_fp8.py [--artifacts DIR] [--wheels DIR (default .carry/gemm_fp8/wheels)] [--only mlp|deepseek]
[--variants bn128 bn256 bn128_c2 bn256_c2 bn192 bn192_c2 bn256_sk] [--groups G ...] [--shapes NxK ...] [--peers cublas deepgemm triton] [--budget SECONDS] [--json PATH]``.
"""

import argparse
import datetime
import glob
import json
import os
import platform
import shutil
import statistics
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

M_MLP, M_DS = 8192, 4096
#: DeepSeek-V3's (N, K) pairs as DeepGEMM's tests enumerate them (fused q_a+kv_a 2112x7168, q_b
#: 24576x1536, kv_b 32768x512, o 7168x16384, shared-expert 4096x7168, 7168x2048)
DEEPSEEK = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]
#: axe builds per shape, ``(bn, cluster, stream_k)``: the tile widths, alone and as CTA pairs sharing
#: B by TMA multicast, and bn = 256 with stream-K (bn = 192 and stream-K only where :func:`built_for`
#: says); the fastest correct one is reported
VARIANTS = ((128, 1, False), (256, 1, False), (128, 2, False), (256, 2, False), (192, 1, False), (192, 2, False),
            (256, 1, True))
SMS = 132
#: the kernel's raster band, ``kernels.gemm_fp8.GROUP`` (this side runs without TVM; a CPU test compares them)
GROUP = 16
#: stream-K is built where more than this share of the last wave's tile slots would idle
SK_IDLE = 0.02


def counted_columns(m, n, bn, sms=SMS):
    """Columns of tile work on the busiest SM of a persistent launch: ``⌈tiles / sms⌉ · bn`` with
    ``tiles = ⌈m / 128⌉ · ⌈n / bn⌉`` — the wave-quantization model (equal time per column)."""
    tiles = -(-m // 128) * -(-n // bn)
    return -(-tiles // sms) * bn


def built_for(m, n, bn, cluster, stream_k=False):
    """Whether the benchmark builds and times variant (bn, cluster, stream_k) for an m×n output: 128
    and 256 always; 192 (SB staged per 64 columns) where its counted work is within 3% of bn = 256's,
    as a CTA pair (the faster form of 256 on large shapes), and alone too where it saves 5% or more
    (N = 2112: 576 vs 768 columns); stream-K (bn = 256 alone: the kernel's only stream-K forms are
    unclustered, and bn = 128 was 10–20% slower than the best variant on every shape, more than
    stream-K can win back) where the tiles fill at least one wave and more than :data:`SK_IDLE` of
    the wave-quantized tile slots would idle, which stream-K can win back — so the carried
    artifacts stay small (stream-K's are the largest: ~0.5 MiB of source and PTX each)."""
    if stream_k:
        tiles = -(-m // 128) * -(-n // bn)
        idle = 1 - tiles / (-(-tiles // SMS) * SMS)       # of the tile slots of ⌈tiles / SMS⌉ waves
        return bn == 256 and cluster == 1 and tiles >= SMS and idle > SK_IDLE
    if bn != 192:
        return True
    ratio = counted_columns(m, n, 192) / counted_columns(m, n, 256)
    return ratio <= 0.95 or (cluster == 2 and ratio <= 1.03)
TOL = 1e-2
PEERS = ("cublas", "deepgemm", "triton")
DEVICE = "cuda"         # the CPU test of this script's control flow sets "cpu"
#: seconds of DeepGEMM's first calls (its JIT compiles a kernel per shape) after which it is
#: skipped for the remaining shapes, to keep the run inside its GPU budget
DEEPGEMM_JIT_LIMIT = 120.0


def shapes():
    """``[(set, model, proj, M, N, K)]``: the MLP shapes, then DeepSeek-V3's."""
    from mlp_gemm import SHAPES
    return ([("mlp", m, p, M_MLP, n, k) for m, p, n, k in SHAPES]
            + [("deepseek", "DeepSeek-V3", f"{n}x{k}", M_DS, n, k) for n, k in DEEPSEEK])


def variant_name(bn, cluster, stream_k=False, group=None):
    """``bn256_c2_sk_g8``: the tile width, CTA pairs, stream-K and a raster band of ``group`` block-rows
    other than the kernel's default (:data:`GROUP`)."""
    return (f"bn{bn}" + (f"_c{cluster}" if cluster > 1 else "") + ("_sk" if stream_k else "")
            + (f"_g{group}" if group not in (None, GROUP) else ""))


def artifact_name(m, n, k, bn, cluster=1, stream_k=False, group=None):
    return f"gemm_fp8_{m}x{n}x{k}_{variant_name(bn, cluster, stream_k, group)}"


def with_groups(variants, groups):
    """Every variant ``(bn, cluster, stream_k)`` once per raster band in ``groups`` (``None``: the default)."""
    return [(*v, g) for v in variants for g in groups]


def error_line(err):
    """The exception's type and first lines (what the JSON records)."""
    text = f"{type(err).__name__}: {err}".strip()
    return "\n".join(text.splitlines()[:12])


def triton_block_fp8():
    """A block-scaled FP8 GEMM in Triton: per 128-wide k-block, ``tl.dot`` into a fresh fp32
    partial, scaled by the rows' SA and the columns' SB and added (the same two-level accumulation
    as axe's and DeepGEMM's); autotuned over tile shapes, stages and warps."""
    import triton
    import triton.language as tl

    configs = [triton.Config({"BM": bm, "BN": bn, "G": 8}, num_stages=s, num_warps=w)
               for bm, bn, s, w in ((128, 128, 4, 4), (128, 128, 3, 8), (64, 128, 4, 4), (128, 256, 3, 8),
                                    (64, 256, 3, 4), (128, 64, 5, 4))]

    @triton.autotune(configs=configs, key=["M", "N", "K"])
    @triton.jit
    def kernel(a, b, c, sa, sb, M, N, K, MP, KB, BM: tl.constexpr, BN: tl.constexpr, G: tl.constexpr):
        BK: tl.constexpr = 128
        n_m, n_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
        pid = tl.program_id(0)
        pm, pn = tl.swizzle2d(pid // n_n, pid % n_n, n_m, n_n, G)      # bands of G block-rows
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        in_m, in_n = rm < M, rn < N
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for kb in range(0, tl.cdiv(K, BK)):
            ka = kb * BK + rk
            x = tl.load(a + rm[:, None] * K + ka[None, :], mask=in_m[:, None] & (ka[None, :] < K), other=0.0)
            y = tl.load(b + rn[None, :] * K + ka[:, None], mask=in_n[None, :] & (ka[:, None] < K), other=0.0)
            s_a = tl.load(sa + kb * MP + rm, mask=in_m, other=0.0)
            s_b = tl.load(sb + (rn // BK) * KB + kb, mask=in_n, other=0.0)
            acc += tl.dot(x, y) * s_a[:, None] * s_b[None, :]
        pc = c + rm[:, None] * N + rn[None, :]
        tl.store(pc, acc.to(c.dtype.element_ty), mask=in_m[:, None] & in_n[None, :])

    def run(A, W, SA, SB, C):
        m, k = A.shape
        n = W.shape[0]
        kernel[lambda meta: (triton.cdiv(m, meta["BM"]) * triton.cdiv(n, meta["BN"]),)](
            A, W, C, SA, SB, m, n, k, SA.shape[1], SB.shape[1])
        return C

    return run


def triton_or_error():
    """:func:`triton_block_fp8`, or a stand-in raising why it could not be made (recorded per shape)."""
    try:
        return triton_block_fp8()
    except Exception as err:  # noqa: BLE001
        why = error_line(err)

    def failed(*_):
        raise RuntimeError(f"Triton peer unavailable: {why}")
    return failed


class Cublas:
    """cuBLAS block-scaled FP8 through torch (see the module docstring): the scale views are made
    once per shape, outside the timed call."""

    @staticmethod
    def views(A, SA, SB):
        import torch
        m = A.shape[0]
        kb = SB.shape[1]
        sa = SA[:, :m].t() if SA.shape[1] == m else SA[:, :m].contiguous().t()     # strides (1, M)
        sbp = torch.zeros(SB.shape[0], -(-kb // 4) * 4, device=SB.device, dtype=SB.dtype)
        sbp[:, :kb] = SB
        return sa, sbp[:, :kb].t()

    @classmethod
    def call(cls, A, W, SA, SB):
        """A callable computing C, or raises with every attempt's error."""
        import torch
        sa, sb = cls.views(A, SA, SB)
        tries = [("torch._scaled_mm", lambda: torch._scaled_mm(A, W.t(), scale_a=sa, scale_b=sb,
                                                                out_dtype=torch.bfloat16))]
        F = torch.nn.functional
        if hasattr(F, "scaled_mm") and hasattr(F, "ScalingType"):
            tries.append(("torch.nn.functional.scaled_mm", lambda: F.scaled_mm(
                A, W.t(), sa, F.ScalingType.BlockWise1x128, sb, F.ScalingType.BlockWise128x128,
                output_dtype=torch.bfloat16)))
        errs = []
        for name, fn in tries:
            try:
                fn()
                sync()
                return name, fn
            except Exception as err:  # noqa: BLE001 - record why each way failed
                errs.append(f"{name}: {error_line(err)}")
        raise RuntimeError(" | ".join(errs))


def import_deepgemm(wheels):
    """``(module, note)`` or ``(None, error)``: DeepGEMM as installed, else unpacked from a
    ``sgl_deep_gemm`` wheel in ``wheels`` (a wheel is a zip; no pip needed)."""
    if shutil.which("nvcc") is None:
        os.environ.setdefault("DG_JIT_USE_NVRTC", "1")
    if "CUDA_HOME" not in os.environ and not os.path.isdir("/usr/local/cuda"):
        import importlib.util
        spec = importlib.util.find_spec("nvidia")
        for base in (spec.submodule_search_locations if spec else []):
            for cand in sorted(glob.glob(os.path.join(base, "cu1*"))) + [os.path.join(base, "cuda_runtime")]:
                if os.path.isdir(os.path.join(cand, "include")):
                    os.environ["CUDA_HOME"] = cand
    errs = []
    try:
        import deep_gemm
        return deep_gemm, "installed"
    except Exception as err:  # noqa: BLE001
        errs.append(f"import deep_gemm: {error_line(err)}")
    for whl in sorted(glob.glob(os.path.join(wheels or "", "*deep_gemm*.whl"))):
        import tempfile
        import zipfile
        dest = tempfile.mkdtemp(prefix="deep_gemm_")
        zipfile.ZipFile(whl).extractall(dest)
        sys.path.insert(0, dest)
        try:
            import deep_gemm
            return deep_gemm, f"unpacked from {os.path.basename(whl)}"
        except Exception as err:  # noqa: BLE001
            errs.append(f"{os.path.basename(whl)}: {error_line(err)}")
    if not errs[1:]:
        errs.append(f"no *deep_gemm*.whl under {wheels!r}")
    return None, " | ".join(errs)


def sync():
    import torch
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def bench(fn):
    from triton.testing import do_bench
    return do_bench(fn, warmup=50, rep=200, return_mode="median")


def rel_err(c, ref):
    return ((c.float() - ref).norm() / ref.norm()).item()


def measure(name, fn, ref, C, row, fns=None):
    """Run ``fn`` (writing ``C`` or returning the output) once, check it against ``ref``, time it;
    records into ``row`` and returns the milliseconds, or None after recording the error; a
    correct ``fn`` goes into ``fns`` (for :func:`retime`)."""
    import torch
    try:
        C.fill_(float("nan"))
        t = time.time()
        try:
            out = fn()
            sync()
        finally:
            row["first_call_s"][name] = time.time() - t      # JIT compilation and autotuning show here
        got = out if isinstance(out, torch.Tensor) else C
        err = rel_err(got, ref)
        ok = bool(not got.isnan().any() and err < TOL)
        ms = bench(fn)
    except Exception as e:  # noqa: BLE001 - one peer's failure must not stop the others
        row["errors"][name] = error_line(e)
        print(f"  {name}: FAILED {error_line(e).splitlines()[0]}", flush=True)
        return None
    row["ms"][name], row["rel_err"][name], row["correct"][name] = ms, err, ok
    if ok and fns is not None:
        fns[name] = fn
    if not ok:
        print(f"  {name}: WRONG rel err {err:.2e} (tolerance {TOL}); timed anyway, marked", flush=True)
    return ms


def retime(fns, row, rounds):
    """Time axe's chosen variant and every correct peer again, ``rounds`` times round robin; each
    figure becomes the median of these rounds alone (``ms_rounds`` keeps them): the first timing
    chose axe's variant among several, and a minimum over noisy timings would flatter it."""
    from axe.torch.timing import median, round_robin
    row["ms_rounds"] = round_robin({name: (lambda fn: lambda: bench(fn))(fn) for name, fn in fns.items()}, rounds)
    for name, times in row["ms_rounds"].items():
        row["ms"][name] = median(times)


def run_shape(shape, artifacts, peers, tri, cub, dg, variants=with_groups(VARIANTS, [None]), rounds=0):
    """One shape: every axe variant (the fastest correct one is axe's figure), then the peers;
    ``rounds`` > 0 re-times axe's choice and the peers in that many interleaved rounds."""
    import torch

    import axe.runtime as rt
    from kernels.fp8_blocks import quantize_blocks, quantize_rows, reference
    kind, model, proj, m, n, k = shape
    row = {"set": kind, "model": model, "proj": proj, "M": m, "N": n, "K": k, "ms": {}, "rel_err": {},
           "correct": {}, "errors": {}, "first_call_s": {}}
    A, SA = quantize_rows(torch.randn(m, k, device=DEVICE))
    W, SB = quantize_blocks(torch.randn(n, k, device=DEVICE))
    ref = reference(A, W, SA, SB)["C"]
    C = torch.empty(m, n, device=DEVICE, dtype=torch.bfloat16)
    fns = {}
    for v in variants:
        if not built_for(m, n, *v[:3]):
            continue
        tag = f"axe_{variant_name(*v)}"
        try:
            kern = rt.load(os.path.join(artifacts, artifact_name(m, n, k, *v)))
        except Exception as e:  # noqa: BLE001
            row["errors"][tag] = error_line(e)
            continue
        measure(tag, (lambda kern: lambda: kern(A, W, SA, SB, C))(kern), ref, C, row, fns)
    axes = {k_: v for k_, v in row["ms"].items() if k_.startswith("axe_")}
    chosen = {}
    if axes:
        best = min(axes, key=axes.get)
        row["ms"]["axe"], row["correct"]["axe"] = axes[best], row["correct"][best]
        row["rel_err"]["axe"], row["axe_config"] = row["rel_err"][best], best
        if best in fns:
            chosen["axe"] = fns[best]
    if "cublas" in peers:
        try:
            how, fn = cub.call(A, W, SA, SB)
            row["cublas_call"] = how
            measure("cublas", fn, ref, C, row, chosen)
        except Exception as e:  # noqa: BLE001
            row["errors"]["cublas"] = error_line(e)
            print(f"  cublas: FAILED {row['errors']['cublas'][:300]}", flush=True)
    if "deepgemm" in peers:
        if dg[0] is None:
            row["errors"]["deepgemm"] = dg[1]
        elif dg[2]["seconds"] > DEEPGEMM_JIT_LIMIT:
            row["errors"]["deepgemm"] = (f"skipped: its first calls (JIT compilation) took {dg[2]['seconds']:.0f} s "
                                         f"so far, over {DEEPGEMM_JIT_LIMIT:.0f} s")
        else:
            sfa = SA[:, :m].t()          # (M, K/128), MN-major and TMA-aligned as DeepGEMM wants
            measure("deepgemm", lambda: dg[0].fp8_gemm_nt((A, sfa), (W, SB), C), ref, C, row, chosen)
            dg[2]["seconds"] += row["first_call_s"].get("deepgemm", 0.0)
    if "triton" in peers:
        measure("triton", lambda: tri(A, W, SA, SB, C), ref, C, row, chosen)
    if rounds:
        retime(chosen, row, rounds)
    flops = 2.0 * m * n * k
    row["tflops"] = {p: flops / (v * 1e-3) / 1e12 for p, v in row["ms"].items()}
    runnable = {p: row["tflops"][p] for p in PEERS if p in row["tflops"] and row["correct"].get(p)}
    if runnable and "axe" in row["tflops"]:
        row["best_peer"] = max(runnable, key=runnable.get)
        row["axe_vs_best"] = row["tflops"]["axe"] / runnable[row["best_peer"]]
    del A, W, SA, SB, ref, C
    if DEVICE == "cuda":
        torch.cuda.empty_cache()
    return row


def summarize(rows):
    out = {}
    for kind in ("mlp", "deepseek"):
        r = [x for x in rows if x["set"] == kind]
        v = [x["axe_vs_best"] for x in r if "axe_vs_best" in x]
        out[kind] = {"shapes": len(r), "compared": len(v), "axe_vs_best_median": statistics.median(v) if v else None,
                     "axe_vs_best_min": min(v) if v else None,
                     "meets_0.95": sum(x >= 0.95 for x in v),
                     "best_peer_counts": {p: sum(x.get("best_peer") == p for x in r) for p in PEERS}}
    return out


def budgeted(todo, t0, budget, result):
    """``(i, shape)`` of ``todo`` while at most ``budget`` seconds have passed since ``t0``; the shapes
    not started then are recorded in ``result["skipped"]``."""
    for i, shape in enumerate(todo):
        if time.time() - t0 > budget:
            result["skipped"] = [list(x) for x in todo[i:]]
            print(f"budget of {budget:.0f} s spent: {len(todo) - i} shapes skipped", flush=True)
            return
        yield i, shape


def write(path, result):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=1)


def table(rows):
    cols = ["axe", "cublas", "deepgemm", "triton"]
    lines = [f"{'set':8s} {'model':15s} {'proj':12s} {'M':>5s} {'N':>6s} {'K':>6s} "
             + " ".join(f"{c:>8s}" for c in cols) + f" {'best':>8s} {'axe/best':>8s}   (TFLOP/s)"]
    for x in rows:
        tf = x.get("tflops", {})
        cells = []
        for c in cols:
            v = tf.get(c)
            cells.append(f"{v:8.0f}" + ("" if x["correct"].get(c, True) else "!") if v is not None else f"{'-':>8s}")
        ratio = f"{x['axe_vs_best']:8.3f}" if "axe_vs_best" in x else f"{'-':>8s}"
        lines.append(f"{x['set']:8s} {x['model']:15s} {x['proj']:12s} {x['M']:5d} {x['N']:6d} {x['K']:6d} "
                     + " ".join(cells) + f" {x.get('best_peer', '-'):>8s} {ratio}")
    return "\n".join(lines) + "\n(! = wrong against the fp32 reference; - = did not run, see errors)"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifacts", default=os.path.join(ROOT, ".carry", "gemm_fp8"))
    ap.add_argument("--wheels", default=os.path.join(ROOT, ".carry", "gemm_fp8", "wheels"))
    ap.add_argument("--only", choices=("mlp", "deepseek"), default=None)
    ap.add_argument("--peers", nargs="*", default=list(PEERS), choices=PEERS)
    ap.add_argument("--variants", nargs="*", default=[variant_name(*v) for v in VARIANTS],
                    choices=[variant_name(*v) for v in VARIANTS], help="axe builds to time")
    ap.add_argument("--groups", nargs="*", type=int, default=[None],
                    help="raster bands (block-rows) to time each variant with (default: the kernel's)")
    ap.add_argument("--shapes", nargs="*", default=None, metavar="NxK", help="only these weight shapes")
    ap.add_argument("--budget", type=float, default=480.0, help="seconds: shapes not started by then are skipped")
    ap.add_argument("--rounds", type=int, default=0,
                    help="re-time axe's chosen variant and the peers in this many interleaved rounds (median)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    t0 = time.time()
    import torch
    try:
        import triton
        triton_version = triton.__version__
    except ImportError as err:      # the Triton peer then fails with this error, the rest runs
        triton_version = f"not importable: {err}"

    cuda = DEVICE == "cuda"
    dev = torch.cuda.get_device_name() if cuda else DEVICE
    date = datetime.date.today().isoformat()
    short = dev.replace("NVIDIA ", "").split()[0].lower()
    path = args.json or os.path.join(os.environ.get("OUT", os.path.join(ROOT, "benchmarks", "results")),
                                     f"gemm_fp8-{date}-{short}.json")
    dg = (*import_deepgemm(args.wheels), {"seconds": 0.0}) if "deepgemm" in args.peers else (None, "not requested", {})
    print(f"DeepGEMM: {dg[1] if dg[0] is None else 'ok, ' + dg[1]}", flush=True)
    tri = triton_or_error() if "triton" in args.peers else None
    cub = Cublas()
    result = {"benchmark": "gemm_fp8", "date": date, "device": dev,
              "sms": torch.cuda.get_device_properties(0).multi_processor_count if cuda else None,
              "versions": {"torch": torch.__version__, "cuda": torch.version.cuda, "triton": triton_version,
                           "python": platform.python_version(),
                           "deep_gemm": getattr(dg[0], "__version__", None) if dg[0] else None},
              "deepgemm_setup": dg[1], "tolerance": TOL,
              "timing": "triton.testing.do_bench median, warmup 50 ms, rep 200 ms; A, W quantized from random normal "
                        "data (1x128 / 128x128 fp32 scales); TFLOP/s = 2MNK / time" + (
                            f"; axe's fastest variant and the peers re-timed in {args.rounds} interleaved rounds, "
                            "median of those rounds" if args.rounds else ""),
              "figures": [], "skipped": []}
    todo = [s for s in shapes() if args.only in (None, s[0]) and (not args.shapes or f"{s[4]}x{s[5]}" in args.shapes)]
    for i, shape in budgeted(todo, t0, args.budget, result):
        print(f"[{i + 1}/{len(todo)}] {shape[0]} {shape[1]} {shape[2]} {shape[3]}x{shape[4]}x{shape[5]}", flush=True)
        try:
            row = run_shape(shape, args.artifacts, args.peers, tri, cub, dg,
                            with_groups([v for v in VARIANTS if variant_name(*v) in args.variants], args.groups),
                            args.rounds)
        except Exception:  # noqa: BLE001 - e.g. out of memory making the operands
            row = {"set": shape[0], "model": shape[1], "proj": shape[2], "M": shape[3], "N": shape[4], "K": shape[5],
                   "ms": {}, "correct": {}, "errors": {"shape": traceback.format_exc()[-2000:]}}
            print(row["errors"]["shape"], flush=True)
        result["figures"].append(row)
        result["summary"] = summarize(result["figures"])
        result["seconds"] = time.time() - t0
        write(path, result)
    print(f"\n{date}  {dev}  torch {torch.__version__}  triton {triton_version}  -> {path}")
    print(table(result["figures"]))
    for kind, s in result.get("summary", {}).items():
        if s["compared"]:
            print(f"{kind}: axe/best peer median {s['axe_vs_best_median']:.3f} min {s['axe_vs_best_min']:.3f}; "
                  f"{s['meets_0.95']}/{s['compared']} shapes >= 0.95; best peer counts {s['best_peer_counts']}")
    errs = {(x["model"], x["proj"]): x["errors"] for x in result["figures"] if x.get("errors")}
    for key, e in list(errs.items())[:3]:
        print(f"errors {key}: {json.dumps(e)[:600]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
