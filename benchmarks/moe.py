#!/usr/bin/env python
"""MoE layer benchmark (Qwen3-30B-A3B: 128 experts, top-8, hidden 2048, intermediate 768), side by
side in one run on one H100/H200: axe (``kernels/moe.py``) vs SGLang's Triton fused MoE vs
torch's grouped GEMM vs plain torch (vs FlashInfer's ``cutlass_fused_moe`` where it can run),
latency per token count T, with the layer's lower bound.

Contract (the peers'): hidden states, top-8 ids and weights in, the combined output out; routing
is a separate op (axe's routing kernel is timed in its own column).  Every implementation is
checked against an fp32 torch reference before it is timed, and again on the output of its CUDA
graph replay; a failure is recorded with its exact error and the others still run.

Columns, each the median over ``--reps``:

- *eager*: one call between two CUDA events, host launch overhead included (what a Python
  caller sees; :func:`axe.torch.timing.eager_ms`);
- *graph*: the whole layer captured once per T into a CUDA graph and replayed back to back (GPU
  time without host overhead, as serving stacks run decode; :func:`axe.torch.timing.graph_ms`); with
  ``--rounds R`` the median of R rounds timed round robin over the implementations (each round's
  figure in the JSON as ``*_graph_rounds``);
- *bound*: ``max(bytes / copy bandwidth, flops / mm throughput)`` with the bytes and flops
  counted in :mod:`benchmarks.moe_bounds` and both rates measured in this run; *fraction* is
  bound / axe's graph time.

Implementations:

- ``axe``: the ``.carry/moe`` artifacts (align, permute, two grouped GEMMs, combine).
- ``sglang``: SGLang 0.5.23's Triton kernels loaded unchanged from its wheel's files
  (``.carry/moe/sglang``, which ``build_moe.py`` extracts from ``.whl/``), its tuned configs; what runs and what substitutes its CUDA-only pieces is listed in
  :mod:`benchmarks.moe_sglang` (its CUDA align runs through tvm-ffi, whose cp312 wheel is unpacked
  from ``.whl/``).  ``sglang_align`` times its alignment step alone; ``sglang_experts`` (T·8 > 64)
  is the layer without it (``vs_sglang_experts`` in the JSON).
- ``torch_grouped``: ``torch._grouped_mm`` (ATen's CUTLASS grouped GEMM) for both GEMMs, with
  the sort, SiLU·up and the weighted sum in torch; capturable (no host sync).
- ``torch``: plain torch, one matmul pair per active expert; eager only (it reads the active
  experts on the host, which a graph cannot capture).
- ``flashinfer``: :data:`FLASHINFER_WHY` says why it does not run on the lent machines; if the
  package imports, ``cutlass_fused_moe`` runs.

Usage (GPU machine): ``python3 benchmarks/moe.py [--artifacts .carry/moe] [--sglang DIR]
[--tokens 1 8 ...] [--dtype bfloat16] [--out FILE.json] [--md FILE.md]``.  About two minutes.
"""

import argparse
import datetime
import glob
import json
import os
import sys
import tempfile
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import moe_bounds  # noqa: E402
from axe.torch import timing as cuda_timing  # noqa: E402
from kernels.moe_host import CONFIGS  # noqa: E402

TOKENS = (1, 8, 32, 128, 512, 1024, 2048, 4096)
TOL = 3e-2              # max |error| / max |reference|: bf16 rounding of two GEMMs' outputs
PEERS = ("sglang", "torch_grouped", "flashinfer")
DEVICE = "cuda"         # tests run the control flow on "cpu" with stand-in timers
FLASHINFER_WHY = (
    "not carried: its Hopper cutlass_fused_moe is not prebuilt in flashinfer-python 0.7.2 (the version sglang "
    "0.5.23 pins): the first call JIT-compiles module fused_moe_90 with nvcc from 28 CUTLASS/TensorRT-LLM sources "
    "plus generated grouped-GEMM instantiations for every dtype pair; the prebuilt module ships only in "
    "flashinfer-jit-cache, which is not on PyPI (flashinfer-cubin, 458 MB, holds trtllm-gen cubins, not this "
    "module). The wheel itself is 62.2 MiB and declares apache-tvm-ffi, cuda-tile, nvidia-cutlass-dsl, nccl4py and "
    "nvidia-cudnn-frontend as dependencies, beyond the 64 MiB carry beside the MoE artifacts")


