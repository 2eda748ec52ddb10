#!/usr/bin/env python
"""MoE layer benchmark (Qwen3-30B-A3B: 128 experts, top-8, hidden 2048, intermediate 768), side by
side in one run on one H100/H200: axe (``kernels/moe.py``) vs SGLang's Triton fused-MoE kernel vs
FlashInfer's fused MoE (``cutlass_fused_moe``) vs plain torch, latency per T.

The contract is the peers': hidden states, top-8 ids and weights in, the combined output out
(SGLang's ``fused_experts`` and FlashInfer's ``cutlass_fused_moe`` take ids and weights; routing is
a separate op in both).  axe's routing kernel is timed in its own column.  Every runnable
implementation is checked against an fp32 torch reference before it is timed; a peer that cannot
be imported or fails is recorded with its exact error and the others still run.

Peers: the wheels carried under ``.whl_moe/`` are unpacked (``--wheels``) onto ``sys.path``
without their dependency trees.  SGLang is tried first through its full ``fused_experts``; if
that import fails, through its Triton kernel alone (``invoke_fused_moe_kernel`` of
``sglang/kernels/ops/moe/fused_moe_triton_kernels.py``) with the block alignment, SiLU·up and the
sum done in torch (its CUDA helpers live in sgl-kernel), timed as ``sglang_triton``.

Usage (GPU machine): ``python3 benchmarks/moe.py [--artifacts .carry/moe] [--tokens 1 8 ...]
[--dtype bfloat16] [--out FILE.json]``.  Total time is a few minutes (1.2 GB of weights per dtype).
"""

import argparse
import datetime
import glob
import json
import os
import sys
import traceback
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
TOKENS = (1, 8, 32, 128, 512, 1024, 2048, 4096)


def unpack_wheels(folder, dest):
    """Unzip every wheel in ``folder`` into ``dest`` (put first on sys.path); returns the names."""
    names = []
    for whl in sorted(glob.glob(os.path.join(folder, "*.whl"))):
        with zipfile.ZipFile(whl) as z:
            z.extractall(dest)
        names.append(os.path.basename(whl))
    if names:
        sys.path.insert(0, dest)
    return names


