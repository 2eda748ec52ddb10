#!/usr/bin/env python
"""Flash-attention forward, side by side (issue 28 item 3): axe's ``kernels/attention.py`` against
torch SDPA's FlashAttention and cuDNN backends and, where they import on the GPU machine,
FlashAttention-4 (``flash_attn.cute``, CuTe DSL) and FlashInfer's batch prefill; bf16, head size 64
and 128, causal and not, sequence 512 … 16384 with batch × heads filling the GPU (16384 tokens per
batch, 2048 / head_dim heads: 16 or 32, as FlashAttention's own benchmarks use).

Two modes:

- ``--build`` (CPU machine, TVM): build axe's artifacts into ``.carry/attention_bench/<name>/``;
- default (GPU machine, no TVM): load them with ``axe.runtime``, check every side against the first
  peer that runs (max |err| / max |ref| < 3e-2, outputs poisoned with NaN first), then time the sides
  in interleaved rounds (each round: every side, untimed back-to-back launches for at least
  :data:`PREROLL_S` then a timed block of ``--iters`` between CUDA events, so that no side's block
  starts with the clock headroom another side's lighter kernel left; median over ``--rounds``; no
  L2 flush) and write
  ``benchmarks/results/attention-DATE-DEVICE.json`` (under ``$OUT`` when set): per shape ``seq,
  head_dim, causal, axe_ms, best_peer_ms, best_peer``, every peer's ms, TFLOP/s per side and, for a
  peer that could not run, why; ``axe_ms`` is the default configuration, ``axe_configs_ms`` adds the
  configurations of ``kernels/parts/attention_variants.py`` (``--variants``).  ``--shape-timeout S``
  runs each shape in a child process killed after S seconds; the row then says ``timed_out`` (a
  hung kernel cannot be stopped from the process that launched it).  ``--sustain S`` also runs each
  side back to back for S seconds while NVML samples the SM clock and the power (row ``sustained``).

FLOPs: ``4 · batch · heads · seq² · head_dim`` (Q·Kᵀ and P·V), halved when causal (the convention of
FlashAttention's benchmarks).  Tensors are ``(batch, seq, heads, head_dim)``; the SDPA peers get the
``(batch, heads, seq, head_dim)`` transposed views (no copy), FlashInfer the ``(tokens, heads, dim)``
ragged view.

Usage::

    .venv/bin/python benchmarks/attention.py --build            # here
    python3 benchmarks/attention.py [--seqs 512 2048] [--heads-dim 128] [--causal 0 1]   # on the GPU
"""

import argparse
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")

SEQS = (512, 1024, 2048, 4096, 8192, 16384)
HEAD_DIMS = (64, 128)
TOKENS, HIDDEN = 16384, 2048
OUT_DIR = os.path.join(ROOT, ".carry", "attention_bench")
PEERS = ("sdpa_flash", "sdpa_cudnn", "flash_attn_4", "flashinfer")
#: seconds of untimed launches of a side right before each of its timed blocks (see run_shape)
PREROLL_S = 0.25