def torch_plain(torch, x, w1, w2, ids, weights):
    """The layer in plain torch (bf16/fp16 matmuls, one loop over the active experts)."""
    inter = w2.shape[2]
    out = torch.zeros(x.shape[0], w2.shape[1], dtype=torch.float32, device=x.device)
    for e in torch.unique(ids).tolist():
        t, j = (ids == e).nonzero(as_tuple=True)
        g = x[t] @ w1[e].t()
        a = torch.nn.functional.silu(g[:, :inter]) * g[:, inter:]
        out.index_add_(0, t, (a @ w2[e].t()).float() * weights[t, j, None])
    return out.to(x.dtype)


def torch_grouped(torch, x, w1, w2, ids, weights):
    """The layer with ``torch._grouped_mm`` for both GEMMs: (token, slot) pairs sorted by expert,
    group ends from a device-side count (no host sync, so it captures into a graph)."""
    topk, inter = ids.shape[1], w2.shape[2]
    flat = ids.flatten().long()
    order = torch.argsort(flat, stable=True)
    counts = torch.zeros(w1.shape[0], dtype=torch.int32, device=x.device)
    counts.index_add_(0, flat, torch.ones_like(flat, dtype=torch.int32))
    ends = torch.cumsum(counts, 0, dtype=torch.int32)
    rows = order // topk
    g = torch._grouped_mm(x[rows], w1.transpose(1, 2), offs=ends)
    a = torch.nn.functional.silu(g[:, :inter]) * g[:, inter:]
    y = torch._grouped_mm(a, w2.transpose(1, 2), offs=ends)
    out = torch.zeros(x.shape[0], w2.shape[1], dtype=torch.float32, device=x.device)
    out.index_add_(0, rows, y.float() * weights.flatten()[order, None])
    return out.to(x.dtype)


def flashinfer_peer(torch, w1):
    """FlashInfer's ``cutlass_fused_moe`` as ``fn(x, w1, w2, ids, weights)``; raises where the
    package is absent, the reason then being :data:`FLASHINFER_WHY`."""
    from flashinfer.fused_moe import cutlass_fused_moe
    inter = w1.shape[1] // 2
    # FlashInfer's fc1 holds [up; gate] (SwiGLU with the gate second): swap our halves once
    fc1 = torch.cat([w1[:, inter:], w1[:, :inter]], 1).contiguous()
    return lambda x, w1, w2, ids, weights: cutlass_fused_moe(x, ids, weights, fc1, w2, x.dtype)[0]


def unpack_wheel(folder, dist, dest):
    """Unzip the one ``dist-*.whl`` of ``folder`` into ``dest`` and put it first on ``sys.path``
    (a binary wheel built for this Python, without its dependencies); returns its file name."""
    import zipfile
    wheel = find_wheel(folder, dist)
    with zipfile.ZipFile(wheel) as z:
        z.extractall(dest)
    sys.path.insert(0, dest)
    return os.path.basename(wheel)


def find_wheel(folder, dist):
    """The one ``dist-*.whl`` in ``folder``."""
    found = sorted(glob.glob(os.path.join(folder, f"{dist}-*.whl")))
    if len(found) != 1:
        raise FileNotFoundError(f"expected one {dist}-*.whl in {folder}, found {[os.path.basename(f) for f in found]}")
    return found[0]


def rel_err(torch, got, ref):
    return ((got.float() - ref).abs().max() / ref.abs().max()).item()