def timed(torch, fn, reps=50, warmup=5):
    """Median milliseconds of ``fn()`` over ``reps`` CUDA-event-timed calls (L2 not flushed: the
    1.2 GB of weights do not fit in it anyway)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def torch_plain(torch, x, w1, w2, ids, weights):
    """The layer in plain torch (bf16/fp16 matmuls, one loop over the active experts)."""
    out = torch.zeros(x.shape[0], w2.shape[1], dtype=torch.float32, device=x.device)
    for e in torch.unique(ids).tolist():
        t, j = (ids == e).nonzero(as_tuple=True)
        g = x[t] @ w1[e].t()
        a = torch.nn.functional.silu(g[:, :768]) * g[:, 768:]
        out.index_add_(0, t, (a @ w2[e].t()).float() * weights[t, j, None])
    return out.to(x.dtype)


def sglang_peer(torch):
    """SGLang's MoE: ``(name, fn(x, w1, w2, ids, weights))`` or raises with the import error."""
    errors = []
    try:
        from sglang.srt.layers.moe.fused_moe_triton.fused_moe import fused_experts

        def full(x, w1, w2, ids, weights):
            return fused_experts(x, w1, w2, (weights, ids, None))
        return "sglang", full, errors
    except Exception as err:        # noqa: BLE001 - recorded, then the kernel-only path
        errors.append(f"fused_experts: {type(err).__name__}: {err}")
    import triton.language as tl
    from sglang.kernels.ops.moe.fused_moe_triton_kernels import invoke_fused_moe_kernel
    cfg = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8, "num_warps": 4,
           "num_stages": 3}

    def align(ids, block, experts=128):
        """SGLang's moe_align_block_size contract in torch: sorted pair indices padded per expert
        with ``numel``, the expert of every block, the padded total."""
        flat = ids.flatten()
        counts = torch.bincount(flat, minlength=experts)
        padded = (counts + block - 1) // block * block
        starts = torch.cumsum(padded, 0) - padded
        order = torch.argsort(flat, stable=True)
        rank = torch.arange(flat.numel(), device=ids.device) - (torch.cumsum(counts, 0) - counts)[flat[order]]
        total = int(padded.sum())
        srt = torch.full((total,), flat.numel(), dtype=torch.int32, device=ids.device)
        srt[starts[flat[order]] + rank] = order.to(torch.int32)
        experts_of = torch.repeat_interleave(torch.arange(experts, device=ids.device), padded // block).to(torch.int32)
        return srt, experts_of, torch.tensor([total], dtype=torch.int32, device=ids.device)

    def kernel_only(x, w1, w2, ids, weights):
        t = x.shape[0]
        srt, eid, ntp = align(ids.long(), cfg["BLOCK_SIZE_M"])
        ct = tl.bfloat16 if x.dtype == torch.bfloat16 else tl.float16
        c1 = torch.empty(t, 8, w1.shape[1], dtype=x.dtype, device=x.device)
        c2 = torch.empty(t, 8, w2.shape[1], dtype=x.dtype, device=x.device)
        common = dict(config=cfg, compute_type=ct, use_fp8_w8a8=False, use_int8_w8a8=False, use_int8_w8a16=False,
                      use_int4_w4a16=False, per_channel_quant=False)
        invoke_fused_moe_kernel(x, w1, None, c1, None, None, None, weights, ids, srt, eid, ntp, False, 8, **common)
        a = torch.nn.functional.silu(c1[..., :768]) * c1[..., 768:]
        invoke_fused_moe_kernel(a.view(t * 8, 768), w2, None, c2, None, None, None, weights, ids, srt, eid, ntp, True, 1,
                                **common)
        return c2.sum(1)
    return "sglang_triton", kernel_only, errors


def flashinfer_peer(torch):
    from flashinfer.fused_moe import cutlass_fused_moe

    def run(x, w1, w2, ids, weights):
        # FlashInfer's fc1 holds [up; gate] (SwiGLU with the gate second): swap our halves
        return cutlass_fused_moe(x, ids, weights, run.w1, w2, x.dtype)[0]
    run.prepare = lambda w1: setattr(run, "w1", torch.cat([w1[:, 768:], w1[:, :768]], 1).contiguous())
    return "flashinfer", run


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifacts", default=os.path.join(ROOT, ".carry", "moe"))
    ap.add_argument("--wheels", default=os.path.join(ROOT, ".whl_moe"))
    ap.add_argument("--tokens", nargs="*", type=int, default=list(TOKENS))
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import torch
    from axe import runtime as rt
    from kernels import moe_host as moe
    result = {"date": datetime.date.today().isoformat(), "device": torch.cuda.get_device_name(), "dtype": args.dtype,
              "torch": torch.__version__, "errors": {}, "rows": []}
    result["wheels"] = unpack_wheels(args.wheels, os.path.join("/tmp", "moe_wheels"))
    dt = getattr(torch, args.dtype)
    g = torch.Generator(device="cuda").manual_seed(0)
    w1 = (torch.randn(128, 1536, 2048, device="cuda", generator=g) / 2048 ** 0.5).to(dt)
    w2 = (torch.randn(128, 2048, 768, device="cuda", generator=g) / 768 ** 0.5).to(dt)
    peers = {}
    for make in (sglang_peer, flashinfer_peer):
        try:
            got = make(torch)
            peers[got[0]] = got[1]
            if len(got) > 2 and got[2]:
                result["errors"]["sglang fused_experts"] = got[2]
            if hasattr(got[1], "prepare"):
                got[1].prepare(w1)
        except Exception as err:    # noqa: BLE001 - the peer cannot run here: say why, keep the others
            result["errors"][make.__name__] = f"{type(err).__name__}: {err}"
    kernels = {}
    for cfg in moe.CONFIGS:
        try:
            kernels[cfg] = {r: rt.load(os.path.join(args.artifacts, n)) for r, n in moe.artifact_names(args.dtype, cfg).items()}
        except Exception as err:    # noqa: BLE001
            result["errors"][f"axe {cfg}"] = f"{type(err).__name__}: {err}"
    for tokens in args.tokens:
        row = {"T": tokens}
        x = torch.randn(tokens, 2048, device="cuda", generator=g).to(dt)
        logits = torch.randn(tokens, 128, device="cuda", generator=g).to(dt)
        ids, weights = moe.route_reference(logits)
        ref = moe.reference(x, w1, w2, ids.long(), weights)
        scale = ref.abs().max().item()
        impls = {"torch": lambda: torch_plain(torch, x, w1, w2, ids.long(), weights)}
        cfg = moe.config_for(tokens)
        if cfg in kernels:
            layer = moe.Layer(kernels[cfg], tokens, cfg, args.dtype)
            impls["axe"] = lambda: layer.experts(x, w1, w2, ids, weights)
            row["axe_config"] = cfg
        for name, fn in peers.items():
            impls[name] = (lambda f: lambda: f(x, w1, w2, ids, weights))(fn)
        for name, fn in impls.items():
            try:
                err = (fn().float() - ref).abs().max().item() / scale
                row[f"{name}_err"] = err
                if not err <= 3e-2:
                    raise AssertionError(f"rel. error {err:.2e} against the fp32 reference")
                row[name] = timed(torch, fn, args.reps)
            except Exception as e:  # noqa: BLE001
                result["errors"][f"{name} T={tokens}"] = f"{type(e).__name__}: {e}"
                traceback.print_exc()
        if cfg in kernels:
            try:
                row["axe_route"] = timed(torch, lambda: layer.route(logits), args.reps)
            except Exception as e:  # noqa: BLE001
                result["errors"][f"axe_route T={tokens}"] = f"{type(e).__name__}: {e}"
        result["rows"].append(row)
        print(json.dumps(row), flush=True)
    names = ["axe", "axe_route", "torch"] + list(peers)
    print(f"\n| T | {' | '.join(n + ' ms' for n in names)} | axe vs best peer |")
    print("|" + "---|" * (len(names) + 2))
    for row in result["rows"]:
        best = min([row[p] for p in peers if p in row] or [float("nan")])
        vs = f"{best / row['axe']:.2f}x" if "axe" in row else "-"
        print(f"| {row['T']} | " + " | ".join(f"{row[n]:.4f}" if n in row else "-" for n in names) + f" | {vs} |")
    for k, v in result["errors"].items():
        print(f"error {k}: {v}")
    out = args.out or os.path.join(os.environ.get("OUT", ROOT), f"moe-{result['date']}.json")
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print("wrote", out)


if __name__ == "__main__":
    main()
