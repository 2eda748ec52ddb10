"""The MoE layer's host side (no TVM needed): shapes, tile configurations, artifact names, the
layer as a sequence of axe.runtime launches, and the torch references.  The kernels are
``kernels/moe.py``; this module is what a GPU machine without the compiler imports."""

from kernels.parts.schedulers.padding import capacity, tile_capacity

E, TOPK, HIDDEN, INTER = 128, 8, 2048, 768       # Qwen3-30B-A3B's MoE block
DTYPES = ("bfloat16", "float16")
#: the smallest k-block, one 128-byte swizzle panel of 16-bit elements (the grouped GEMMs' default bk)
PANEL = 64

#: tile configurations: ``small`` (bm 64, bn 128) for few tokens per expert, ``large`` beyond;
#: the ``*_pad16`` twins pad each expert's rows to 16 instead of a whole tile (tiles then reach into
#: the next experts' rows and store only their own: kernels.moe.make_grouped_gemm's ``pad``), the
#: ``*_gather`` ones also let GEMM 1 gather x's rows itself (``gather_rows``: no permute kernel)
CONFIGS = {"small": {"bm": 64, "bn": 128}, "large": {"bm": 128, "bn": 256},
           "small_pad16": {"bm": 64, "bn": 128, "pad": 16}, "large_pad16": {"bm": 128, "bn": 256, "pad": 16},
           # bk=128: each stage reads 256-byte runs of every weight row; 1-5% faster than 128-byte
           # runs at every T on an H200 (benchmarks/results/moe-stages-exp-2026-11-23-h200.json)
           "small_gather": {"bm": 64, "bn": 128, "pad": 16, "gather_rows": True, "bk": 128},
           "large_gather": {"bm": 128, "bn": 256, "pad": 16, "gather_rows": True},
           # a few tokens (T <= 8): GEMM 1 in 48 + 48-row tiles, 16 per expert, so 8 experts fill 128
           # SMs with 384 KiB of weights each where 64 + 64-row tiles leave 36 SMs idle and stream 512
           "tiny_gather": {"bm": 64, "bn": 128, "bn1": 96, "pad": 16, "gather_rows": True, "bk": 128},
           # both GEMMs' last whole round and partial one split over all CTAs in k-blocks (stream-K):
           # no SM streams the last tiles alone (T = 32 on an H200: GEMM 1's 1392 tiles are 10
           # rounds of 132 and 72 more, GEMM 2's 1856 are 14 and 8 more).  Measured 2-4% slower
           # than without at T = 32 ... 512 (moe-stages-2026-11-23{g,j}-h200.json): the weights
           # stream at the DRAM's rate with the SMs of the last partial round alone, and the
           # hand-over of fp32 partials costs more than the idle SMs did
           "small_gather_sk": {"bm": 64, "bn": 128, "pad": 16, "gather_rows": True, "bk": 128, "stream_k": True},
           "large_gather_sk": {"bm": 128, "bn": 256, "pad": 16, "gather_rows": True, "stream_k": True},
           # the alignment on many CTAs (kernels.moe.make_align_split): one CTA took 29 µs at
           # T = 2048 and 54 at 4096 on an H200 (10-11 on many; moe-stages-2026-11-23f-h200.json),
           # bound by its own SM's atomics and stores; the GEMMs are their twins' (gemm_config)
           "large_gather_sa": {"bm": 128, "bn": 256, "pad": 16, "gather_rows": True, "split_align": True},
           "large_sa": {"bm": 128, "bn": 256, "split_align": True},
           # both GEMMs in one launch, GEMM 2's tiles pipelined behind GEMM 1's (kernels.moe.make_experts)
           "small_fused": {"bm": 64, "bn": 128, "pad": 16, "gather_rows": True, "fused": True, "bk": 128},
           "large_fused": {"bm": 128, "bn": 256, "pad": 16, "gather_rows": True, "fused": True},
           "tiny_fused": {"bm": 64, "bn": 128, "bn1": 96, "pad": 16, "gather_rows": True, "fused": True, "bk": 128}}
#: the default configuration by token count: (largest T, configuration), from the per-stage
#: timings of every configuration on an H200 under CUDA graphs (benchmarks/results/
#: moe-stages-2026-11-23{c,d,e}-h200.json and moe-stages-2026-11-23{f,g,h}-h200.json, the
#: second three with the many-CTA alignment): 48+48-row GEMM 1 tiles fill the SMs for a few
#: tokens; 64-row tiles gathering x's rows up to 512 tokens (every expert hit, few rows each:
#: taller tiles would be padding); 128-row ones beyond, aligned on many CTAs (at T = 2048 the
#: layer 0.46-0.48 ms against 0.50 with one align CTA; at 4096 it ties the permuted copy of x)
CONFIG_BY_TOKENS = ((8, "tiny_gather"), (512, "small_gather"))
LARGEST = "large_gather_sa"


