#!/usr/bin/env python
"""Where the MoE layer's time goes: each axe stage (align, permute, grouped GEMM 1, grouped GEMM 2,
combine) timed alone from its own CUDA graph, per token count, for every tile configuration of
``kernels/moe_host.py`` and every grouped-GEMM variant ``benchmarks/build_moe.py --variant`` built,
with the weight bandwidth each grouped GEMM reaches against the device's measured read and copy
rates; the whole layer is timed with programmatic dependent launch (``layer_ms``) and in plain
stream order (``layer_plain_ms``, ``AXE_PROGRAMMATIC_LAUNCH=0``).

Every variant's layer output is checked against the fp32 torch reference before its stages are
timed (a wrong variant is reported and not timed).

Usage (GPU machine): ``python3 benchmarks/moe_stages.py [--artifacts .carry/moe] [--tokens ...]
[--out FILE.json]``.
"""

import argparse
import datetime
import glob
import json
import os
import sys
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import moe, moe_bounds  # noqa: E402
from axe.torch import timing as cuda_timing  # noqa: E402



def variants(folder, dtype, config):
    """``{tag: (gemm1 name, gemm2 name)}``: the configuration's own pair and every built variant of
    it (``moe_gemm1_DTYPE_CONFIG_*`` with its gemm2 twin); a fused configuration: ``{config: ()}``
    (its one kernel is among :func:`kernels.moe_host.artifact_names`)."""
    from kernels.moe_host import CONFIGS, artifact_names, gemm_config
    if CONFIGS[config].get("fused"):      # one kernel for both GEMMs: artifact_names has it
        return {config: ()}
    names = artifact_names(dtype, config)
    out = {config: (names["gemm1"], names["gemm2"])}
    if gemm_config(config) != config:     # another configuration's GEMMs: their variants are that one's
        return out
    for path in sorted(glob.glob(os.path.join(folder, f"moe_gemm1_{dtype}_{config}_*"))):
        tag = os.path.basename(path)[len(f"moe_gemm1_{dtype}_"):]
        owner = max((c for c in CONFIGS if tag.startswith(c + "_") or tag == c), key=len)
        if owner != config:         # another configuration, or a variant of one (its own padding)
            continue
        if os.path.isdir(os.path.join(folder, f"moe_gemm2_{dtype}_{tag}")):
            out[tag] = (f"moe_gemm1_{dtype}_{tag}", f"moe_gemm2_{dtype}_{tag}")
    return out


def graph_time(torch, fn, reps):
    g, _ = cuda_timing.capture(torch, fn)
    return cuda_timing.graph_ms(torch, g, reps)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifacts", default=os.path.join(ROOT, ".carry", "moe"))
    ap.add_argument("--tokens", nargs="*", type=int, default=list(moe.TOKENS))
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--variants", nargs="*", default=None,
                    help="time only these tags (a configuration's name or a built variant's, e.g. small_gather_bk128)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import torch
    from axe import runtime as rt
    from kernels import moe_host as mh
    dt = getattr(torch, args.dtype)
    timed = lambda fn: cuda_timing.eager_ms(torch, fn, 10)     # noqa: E731
    rates = {"copy_bytes_per_s": moe_bounds.copy_bandwidth(torch, timed),
             "read_bytes_per_s": moe_bounds.read_bandwidth(torch, timed)}
    result = {"date": datetime.date.today().isoformat(), "device": torch.cuda.get_device_name(),
              "dtype": args.dtype, "torch": torch.__version__, "device_rates": rates, "errors": {}, "rows": []}
    print({k: f"{v / 1e12:.2f} TB/s" for k, v in rates.items()}, flush=True)
    w1, w2 = mh.expert_weights(torch, dt)
    loaded = {}

    def kern(name):
        if name not in loaded:
            loaded[name] = rt.load(os.path.join(args.artifacts, name))
        return loaded[name]

    out = args.out or os.path.join(os.environ.get("OUT", ROOT), f"moe-stages-{result['date']}.json")
    for tokens in args.tokens:
        x, logits = mh.inputs(torch, tokens, dt)
        ids, weights = mh.route_reference(logits)
        ref = mh.reference(x, w1, w2, ids.long(), weights)
        hit = int(torch.unique(ids).numel())
        per1, per2 = 2 * mh.INTER * mh.HIDDEN * x.element_size(), mh.HIDDEN * mh.INTER * x.element_size()
        for cfg in mh.CONFIGS:
            base = mh.artifact_names(args.dtype, cfg)
            for tag, gemms in variants(args.artifacts, args.dtype, cfg).items():
                if args.variants is not None and tag not in args.variants:
                    continue
                row = {"T": tokens, "experts_hit": hit, "variant": tag}
                try:
                    roles = dict(base, **dict(zip(("gemm1", "gemm2"), gemms)))
                    kernels = {r: kern(n) for r, n in roles.items()}
                    layer = mh.Layer(kernels, tokens, cfg, args.dtype)
                    row["err"] = err = moe.rel_err(torch, layer.experts(x, w1, w2, ids, weights), ref)
                    if not err <= moe.TOL:
                        raise AssertionError(f"rel. error {err:.2e} against the fp32 reference")
                    row["padded_rows"] = int(layer.meta[1].item())
                    row["layer_ms"] = graph_time(torch, lambda: layer.experts(x, w1, w2, ids, weights), args.reps)
                    os.environ["AXE_PROGRAMMATIC_LAUNCH"] = "0"     # the same layer in plain stream order
                    try:
                        row["layer_plain_ms"] = graph_time(torch, lambda: layer.experts(x, w1, w2, ids, weights),
                                                           args.reps)
                    finally:
                        os.environ.pop("AXE_PROGRAMMATIC_LAUNCH")
                    steps = layer.steps(x, w1, w2, ids, weights)
                    for stage, fn in steps.items():
                        row[f"{stage}_ms"] = graph_time(torch, fn, args.reps)
                    for step, nbytes in (("gemm1", per1), ("gemm2", per2), ("experts", per1 + per2)):
                        if f"{step}_ms" in row:
                            row[f"{step}_weight_TBps"] = hit * nbytes / row[f"{step}_ms"] * 1e-9
                    row["stages_sum_ms"] = sum(row[f"{s}_ms"] for s in steps)
                except Exception as e:      # noqa: BLE001 - recorded; the other variants still run
                    result["errors"][f"{tag} T={tokens}"] = f"{type(e).__name__}: {e}"
                    traceback.print_exc()
                result["rows"].append(row)
                print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
                with open(out, "w") as f:
                    json.dump(result, f, indent=1)
    print("wrote", out)


if __name__ == "__main__":
    main()