def shape(seq, d):
    """(batch, heads) for a sequence length and head size."""
    return max(1, TOKENS // seq), HIDDEN // d


def name_of(seq, d, causal, variant=None):
    return f"attn_bench_bf16_d{d}_s{seq}{'_causal' if causal else ''}" + (f"_{variant}" if variant else "")


def variants_for(args, d, causal, seq):
    """The configurations timed for head size ``d``, the mask and the sequence length: the default
    (None) and those of ``--variants`` built for that head size, other than the default."""
    from kernels.parts.attention_variants import HEAD_DIMS as FITS
    from kernels.parts.attention_variants import default
    return [None] + [v for v in args.variants if d in FITS[v] and v != default(d, causal, seq)]


def flops(seq, d, causal):
    b, h = shape(seq, d)
    return 4 * b * h * seq * seq * d / (2 if causal else 1)


def _build_one(out, n, b, seq, h, d, causal, variant):
    """One artifact (a worker of :func:`build`); returns its cubin's bytes (0: it existed)."""
    sys.path.insert(0, ROOT)
    from build_gemm import save_built
    from kernels import attention
    return save_built(out, n, lambda: attention.build(b, seq, seq, h, h, d, "bfloat16", causal, name=n, variant=variant))


def build(args):
    """Every artifact the run loads (the defaults first, then the variants), ``--jobs`` at a time."""
    import concurrent.futures as cf
    import multiprocessing as mp
    jobs = []
    for v in [None] + args.variants:
        for d in args.head_dims:
            for seq in args.seqs:
                for causal in args.causal:
                    b, h = shape(seq, d)
                    if v in variants_for(args, d, bool(causal), seq):
                        jobs.append((args.out, name_of(seq, d, bool(causal), v), b, seq, h, d, bool(causal), v))
    with cf.ProcessPoolExecutor(args.jobs, mp_context=mp.get_context("spawn")) as ex:
        total = sum(f.result() for f in [ex.submit(_build_one, *j) for j in jobs])
    print(f"artifacts in {args.out}; {total / 2**10:.0f} KiB of cubins")
    return 0


def peer_fns(torch, q, k, v, causal, wanted=PEERS):
    """``{peer: (fn returning the output as (batch, seq, heads, dim), or the reason it cannot run)}``
    for the peers ``wanted`` (the others: "not requested")."""
    out = {p: "not requested (--peers)" for p in PEERS if p not in wanted}
    wanted = set(wanted)
    F = torch.nn.functional
    from torch.nn.attention import SDPBackend, sdpa_kernel
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))

    def sdpa(backend):
        def fn():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal).transpose(1, 2)
        return fn
    for p, backend in (("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION)):
        if p in wanted:
            out[p] = sdpa(backend)
    if "flash_attn_4" in wanted:
        out["flash_attn_4"] = _fa4(q, k, v, causal)
    if "flashinfer" in wanted:
        out["flashinfer"] = _flashinfer(torch, q, k, v, causal)
    return out


def _why(e):
    return f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"


def _fa4(q, k, v, causal):
    """FlashAttention-4 (CuTe DSL) on (batch, seq, heads, dim), or why it cannot run."""
    try:
        from flash_attn.cute import flash_attn_func

        def fa4():
            o = flash_attn_func(q, k, v, causal=causal)
            return o[0] if isinstance(o, tuple) else o
        return fa4
    except Exception as e:  # noqa: BLE001 - a peer that does not import is reported, not fatal
        return "import flash_attn.cute: " + _why(e)


def _flashinfer(torch, q, k, v, causal):
    """FlashInfer's batch prefill on the ragged (tokens, heads, dim) views, or why it cannot run."""
    try:
        import flashinfer
        B, S, H, D = q.shape
        ws = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
        w = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(ws, "NHD")
        ind = torch.arange(0, (B + 1) * S, S, dtype=torch.int32, device="cuda")
        w.plan(ind, ind, H, k.shape[2], D, causal=causal, q_data_type=q.dtype)
        qf, kf, vf = (x.reshape(B * S, x.shape[2], D) for x in (q, k, v))
        return lambda: w.run(qf, kf, vf).view(B, S, H, D)
    except Exception as e:  # noqa: BLE001
        return "flashinfer: " + _why(e)


def run_shape(torch, rt, args, seq, d, causal):
    from axe.torch.timing import burst_ms, median, round_robin
    b, h = shape(seq, d)
    q, k, v = (torch.randn(b, seq, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    from kernels.parts.attention_variants import default
    row = {"seq": seq, "head_dim": d, "causal": causal, "batch": b, "heads": h, "peers_ms": {}, "why": {},
           "axe_default": default(d, causal, seq)}
    sides = {}
    o = torch.empty_like(q)
    for var in variants_for(args, d, causal, seq):
        side = "axe" + (f"_{var}" if var else "")
        try:
            kernel = rt.load(os.path.join(args.artifacts, name_of(seq, d, causal, var)))
            sides[side] = (lambda kn: lambda: (kn(q, k, v, o), o)[1])(kernel)
        except Exception as e:  # noqa: BLE001
            row["why"][side] = _why(e)
    for p, fn in peer_fns(torch, q, k, v, causal, args.peers).items():
        if isinstance(fn, str):
            row["why"][p] = fn
        else:
            sides[p] = fn
    ref = None
    for s in list(sides):          # peers first: the first that runs is the reference
        if s.startswith("axe"):
            continue
        try:
            got = sides[s]()
            torch.cuda.synchronize()
            ref = got.float() if ref is None else ref
            err = ((got.float() - ref).abs().max() / ref.abs().max()).item()
            if not err < 3e-2:
                raise AssertionError(f"max |err| / max |ref| {err:.2e} against the first peer")
        except Exception as e:  # noqa: BLE001
            row["why"][s] = _why(e)
            del sides[s]
    row["axe_err"] = {}
    for s in [s for s in sides if s.startswith("axe")]:
        try:
            o.fill_(float("nan"))
            got = sides[s]()
            torch.cuda.synchronize()
            if ref is not None:
                err = ((got.float() - ref).abs().max() / ref.abs().max()).item()
                row["axe_err"][s] = err
                if not err < 3e-2:
                    raise AssertionError(f"max |err| / max |ref| {err:.2e} against the first peer")
        except Exception as e:  # noqa: BLE001
            row["why"][s] = _why(e)
            del sides[s]
    # each timed block follows an untimed run of the same side lasting PREROLL_S: a block that followed
    # a lighter kernel (sdpa_flash draws less power) would start with the clock headroom the power cap
    # left it, and that headroom outlasted a 10-launch pre-roll at 3-4 ms a launch (head 128, 16384 keys)
    est = {s: burst_ms(torch, fn, calls=args.iters, blocks=1) for s, fn in sides.items()}
    times = round_robin({s: (lambda fn=fn, n=max(args.iters, math.ceil(PREROLL_S * 1e3 / est[s])):
                             burst_ms(torch, fn, calls=args.iters, blocks=1, warmup=n))
                         for s, fn in sides.items()}, args.rounds)
    ms = {s: median(t) for s, t in times.items()}
    if args.sustain:
        from axe.torch.timing import sustained
        row["sustained"] = {s: sustained(torch, fn, args.sustain) for s, fn in sides.items()}
    fl = flops(seq, d, causal)
    row["axe_ms"] = ms.get("axe")
    row["axe_configs_ms"] = {s: t for s, t in ms.items() if s.startswith("axe")}
    row["peers_ms"] = {p: ms.get(p) for p in PEERS}
    ran = {p: t for p, t in row["peers_ms"].items() if t}
    row["best_peer"] = min(ran, key=ran.get) if ran else None
    row["best_peer_ms"] = ran[row["best_peer"]] if ran else None
    row["tflops"] = {s: fl / (t * 1e-3) / 1e12 for s, t in ms.items()}
    row["axe_vs_best"] = row["best_peer_ms"] / row["axe_ms"] if row["axe_ms"] and row["best_peer_ms"] else None
    fastest = min(row["axe_configs_ms"], key=row["axe_configs_ms"].get) if row["axe_configs_ms"] else None
    row["axe_fastest_config"] = fastest
    row["axe_fastest_vs_best"] = (row["best_peer_ms"] / row["axe_configs_ms"][fastest]
                                  if fastest and row["best_peer_ms"] else None)
    return row


def _shape_in_child(args, seq, d, causal):
    """One shape in a child process bounded by ``--shape-timeout`` seconds (a kernel that hangs cannot
    be stopped from inside the process that launched it): its row, or a row that says it timed out."""
    import json
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "row.json")
        cmd = [sys.executable, os.path.abspath(__file__), "--one", str(seq), str(d), str(int(causal)), "--json", out,
               "--artifacts", args.artifacts, "--iters", str(args.iters), "--rounds", str(args.rounds),
               "--peers", *args.peers, "--variants", *args.variants, "--sustain", str(args.sustain)]
        try:
            subprocess.run(cmd, timeout=args.shape_timeout, check=True)
            with open(out) as f:
                return json.load(f)
        except (subprocess.TimeoutExpired, subprocess.CalledProcessError, OSError, ValueError) as e:
            why = (f"timed out after {args.shape_timeout} s" if isinstance(e, subprocess.TimeoutExpired)
                   else _why(e))
            return {"seq": seq, "head_dim": d, "causal": bool(causal), "batch": shape(seq, d)[0],
                    "heads": shape(seq, d)[1], "timed_out": isinstance(e, subprocess.TimeoutExpired),
                    "why": {"run": why}, "axe_ms": None, "axe_configs_ms": {}, "peers_ms": {}, "tflops": {}}


def run(args):
    import datetime
    import json

    import torch

    import axe.runtime as rt
    from dist_bench import device_tag, versions
    assert "tvm" not in sys.modules, "the GPU side runs without TVM"
    if args.one:
        seq, d, causal = args.one
        with open(args.json, "w") as f:
            json.dump(run_shape(torch, rt, args, seq, d, bool(causal)), f)
        return 0
    rows = []
    for d in args.head_dims:
        for seq in args.seqs:
            for causal in args.causal:
                r = _shape_in_child(args, seq, d, causal) if args.shape_timeout else \
                    run_shape(torch, rt, args, seq, d, bool(causal))
                rows.append(r)
                if "timed_out" in r:
                    print(f"d={d:3d} seq={seq:5d} {'causal' if causal else 'full  '}: {r['why']['run']} "
                          "(recorded; next shape)", flush=True)
                    continue
                tf = r["tflops"]
                print(f"d={d:3d} seq={seq:5d} {'causal' if causal else 'full  '} b={r['batch']:2d} h={r['heads']}: "
                      + "  ".join(f"{s} {r['axe_configs_ms'].get(s) or r['peers_ms'].get(s):.3f} ms "
                                  f"({tf[s]:.0f} TF/s)" for s in tf)
                      + (f"  best peer/axe {r['axe_vs_best']:.3f}x" if r["axe_vs_best"] else "")
                      + (f" ({r['axe_fastest_config']}: {r['axe_fastest_vs_best']:.3f}x)" if r["axe_fastest_vs_best"] else "")
                      + (f"  why: {r['why']}" if r["why"] else ""), flush=True)
                for side, x in r.get("sustained", {}).items():
                    print(f"    sustained {side:14s} {x['ms']:.3f} ms/call at {x['sm_mhz']:.0f} MHz (min {x['min_mhz']}), "
                          f"{x['watts']:.0f} W", flush=True)
    date = datetime.date.today().isoformat()
    path = args.json or os.path.join(os.environ.get("OUT", os.path.join(ROOT, "benchmarks", "results")),
                                     f"attention-{date}-{device_tag()}.json")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    result = {"benchmark": "attention", "date": date, "device": torch.cuda.get_device_name(),
              "sms": torch.cuda.get_device_properties(0).multi_processor_count, "versions": versions(),
              "dtype": "bfloat16", "tokens_per_batch": TOKENS, "hidden": HIDDEN,
              "timing": f"CUDA events around {args.iters} back-to-back launches after at least {PREROLL_S} s of "
                        f"untimed launches of the same side, sides interleaved, median of {args.rounds} rounds; "
                        "no L2 flush",
              "rows": rows}
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {path}")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", action="store_true", help="build axe's artifacts (CPU machine with TVM)")
    ap.add_argument("--out", "--artifacts", dest="artifacts", default=OUT_DIR)
    ap.add_argument("--seqs", type=int, nargs="*", default=list(SEQS))
    ap.add_argument("--head-dims", type=int, nargs="*", default=list(HEAD_DIMS))
    ap.add_argument("--causal", type=int, nargs="*", default=[0, 1])
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", default=None)
    ap.add_argument("--peers", nargs="*", default=list(PEERS), choices=PEERS, help="the peers to time (default: all)")
    ap.add_argument("--variants", nargs="*", default=["ov3", "pp3", "pp176", "pp", "pp_p", "pp3_p", "simple"],
                    help="axe configurations besides the default (kernels/parts/attention_variants.py), timed as axe_<name>")
    ap.add_argument("--jobs", type=int, default=2, help="--build: artifacts built at once")
    ap.add_argument("--shape-timeout", type=int, default=0,
                    help="run each shape in a child process killed after this many seconds, recorded as timed "
                         "out in the JSON (0: in this process, unbounded)")
    ap.add_argument("--sustain", type=float, default=0,
                    help="also run each side back to back for this many seconds while NVML samples the SM clock and "
                         "power (row 'sustained')")
    ap.add_argument("--one", type=int, nargs=3, metavar=("SEQ", "D", "CAUSAL"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.out = args.artifacts
    return build(args) if args.build else run(args)


if __name__ == "__main__":
    sys.exit(main())