def config_for(tokens):
    """The default configuration of :data:`CONFIGS` for ``tokens`` tokens (:data:`CONFIG_BY_TOKENS`)."""
    return next((cfg for most, cfg in CONFIG_BY_TOKENS if tokens <= most), LARGEST)


def align_name(bm, pad=None, split=False):
    """The align artifact's name for ``bm``-row tiles over segments padded to ``pad`` rows
    (``split``: the many-CTA alignment, ``kernels.moe.make_align_split``)."""
    pad = pad or bm
    return f"moe_align_bm{bm}" + ("" if pad == bm else f"_pad{pad}") + ("_split" if split else "")


def rows_and_tiles(tokens, config):
    """``(P, MT)``: the padded rows and m-tiles the layer's buffers hold for ``tokens`` tokens in
    ``config``, bounds over every routing (:func:`kernels.parts.schedulers.padding.capacity`, ``tile_capacity``)."""
    bm = CONFIGS[config]["bm"]
    pad = CONFIGS[config].get("pad", bm)
    return capacity(tokens * TOPK, E, pad), tile_capacity(tokens * TOPK, E, bm)


def gemm_keywords(config):
    """``(GEMM 1's, GEMM 2's)`` :func:`kernels.moe.make_grouped_gemm` keywords for ``config``:
    ``bn1`` (default ``bn``) is GEMM 1's tile width; GEMM 2 never gathers.  (A ``fused``
    configuration builds :func:`kernels.moe.make_experts` from ``CONFIGS[config]`` itself.)"""
    kw = {k: v for k, v in CONFIGS[config].items() if k not in ("bn1", "fused", "split_align")}
    return dict(kw, bn=CONFIGS[config].get("bn1", kw["bn"])), {k: v for k, v in kw.items() if k != "gather_rows"}