def reps_for(tokens, reps):
    """Fewer repetitions where one call is long, to keep the whole run within minutes."""
    return reps if tokens <= 1024 else max(10, reps // 2)


def fastest_configs(stages, dtype):
    """``{T: configuration}``: for each token count of a ``benchmarks/moe_stages.py`` result in
    ``dtype``, the configuration (not a variant: those are experiments) whose whole layer was
    fastest among the rows that passed their correctness check."""
    best = {}
    if stages.get("dtype") != dtype:
        return best
    for row in stages["rows"]:
        if row.get("variant") in CONFIGS and "layer_ms" in row:
            t = row["T"]
            if t not in best or row["layer_ms"] < best[t][1]:
                best[t] = (row["variant"], row["layer_ms"])
    return {t: cfg for t, (cfg, _) in best.items()}


def pick_config(args, tokens, fastest):
    """axe's configuration for ``tokens``: the fastest measured one where ``--configs-from`` gave it,
    else ``--config`` (``auto``: :func:`kernels.moe_host.config_for`)."""
    if tokens in fastest:
        return fastest[tokens]
    from kernels import moe_host
    return moe_host.config_for(tokens) if args.config == "auto" else args.config


def measure(torch, name, fn, ref, row, errors, reps, graph=True):
    """Check ``fn()`` against ``ref`` eagerly, time it eagerly; capture it into a CUDA graph, check
    a replay's output (the output buffer poisoned with NaN first), time the replays.  Results go
    to ``row[name]``, ``row[name + "_graph"]`` and their ``_err``; failures to ``errors``."""
    tag = f"{name} T={row['T']}"
    try:
        row[f"{name}_err"] = err = rel_err(torch, fn(), ref)
        if not err <= TOL:
            raise AssertionError(f"rel. error {err:.2e} against the fp32 reference (tolerance {TOL})")
        row[name] = cuda_timing.eager_ms(torch, fn, reps)
    except Exception as e:          # noqa: BLE001 - recorded; the other implementations still run
        errors[tag] = f"{type(e).__name__}: {e}"
        traceback.print_exc()
        return
    if not graph:
        return
    try:
        g, out = cuda_timing.capture(torch, fn)
        out.fill_(float("nan"))
        g.replay()
        row[f"{name}_graph_err"] = err = rel_err(torch, out, ref)
        if not err <= TOL:
            raise AssertionError(f"graph replay: rel. error {err:.2e} against the fp32 reference")
        row[f"{name}_graph"] = cuda_timing.graph_ms(torch, g, reps)
        return g
    except Exception as e:          # noqa: BLE001
        errors[f"{tag} graph"] = f"{type(e).__name__}: {e}"
        traceback.print_exc()


def interleaved_rounds(torch, graphs, row, reps, rounds):
    """Time every captured graph ``rounds`` more times, round robin (axe, peer, axe, peer, ...), so
    that a drift of the GPU's clock or temperature falls on every side alike; ``row[name +
    "_graph"]`` becomes the median over all rounds (the first included) and ``_graph_rounds``
    keeps each round's figure: a difference smaller than their spread is noise."""
    more = cuda_timing.round_robin({name: (lambda g: lambda: cuda_timing.graph_ms(torch, g, reps))(g)
                                    for name, g in graphs.items()}, rounds)
    for name, times in more.items():
        row[f"{name}_graph_rounds"] = [row[f"{name}_graph"]] + times
        row[f"{name}_graph"] = cuda_timing.median(row[f"{name}_graph_rounds"])


def time_only(torch, name, fn, row, errors, reps):
    """Eager and graph time of a step that has no output of its own to check (``sglang_align``:
    its result is checked through the layer it feeds)."""
    try:
        row[name] = cuda_timing.eager_ms(torch, fn, reps)
        g, _ = cuda_timing.capture(torch, fn)
        row[f"{name}_graph"] = cuda_timing.graph_ms(torch, g, reps)
    except Exception as e:          # noqa: BLE001
        errors[f"{name} T={row['T']}"] = f"{type(e).__name__}: {e}"


def summarize(row, peers):
    """Add the best peer's time over axe's (> 1: axe faster), eager and graph, and axe's fraction
    of the bound (graph and eager) to ``row``."""
    for suffix in ("", "_graph"):
        times = {p: row[p + suffix] for p in peers if p + suffix in row}
        if times and "axe" + suffix in row:
            best = min(times, key=times.get)
            row[f"best_peer{suffix}"] = best
            row[f"vs_best{suffix}"] = times[best] / row["axe" + suffix]
        if "axe" + suffix in row:
            row[f"axe_bound_fraction{suffix}"] = row["bound_ms"] / row["axe" + suffix]
            if "sglang_experts" + suffix in row:
                row[f"vs_sglang_experts{suffix}"] = row["sglang_experts" + suffix] / row["axe" + suffix]


def _cell(row, key, fmt="{:.4f}"):
    return fmt.format(row[key]) if key in row else "-"


def table(result):
    """The markdown table of ``result`` (times in ms; ratios as best peer / axe)."""
    peers = [p for p in PEERS if any(p in r or f"{p}_graph" in r for r in result["rows"])]
    head = ["T", "experts hit", "axe eager", "axe graph"]
    for p in peers:
        head += [f"{p} eager", f"{p} graph"]
    extra = [k for k in ("sglang_align_graph", "sglang_experts_graph") if any(k in r for r in result["rows"])]
    head += [k.replace("_", " ") for k in extra] + ["torch eager", "best peer / axe eager",
                                                   "best peer / axe graph", "bound", "axe graph / bound"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in result["rows"]:
        cells = [str(r["T"]), _cell(r, "experts_hit", "{}"), _cell(r, "axe"), _cell(r, "axe_graph")]
        for p in peers:
            cells += [_cell(r, p), _cell(r, f"{p}_graph")]
        cells += [_cell(r, k) for k in extra]
        cells += [_cell(r, "torch", "{:.3f}"),
                  (_cell(r, "vs_best", "{:.2f}x") + f" ({r['best_peer']})") if "vs_best" in r else "-",
                  (_cell(r, "vs_best_graph", "{:.2f}x") + f" ({r['best_peer_graph']})") if "vs_best_graph" in r
                  else "-",
                  _cell(r, "bound_ms"), _cell(r, "axe_bound_fraction_graph", "{:.2f}")]
        lines.append("| " + " | ".join(cells) + " |")
    dev = result.get("device_rates", {})
    if dev:
        lines.append("")
        lines.append(f"Bound rates measured in this run: copy {dev['copy_bytes_per_s'] / 1e12:.2f} TB/s "
                     f"(read + write), {result['dtype']} torch.mm {dev['mm_flop_per_s'] / 1e12:.0f} TFLOP/s.")
    return "\n".join(lines)


def triton_version():
    """Triton's version where it imports (SGLang's kernels are Triton), else why not."""
    try:
        import triton
        return triton.__version__
    except ImportError as err:
        return f"not importable: {err}"


def load_peers(torch, args, w1, result):
    """``{name: fn(x, w1, w2, ids, weights)}`` of the peers that can run, and the SGLang module
    namespace (or None); every reason a peer cannot run goes to ``result["errors"]``."""
    peers = {"torch_grouped": lambda x, w1, w2, ids, weights: torch_grouped(torch, x, w1, w2, ids, weights)}
    sglang = None
    try:
        from benchmarks import moe_sglang
        source = args.sglang if args.sglang and os.path.isdir(args.sglang) else find_wheel(args.wheels, "sglang")
        info = result["sglang"] = {"source": source, "wheel": moe_sglang.wheel_of(source), "steps": moe_sglang.STEPS}
        # tvm-ffi would JIT-build a torch DLPack addon at import where torch lacks the native exchange
        # API; it then converts tensors through __dlpack__ instead (torch's own API is used if present)
        os.environ.setdefault("TVM_FFI_DISABLE_TORCH_C_DLPACK", "1")
        try:        # tvm-ffi loads SGLang's CUDA align; without it the Triton substitute runs
            info["tvm_ffi_wheel"] = unpack_wheel(args.wheels, "apache_tvm_ffi",
                                                 os.path.join(tempfile.gettempdir(), "axe_tvm_ffi"))
        except OSError as err:
            info["tvm_ffi_wheel"] = f"{type(err).__name__}: {err}"
        sglang = moe_sglang.load(source, os.path.join(tempfile.gettempdir(), "axe_sglang"))
        info["cuda_align"] = "loaded" if sglang.cuda_align is not None else sglang.cuda_align_error
    except Exception as err:        # noqa: BLE001 - the peer cannot run here: say why, keep the others
        result["errors"]["sglang"] = f"{type(err).__name__}: {err}"
        traceback.print_exc()
    try:
        peers["flashinfer"] = flashinfer_peer(torch, w1)
    except ImportError as err:
        result["errors"]["flashinfer"] = f"{FLASHINFER_WHY} ({type(err).__name__}: {err})"
    except Exception as err:        # noqa: BLE001
        result["errors"]["flashinfer"] = f"{type(err).__name__}: {err}"
    return peers, sglang


def run_tokens(torch, tokens, ctx, result):
    """One row: every implementation on ``tokens`` tokens."""
    from kernels import moe_host as moe
    args, dt, w1, w2 = ctx["args"], ctx["dt"], ctx["w1"], ctx["w2"]
    errors, reps = result["errors"], reps_for(tokens, args.reps)
    row = {"T": tokens, "reps": reps}
    x, logits = moe.inputs(torch, tokens, dt, DEVICE, w1.shape[0])
    ids, weights = moe.route_reference(logits)
    ref = moe.reference(x, w1, w2, ids.long(), weights)
    row["experts_hit"] = hit = int(torch.unique(ids).numel())
    row.update(moe_bounds.counted(tokens, hit, moe.TOPK, moe.HIDDEN, moe.INTER, x.element_size()))
    row.update(moe_bounds.bound_ms(row, ctx["bw"], ctx["peak"]))
    cfg = pick_config(args, tokens, ctx.get("fastest", {}))
    graphs = {}
    if cfg in ctx["axe"]:
        layer = moe.Layer(ctx["axe"][cfg], tokens, cfg, args.dtype)
        row["axe_config"] = cfg
        graphs["axe"] = measure(torch, "axe", lambda: layer.experts(x, w1, w2, ids, weights), ref, row, errors, reps)
        time_only(torch, "axe_route", lambda: layer.route(logits), row, errors, reps)
    if ctx["sglang"] is not None:
        try:
            from benchmarks import moe_sglang
            peer = moe_sglang.Peer(ctx["sglang"], x, w1, w2, ids, weights)
            row["sglang_ran"] = peer.describe()
            graphs["sglang"] = measure(torch, "sglang", peer, ref, row, errors, reps)
            time_only(torch, "sglang_align", peer.align, row, errors, reps)
            if not peer.small:      # the substitute align left out: a lower bound on SGLang's own layer
                measure(torch, "sglang_experts", peer.experts, ref, row, errors, reps)
        except Exception as e:      # noqa: BLE001
            errors[f"sglang T={tokens}"] = f"{type(e).__name__}: {e}"
            traceback.print_exc()
    for name, fn in ctx["peers"].items():
        graphs[name] = measure(torch, name, (lambda f: lambda: f(x, w1, w2, ids, weights))(fn), ref, row, errors, reps)
    if args.rounds > 1:
        interleaved_rounds(torch, {k: g for k, g in graphs.items() if g is not None}, row, reps, args.rounds - 1)
    measure(torch, "torch", lambda: torch_plain(torch, x, w1, w2, ids.long(), weights), ref, row, errors,
            min(reps, 10), graph=False)
    summarize(row, PEERS)
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifacts", default=os.path.join(ROOT, ".carry", "moe"))
    ap.add_argument("--no-peers", action="store_true", help="time axe only (configuration experiments)")
    ap.add_argument("--sglang", default=os.path.join(ROOT, ".carry", "moe", "sglang"),
                    help="SGLang's files as build_moe.py extracts them (else the wheel in --wheels is used)")
    ap.add_argument("--wheels", default=os.path.join(ROOT, ".whl"))
    ap.add_argument("--tokens", nargs="*", type=int, default=list(TOKENS))
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=1,
                    help="graph timings in this many interleaved rounds per T (median reported, every round kept)")
    ap.add_argument("--config", default="auto", choices=("auto",) + tuple(CONFIGS),
                    help="axe's tile configuration (auto: kernels/moe_host.py's config_for(T))")
    ap.add_argument("--configs-from", default=None, metavar="STAGES.json",
                    help="per T, the configuration whose whole layer was fastest in a benchmarks/moe_stages.py "
                         "result (correct rows only; other T fall back to --config)")
    ap.add_argument("--out", default=None, help="JSON path (default $OUT/moe-DATE.json)")
    ap.add_argument("--md", default=None, help="markdown table path (default: the JSON path with .md)")
    args = ap.parse_args(argv)
    import torch
    from axe import runtime as rt
    from kernels import moe_host as moe
    dt = getattr(torch, args.dtype)
    result = {"date": datetime.date.today().isoformat(), "device": torch.cuda.get_device_name(), "dtype": args.dtype,
              "torch": torch.__version__, "triton": triton_version(), "errors": {}, "rows": []}
    timed = lambda fn: cuda_timing.eager_ms(torch, fn, 10)     # noqa: E731
    bw, peak = moe_bounds.copy_bandwidth(torch, timed), moe_bounds.mm_throughput(torch, timed, dt)
    result["device_rates"] = {"copy_bytes_per_s": bw, "mm_flop_per_s": peak}
    print(f"copy {bw / 1e12:.2f} TB/s, mm {peak / 1e12:.0f} TFLOP/s", flush=True)
    w1, w2 = moe.expert_weights(torch, dt)
    peers, sglang = ({}, None) if args.no_peers else load_peers(torch, args, w1, result)
    axe = {}
    for cfg in moe.CONFIGS:
        try:
            axe[cfg] = {r: rt.load(os.path.join(args.artifacts, n)) for r, n in moe.artifact_names(args.dtype, cfg).items()}
        except Exception as err:    # noqa: BLE001
            result["errors"][f"axe {cfg}"] = f"{type(err).__name__}: {err}"
    ctx = dict(args=args, dt=dt, w1=w1, w2=w2, bw=bw, peak=peak, axe=axe, sglang=sglang, peers=peers)
    if args.configs_from:
        with open(args.configs_from) as f:
            ctx["fastest"] = result["configs_from"] = fastest_configs(json.load(f), args.dtype)
    out = args.out or os.path.join(os.environ.get("OUT", ROOT), f"moe-{result['date']}.json")
    md = args.md or os.path.splitext(out)[0] + ".md"
    for tokens in args.tokens:
        result["rows"].append(run_tokens(torch, tokens, ctx, result))
        print(json.dumps(result["rows"][-1]), flush=True)
        with open(out, "w") as f:           # rewritten after every row: a cut-off run keeps its rows
            json.dump(result, f, indent=1)
    text = table(result)
    print("\n" + text)
    for k, v in result["errors"].items():
        print(f"error {k}: {v}")
    with open(md, "w") as f:
        f.write(text + "\n")
    print("wrote", out, md)


if __name__ == "__main__":
    main()
