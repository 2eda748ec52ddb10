#!/usr/bin/env python3
"""One Llama-3.1-8B decoder layer's norms, RoPE and MLP from ``torch.ops.axe`` beside the same layer
in torch eager and under ``torch.compile`` (issue 24, item 4).

The layer, as a serving engine runs it (attention itself left out: its output is stood in for by
the normed hidden state, so the post-attention norm and the MLP see a realistic input)::

    residual = x + residual;  h = rms_norm(residual) * w_in          # input_layernorm (fused add)
    q, k = rope(positions, q, k)                                      # NeoX, 32 query + 8 key heads of 128
    residual = h + residual;  h = rms_norm(residual) * w_post         # post_attention_layernorm
    out = (silu(h @ Wg.T) * (h @ Wu.T)) @ Wd.T                        # the MLP, gate and up merged

axe: ``fused_add_rmsnorm`` (in place, vLLM's convention), ``rotary_embedding`` (in place),
``gemm(h, W_gate_up, transpose_b=True)``, ``silu_and_mul``, ``gemm(act, W_down, transpose_b=True)``.
axe_fused: the same with the activation in the gate/up GEMM's store,
``gemm_silu_mul(h, W_gate_up_interleaved)`` (the weight interleaved once at set-up,
``axe.torch.ops.interleave_gate_up``): one kernel and the 2·tokens·14336 intermediate fewer.
torch: the same formulas with ``F.rms_norm``, slices and ``cat`` for the rotation, ``F.silu``,
``torch.matmul`` (cuBLAS), written functionally; torch.compile: that function compiled with
inductor (``fullgraph=True``, one compile per token count).

Correctness first: each side runs once on copies of the same inputs and the outputs (``out``,
``residual``, ``q``, ``k``) are compared with torch eager's; a row is timed only if they agree.
Timing, per token count (1, 8, 64: decode; 2048: prefill) and mode:

- ``eager``: blocks of back-to-back calls between CUDA events (:func:`axe.torch.timing.burst_ms`):
  what a Python serving loop sees, host launch cost included wherever it exceeds the GPU's work;
- ``graph``: the layer captured once into a CUDA graph and replayed
  (:func:`axe.torch.timing.graph_ms`): the kernels alone, as a decode step under CUDA graphs.

The four sides take turns (``--rounds`` rounds, each timing every side once: one eager block of
``--calls`` calls, or 10 replays), and each side's figure is its median round, so a drift of the
GPU's clock or temperature during a row falls on every side alike.

Two steps: here ``.venv/bin/python benchmarks/layer.py build`` puts every artifact into
``.carry/serving_cache`` (shared with benchmarks/torch_ops.py); on the GPU machine (no TVM)
``python3 benchmarks/layer.py run`` writes ``layer-<date>-<device>.json`` (rows ``tokens, mode,
axe_ms, axe_fused_ms, torch_ms, compile_ms``) under ``$OUT`` (else ``benchmarks/results``) and prints a table.
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from torch_ops import CACHE, EPS, HIDDEN, HK, HQ, HS, MLP, TARGET, rope_cache, rope_torch, write  # noqa: E402

TOKENS = (1, 8, 64, 2048)


def specs(tokens=TOKENS) -> list:
    """``(jit kernel of axe.torch.ops.KERNELS, spec)`` of every artifact the layer launches: the
    GEMMs and the fused gate/up GEMMs of the heuristic and of every GPU the tuning table read here
    has picks for (the fused ones: its plain GEMM's picks made to compose with the act)."""
    from axe.torch import tune
    from axe.torch.ops import spec_silu_mul_for
    out = [("fused_add_rmsnorm", {"n": HIDDEN, "dtype": "bfloat16"}), ("silu_and_mul", {"d": MLP, "dtype": "bfloat16"}),
           ("rotary_neox", {"head_size": HS, "q_heads": HQ, "kv_heads": HK, "is_neox": True, "dtype": "bfloat16",
                            "pos_dtype": "int64"})]
    for device in [""] + sorted({k.split("|")[0] for k in tune.table()}):
        for t in tokens:
            todo = [("gemm_nt", tune.spec_for(device, N, K, "bfloat16", "col", t)) for N, K in ((2 * MLP, HIDDEN), (HIDDEN, MLP))]
            todo.append(("gemm_silu_mul", spec_silu_mul_for(device, 2 * MLP, HIDDEN, "bfloat16", t)))
            out += [s for s in todo if s not in out]
    return out


def weights(torch):
    """The layer's weights (bf16, scaled so activations stay O(1)) and the rotary cache."""
    g = torch.Generator(device="cuda").manual_seed(0)

    def rnd(*shape, scale):
        return torch.randn(*shape, dtype=torch.bfloat16, device="cuda", generator=g) * scale
    return {"in_norm": rnd(HIDDEN, scale=0.1) + 1, "post_norm": rnd(HIDDEN, scale=0.1) + 1,
            "gate_up": rnd(2 * MLP, HIDDEN, scale=HIDDEN ** -0.5), "down": rnd(HIDDEN, MLP, scale=MLP ** -0.5),
            "rope": rope_cache(torch)}


def inputs(torch, tokens: int) -> tuple:
    """``(x, residual, positions, q, k)`` for ``tokens`` tokens."""
    g = torch.Generator(device="cuda").manual_seed(tokens)

    def rnd(*shape):
        return torch.randn(*shape, dtype=torch.bfloat16, device="cuda", generator=g)
    return (rnd(tokens, HIDDEN), rnd(tokens, HIDDEN), torch.randint(0, 4096, (tokens,), device="cuda", generator=g),
            rnd(tokens, HQ * HS), rnd(tokens, HK * HS))


#: the gate/up projection and its activation, ``(ops, w, x) -> act``: two kernels, or one whose store
#: applies the activation (the weight interleaved once at set-up, ``w["gate_up_interleaved"]``)
GATE_UP = {"axe": lambda ops, w, x: ops.silu_and_mul(ops.gemm(x, w["gate_up"], True)),
           "axe_fused": lambda ops, w, x: ops.gemm_silu_mul(x, w["gate_up_interleaved"])}


def axe_layer(torch, w, gate_up=GATE_UP["axe"]):
    """The layer from axe ops: ``f(x, residual, positions, q, k) -> (out, residual, q, k)``; x,
    residual, q and k are updated in place (vLLM's convention for the fused norm and the rotation);
    ``gate_up``: the MLP's first half (:data:`GATE_UP`)."""
    ops = torch.ops.axe

    def layer(x, residual, positions, q, k):
        ops.fused_add_rmsnorm(x, residual, w["in_norm"], EPS)
        ops.rotary_embedding(positions, q, k, HS, w["rope"], True)
        ops.fused_add_rmsnorm(x, residual, w["post_norm"], EPS)
        return ops.gemm(gate_up(ops, w, x), w["down"], True), residual, q, k
    return layer


def torch_layer(torch, w):
    """The same layer written with torch ops, functionally (inputs are not modified)."""
    F = torch.nn.functional

    def layer(x, residual, positions, q, k):
        residual = x + residual
        h = F.rms_norm(residual, (HIDDEN,), w["in_norm"], EPS)
        q, k = rope_torch(torch, positions, q.clone(), k.clone(), w["rope"])
        residual = h + residual
        h = F.rms_norm(residual, (HIDDEN,), w["post_norm"], EPS)
        gu = torch.matmul(h, w["gate_up"].t())
        act = F.silu(gu[:, :MLP]) * gu[:, MLP:]
        return torch.matmul(act, w["down"].t()), residual, q, k
    return layer


def check(torch, tokens, sides, tol=3e-2) -> dict:
    """Each side once on copies of the same inputs; ``{side: max error relative to the largest
    value}`` against torch eager over (out, residual, q, k); AssertionError past ``tol``."""
    base = inputs(torch, tokens)
    want = sides["torch"](*[t.clone() for t in base])
    errs = {}
    for name, fn in sides.items():
        got = fn(*[t.clone() for t in base])
        err = 0.0
        for what, a, b in zip(("out", "residual", "q", "k"), got, want):
            assert a.shape == b.shape, f"{name}, {tokens} tokens: {what} has shape {tuple(a.shape)}, torch {tuple(b.shape)}"
            assert not a.isnan().any(), f"{name}, {tokens} tokens: NaN in {what}"
            e = ((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-6)).item()
            assert e < tol, f"{name}, {tokens} tokens: {what} differs from torch eager by {e:.2e} (> {tol})"
            err = max(err, e)
        errs[name] = round(err, 5)
    return errs


def _ms(v, width: int) -> str:
    return f"{v:{width}.4f}" if v is not None else f"{'-':>{width}s}"


def build(args) -> int:
    os.environ["AXE_CACHE_DIR"] = args.cache         # the cache's tuning table names the GPUs to build picks for
    from axe.torch import ops
    return 1 if ops.prebuild(specs(), args.cache, TARGET) else 0


def run(args) -> int:
    import datetime

    os.environ["AXE_CACHE_DIR"] = args.cache
    import torch

    from axe.torch.ops import interleave_gate_up  # (registers torch.ops.axe)
    from axe.torch.timing import burst_ms, capture, graph_ms, median, round_robin
    from dist_bench import versions
    w = weights(torch)
    w["gate_up_interleaved"] = interleave_gate_up(w["gate_up"][:MLP], w["gate_up"][MLP:])
    compiled = torch.compile(torch_layer(torch, w), fullgraph=True, dynamic=False)
    sides = {**{name: axe_layer(torch, w, f) for name, f in GATE_UP.items()}, "torch": torch_layer(torch, w),
             "compile": compiled}
    rows, failed = [], 0
    print(f"{'tokens':>6s} {'mode':6s} {'axe ms':>8s} {'fused ms':>8s} {'torch ms':>9s} {'compile ms':>10s} "
          f"{'compile/axe':>11s} {'compile/fused':>13s}")
    for t in args.tokens:
        try:
            errs = check(torch, t, sides)
        except AssertionError as e:
            failed += 1
            rows.append({"tokens": t, "mode": "check", "error": str(e)})
            print(f"{t:6d} check FAILED: {e}")
            continue
        for mode in ("eager", "graph"):
            row = {"tokens": t, "mode": mode, "max_rel_err": errs}
            timers, keep = {}, []       # keep: each side's inputs (and graph), alive until its last round
            for name, fn in sides.items():
                args_ = inputs(torch, t)
                keep.append(args_)
                try:
                    if mode == "eager":
                        call = (lambda fn=fn, a=args_: fn(*a))
                        burst_ms(torch, call, calls=args.calls, blocks=1)          # warm-up
                        timers[name] = (lambda c=call: burst_ms(torch, c, calls=args.calls, blocks=1, warmup=0))
                    else:
                        graph, out = capture(torch, lambda fn=fn, a=args_: fn(*a))
                        keep.append((graph, out))
                        timers[name] = (lambda g=graph: graph_ms(torch, g, 1))
                except Exception as e:  # noqa: BLE001 - every side of every row is reported
                    failed += 1
                    row[f"{name}_ms"] = None
                    row.setdefault("errors", {})[name] = f"{type(e).__name__}: {e}"
            # the sides take turns, round after round, so a drift of clock or temperature falls on all
            for name, ms in round_robin(timers, args.rounds).items():
                row[f"{name}_ms"] = round(median(ms), 4)
            del timers, keep
            rows.append(row)
            a, f, c = row.get("axe_ms"), row.get("axe_fused_ms"), row.get("compile_ms")
            print(f"{t:6d} {mode:6s} {_ms(a, 8)} {_ms(f, 8)} {_ms(row.get('torch_ms'), 9)} {_ms(c, 10)} "
                  f"{(c / a if a and c else float('nan')):11.3f} {(c / f if f and c else float('nan')):13.3f}", flush=True)
    result = {"benchmark": "layer", "model": "Llama-3.1-8B (norms, RoPE, MLP)", "date": datetime.date.today().isoformat(),
              "device": torch.cuda.get_device_name(), "versions": versions(), "rows": rows}
    write(result, args.json)
    return 1 if failed else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("build", "run"))
    ap.add_argument("--cache", default=CACHE)
    ap.add_argument("--tokens", type=int, nargs="+", default=list(TOKENS))
    ap.add_argument("--calls", type=int, default=20, help="back-to-back calls per eager block")
    ap.add_argument("--rounds", type=int, default=15,
                    help="rounds; each times every side once (an eager block, or 10 graph replays), in turn")
    ap.add_argument("--json", help="output path (default $OUT or benchmarks/results, layer-DATE-DEVICE.json)")
    args = ap.parse_args(argv)
    return build(args) if args.what == "build" else run(args)


if __name__ == "__main__":
    sys.exit(main())