def fit_depth(kw, k, gathers):
    """GEMM keywords ``kw`` (of :func:`gemm_keywords`) with the k-block depth ``bk`` fitted to
    ``k``: a gathering GEMM copies whole k-blocks of x's rows (no column bound), so its ``bk``
    divides ``k``, and every GEMM runs at least two k-blocks; where the configuration's ``bk``
    breaks either, one swizzle panel (:data:`PANEL`).  ``kw`` itself where it fits (the
    configuration's tuned shapes keep their keywords, and so their artifacts)."""
    bk = kw.get("bk", PANEL)
    if (gathers and k % bk) or -(-k // bk) < 2:
        return dict(kw, bk=PANEL)
    return kw


def gemm_config(config):
    """The configuration whose grouped-GEMM artifacts ``config`` runs: itself, or for a
    ``split_align`` one the configuration it differs from only by the alignment (built once)."""
    kw = {k: v for k, v in CONFIGS[config].items() if k != "split_align"}
    if kw == CONFIGS[config]:
        return config
    same = [c for c, v in CONFIGS.items() if v == kw]
    if not same:
        raise ValueError(f"moe: configuration {config!r} has no twin without split_align among {sorted(CONFIGS)}")
    return same[0]


def artifact_names(dtype, config):
    """The artifacts one layer run needs, by role (names as ``kernels.moe.builds`` gives them)."""
    cfg, g = CONFIGS[config], gemm_config(config)
    gemms = ({"experts": f"moe_experts_{dtype}_{g}"} if cfg.get("fused") else
             {"gemm1": f"moe_gemm1_{dtype}_{g}", "gemm2": f"moe_gemm2_{dtype}_{g}"})
    return {"route": f"moe_route_{dtype}", "align": align_name(cfg["bm"], cfg.get("pad"), cfg.get("split_align", False)),
            "permute": f"moe_permute_{dtype}", **gemms, "combine": f"moe_combine_{dtype}"}


class Layer:
    """The MoE layer on loaded artifacts (``kernels``: role -> callable axe.runtime kernel, as
    :func:`artifact_names` names them for ``config``) for ``tokens`` tokens: buffers sized once by
    :func:`rows_and_tiles`, then :meth:`experts` (the peers' contract: ids and weights in) or
    :meth:`__call__` (logits in).  Its launches (:meth:`steps`) follow the configuration: no permute
    where GEMM 1 gathers, one ``experts`` launch where the GEMMs are fused."""

    def __init__(self, kernels, tokens, config, dtype, device="cuda"):
        import torch
        self.k, self.tokens = kernels, tokens
        P, MT = rows_and_tiles(tokens, config)
        bm = CONFIGS[config]["bm"]
        self.gather = CONFIGS[config].get("gather_rows", False)
        self.fused = CONFIGS[config].get("fused", False)
        i32 = dict(dtype=torch.int32, device=device)
        dt = getattr(torch, dtype)
        # bm rows past the capacity: the last tile may reach past the padded rows; align fills all with -1
        self.sorted = torch.empty(P + bm, **i32)
        self.tiles = torch.empty(MT, **i32)
        self.tile_rows = torch.empty(MT, 2, **i32)
        # the fused kernel's readiness counts: zero-filled once, left zero-filled by every launch
        self.ready = torch.zeros(2, MT, **i32) if self.fused else None
        self.meta = torch.zeros(4, **i32)
        self.pos = torch.empty(tokens, TOPK, **i32)
        self.xp = None if self.gather else torch.empty(P, HIDDEN, dtype=dt, device=device)
        self.h = torch.empty(P, INTER, dtype=dt, device=device)
        self.y = torch.empty(P, HIDDEN, dtype=dt, device=device)
        self.out = torch.empty(tokens, HIDDEN, dtype=dt, device=device)
        self.ids = torch.empty(tokens, TOPK, **i32)
        self.weights = torch.empty(tokens, TOPK, dtype=torch.float32, device=device)

    def route(self, logits):
        self.k["route"](logits, self.ids, self.weights)
        return self.ids, self.weights

    def steps(self, x, w1, w2, ids, weights):
        """``{step: fn}`` in launch order: each of the layer's kernel launches on its own (what
        :meth:`experts` runs one after the other; ``benchmarks/moe_stages.py`` times them apart)."""
        k, grouped = self.k, (self.sorted, self.tiles, self.tile_rows, self.meta)
        steps = {"align": lambda: k["align"](ids, self.sorted, self.tiles, self.tile_rows, self.meta, self.pos)}
        if not self.gather:         # GEMM 1 reads the permuted rows, else it gathers x's rows itself
            steps["permute"] = lambda: k["permute"](x, self.sorted[:self.xp.shape[0]], self.meta, self.xp)
        a = x if self.gather else self.xp
        if self.fused:
            steps["experts"] = lambda: k["experts"](a, w1, self.h, w2, self.y, *grouped, self.ready)
        else:
            steps["gemm1"] = lambda: k["gemm1"](a, w1, self.h, *grouped)
            steps["gemm2"] = lambda: k["gemm2"](self.h, w2, self.y, *grouped)
        steps["combine"] = lambda: k["combine"](self.y, self.pos, weights, self.out)
        return steps

    def experts(self, x, w1, w2, ids, weights):
        """``out = Σ_k weights[t,k] · down_e(SiLU(gate_e x) · up_e x)`` for ``e = ids[t,k]``."""
        for step in self.steps(x, w1, w2, ids, weights).values():
            step()
        return self.out

    def __call__(self, x, logits, w1, w2):
        ids, weights = self.route(logits)
        return self.experts(x, w1, w2, ids, weights)


def expert_weights(torch, dtype, device="cuda"):
    """``(w1 (E, 2·INTER, HIDDEN), w2 (E, HIDDEN, INTER))``, normal with variance 1/fan-in, in
    ``dtype``, from a generator seeded 0: every benchmark run streams the same weights."""
    g = torch.Generator(device=device).manual_seed(0)
    w1 = (torch.randn(E, 2 * INTER, HIDDEN, device=device, generator=g) / HIDDEN ** 0.5).to(dtype)
    return w1, (torch.randn(E, HIDDEN, INTER, device=device, generator=g) / INTER ** 0.5).to(dtype)


def inputs(torch, tokens, dtype, device="cuda", experts=E):
    """``(x, router logits)`` for ``tokens`` tokens (standard normal, in ``dtype``), drawn from a
    generator seeded by the token count alone: a T's routing, and so its bytes and its timings,
    do not depend on which other token counts a run measures before it."""
    g = torch.Generator(device=device).manual_seed(1_000_003 * tokens)
    x = torch.randn(tokens, HIDDEN, device=device, generator=g).to(dtype)
    return x, torch.randn(tokens, experts, device=device, generator=g).to(dtype)


def route_reference(logits, topk=TOPK):
    """torch: top-k of the softmax, renormalized to sum to 1 (fp32)."""
    import torch
    p = torch.softmax(logits.float(), dim=-1)
    w, ids = torch.topk(p, topk, dim=-1)
    return ids.to(torch.int32), w / w.sum(-1, keepdim=True)


def reference(x, w1, w2, ids, weights):
    """torch, fp32 throughout: the layer from ids and weights (the experts' loop)."""
    import torch
    xf = x.float()
    out = torch.zeros(x.shape[0], w2.shape[1], dtype=torch.float32, device=x.device)
    for e in torch.unique(ids).tolist():
        t, j = (ids == e).nonzero(as_tuple=True)
        g = xf[t] @ w1[e].float().t()
        a = torch.nn.functional.silu(g[:, :INTER]) * g[:, INTER:]
        out.index_add_(0, t, (a @ w2[e].float().t()) * weights[t, j, None])
    return out
