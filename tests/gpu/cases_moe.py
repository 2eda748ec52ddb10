"""GPU cases for the fused MoE layer (``kernels/moe.py``): build here, check on an H100/H200.

Every artifact of :func:`kernels.moe.builds` (both dtypes, both tile configurations) has a
check; the checks load their sibling artifacts from the same folder, so one layer run uses the
route, align, permute, two grouped GEMMs and the combine that were built together.

- route: ids and weights against torch's top-8 of the softmax, renormalized (random logits);
- align: the permutation against the padding and tile laws (:mod:`kernels.parts.schedulers.padding`) and a
  brute-force per-expert set comparison, for uniform and skewed routings (most experts empty);
- permute, the GEMMs and the combine: the whole layer against an fp32 torch reference at
  T = 1, 8, 32, 128, 512, 1024, 2048, 4096 (each configuration at the T it serves, plus the
  boundary), uniform and skewed routings, outputs poisoned with NaN first.  Tolerance: the
  layer rounds h and y to the 16-bit dtype (as SGLang's kernels do); over K = 2048 and 768 with
  fp32 accumulation the error is a few units of that rounding relative to the output's scale:
  max |out - ref| <= 2e-2 · max |ref| (bf16: 8 mantissa bits, 3.9e-3 per rounding) / 5e-3 (fp16).
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TOKENS = {"small": (1, 8, 32, 64, 128, 512), "large": (513, 1024, 2048, 4096)}
# the 16-row-padded and gathering twins serve the same T
TOKENS.update({f"{c}_{v}": t for c, t in list(TOKENS.items()) for v in ("pad16", "gather")})
TOKENS["tiny_gather"] = (1, 2, 8, 32)
TOKENS.update(small_gather_sk=TOKENS["small"], large_gather_sk=TOKENS["large"], large_gather_sa=TOKENS["large"],
              large_sa=TOKENS["large"])
TOKENS.update(small_fused=TOKENS["small"], large_fused=TOKENS["large"], tiny_fused=TOKENS["tiny_gather"])
TOL = {"bfloat16": 2e-2, "float16": 5e-3}


def _moe():
    """The host side (``kernels.moe_host``: no TVM, so it loads on the GPU machine)."""
    sys.path.insert(0, ROOT)
    from kernels import moe_host
    return moe_host


def _names():
    moe = _moe()
    names = {n for d in moe.DTYPES for c in moe.CONFIGS for n in moe.artifact_names(d, c).values()}
    return sorted(names)


def _builder(name, kernel):
    def build():
        import axe.lang as Ax
        return Ax.compile_kernel(kernel, "sm_90a")
    return build


def _builds():
    try:
        from kernels import moe
    except ImportError:     # the GPU machine has no TVM: run_all needs only the names (CHECKS)
        return {}
    return {name: _builder(name, k) for name, k in moe.builds().items()}


BUILDS = _builds()


def _siblings(kernel, dtype, config):
    from axe import runtime as rt
    moe = _moe()
    folder = os.path.dirname(os.path.abspath(kernel.artifact.path))
    return {role: rt.load(os.path.join(folder, name)) for role, name in moe.artifact_names(dtype, config).items()}


def _logits(torch, tokens, skewed, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    logits = torch.randn(tokens, 128, device="cuda", generator=g)
    if skewed:      # 12 hot experts take nearly every token: most experts get none, hot ones many tiles
        logits[:, :12] += 8.0
    return logits


def _weights(torch, dtype, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    dt = getattr(torch, dtype)
    w1 = (torch.randn(128, 1536, 2048, device="cuda", generator=g) / 2048 ** 0.5).to(dt)
    w2 = (torch.randn(128, 2048, 768, device="cuda", generator=g) / 768 ** 0.5).to(dt)
    return w1, w2


def check_route(kernel, torch):
    moe = _moe()
    dtype = kernel.launch["name"].split("_", 2)[2]
    for tokens in (1, 5, 4096):
        logits = _logits(torch, tokens, False, tokens).to(getattr(torch, dtype))
        ids = torch.full((tokens, 8), -7, dtype=torch.int32, device="cuda")
        w = torch.full((tokens, 8), float("nan"), device="cuda")
        kernel(logits, ids, w)
        torch.cuda.synchronize()
        rid, rw = moe.route_reference(logits)
        same = (ids.sort(-1).values == rid.sort(-1).values).all(-1)
        # logits rounded to 16 bits tie now and then: a tied token may pick either expert
        assert same.float().mean() > 0.99, f"route T={tokens}: {(~same).sum().item()} tokens chose other experts"
        err = (w.sort(-1).values - rw.sort(-1).values)[same].abs().max().item()
        assert err < 1e-5 and not w.isnan().any(), f"route T={tokens}: weights off by {err}"
    return "T = 1, 5, 4096: top-8 ids and renormalized weights match torch"


def check_align(kernel, torch):
    import re
    from kernels.parts.schedulers.padding import capacity, segments, tile_capacity, tiles
    bm, pad = re.fullmatch(r"moe_align_bm(\d+)(?:_pad(\d+))?(?:_split)?", kernel.launch["name"]).groups()
    bm = int(bm)
    pad = int(pad or bm)
    for tokens, skewed in ((1, False), (32, False), (4096, False), (4096, True), (300, True)):
        ids = torch.topk(_logits(torch, tokens, skewed, 7), 8, dim=-1).indices.to(torch.int32)
        P, MT = capacity(tokens * 8, 128, pad), tile_capacity(tokens * 8, 128, bm)
        srt = torch.full((P,), 12345, dtype=torch.int32, device="cuda")
        tile_expert = torch.full((MT,), -9, dtype=torch.int32, device="cuda")
        tile_rows = torch.full((MT, 2), -9, dtype=torch.int32, device="cuda")
        meta = torch.full((4,), -1, dtype=torch.int32, device="cuda")
        pos = torch.full((tokens, 8), -1, dtype=torch.int32, device="cuda")
        kernel(ids, srt, tile_expert, tile_rows, meta, pos)
        torch.cuda.synchronize()
        counts = torch.bincount(ids.flatten().long(), minlength=128).tolist()
        offsets, total = segments(counts, pad)
        want = tiles(counts, pad, bm)
        assert meta[:2].tolist() == [len(want), total], f"align T={tokens}: meta {meta.tolist()}, want {[len(want), total]}"
        got = list(zip(tile_expert[:len(want)].tolist(), *zip(*tile_rows[:len(want)].tolist())))
        assert got == want, f"align T={tokens}: tiles (expert, start, own rows) differ from the law"
        s, ids_c, pos_c = srt.cpu(), ids.cpu(), pos.cpu()
        assert (s[total:] == -1).all(), f"align T={tokens}: rows past the padded total are not -1"
        for e in range(128):
            seg = s[offsets[e]:offsets[e] + -(-counts[e] // pad) * pad]
            want_rows = sorted((ids_c == e).nonzero()[:, 0].tolist())
            assert sorted(seg[seg >= 0].tolist()) == want_rows and (seg[counts[e]:] == -1).all(), \
                f"align T={tokens}: expert {e}'s rows differ"
        rows = torch.arange(tokens).unsqueeze(1).expand(tokens, 8)
        assert (s[pos_c.long()] == rows).all(), f"align T={tokens}: pos does not point at the token's row"
        assert len(set(pos_c.flatten().tolist())) == tokens * 8, f"align T={tokens}: pos repeats a row"
    return f"bm={bm} pad={pad}: T = 1, 32, 300 (skewed), 4096 (uniform, skewed) match the padding and tile laws"


_LAYER_CHECKED = {}     # (dtype, configuration) -> its summary, or the exception its check raised


def check_layer(kernel, torch):
    """The whole layer of every configuration this artifact belongs to (a GEMM: its own; the
    permute and the combine: all but the fused ones), each (dtype, configuration) run once per
    process and its outcome reported for every artifact of it."""
    moe = _moe()
    name = kernel.launch["name"]
    dtype = "bfloat16" if "bfloat16" in name else "float16"
    # the permute and the combine: every configuration but the fused ones (whose own artifacts check
    # them, in a process of their own)
    configs = [c for c in moe.CONFIGS if name.endswith(c)] or [c for c, kw in moe.CONFIGS.items() if not kw.get("fused")]
    done = []
    for config in configs:
        key = (dtype, config)
        if key not in _LAYER_CHECKED:
            try:
                _LAYER_CHECKED[key] = _check_config(kernel, torch, dtype, config)
            except Exception as e:      # noqa: BLE001 - kept, and raised for every artifact of the config
                _LAYER_CHECKED[key] = e
        if isinstance(_LAYER_CHECKED[key], Exception):
            raise _LAYER_CHECKED[key]
        done.append(f"{config}: {_LAYER_CHECKED[key]}")
    return f"{dtype} " + "; ".join(done)


def _check_config(kernel, torch, dtype, config):
    """The layer of ``config`` against the fp32 reference at the T it serves, uniform and skewed
    routing, its outputs poisoned with NaN first; the summary of errors."""
    moe = _moe()
    dt = getattr(torch, dtype)
    w1, w2 = _weights(torch, dtype, 1)
    done = []
    ks = _siblings(kernel, dtype, config)
    # AXE_MOE_CHECK_TOKENS=1,32: only these of the configuration's token counts (a sanitizer, which
    # runs each launch many times slower, then finishes in its time)
    only = {int(t) for t in os.environ.get("AXE_MOE_CHECK_TOKENS", "").split(",") if t}
    for tokens in [t for t in TOKENS[config] if not only or t in only] or TOKENS[config][:1]:
        for skewed in (False, True):
            g = torch.Generator(device="cuda").manual_seed(tokens)
            x = torch.randn(tokens, 2048, device="cuda", generator=g).to(dt)
            logits = _logits(torch, tokens, skewed, tokens + 1)
            layer = moe.Layer(ks, tokens, config, dtype)
            for buf in (layer.xp, layer.h, layer.y, layer.out):
                if buf is not None:     # (no permuted copy of x where GEMM 1 gathers)
                    buf.fill_(float("nan"))
            ids, weights = moe.route_reference(logits)
            out = layer.experts(x, w1, w2, ids, weights)
            torch.cuda.synchronize()
            ref = moe.reference(x, w1, w2, ids.long(), weights)
            err = (out.float() - ref).abs().max().item() / ref.abs().max().item()
            assert not out.isnan().any() and err <= TOL[dtype], \
                f"moe {dtype} {config} T={tokens} skewed={skewed}: rel. error {err:.2e} > {TOL[dtype]}"
            done.append(f"{tokens}{'s' if skewed else ''}:{err:.1e}")
    return "T rel.err " + " ".join(done)


CHECKS = {name: (check_route if "route" in name else check_align if "align" in name else check_layer)
          for name in _names()}
