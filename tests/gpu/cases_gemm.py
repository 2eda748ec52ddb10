"""GPU cases for the Hopper GEMM (``kernels/gemm.py``): square, tall, wide and ragged shapes
(sizes that are not multiples of the 128×256×64 tile), one and two k-blocks, B row- and column-major, fp16 and bf16;
and the variants of :data:`VARIANTS` — the 2-CTA cluster build (``cluster=2``: B multicast to CTA
pairs), 4 stages with the chunked epilogue and the ping-pong schedule (``pp``) — on square and ragged shapes, some with an odd
number of block-rows (the last pair's second CTA lies past M).

The same kernel built for Blackwell (``target="sm_100a"``: tcgen05, TMEM accumulator) is the
variant ``sm100`` (artifacts ``gemm_sm100_<shape>_<dtype>_<B>``) and, as CTA pairs running
``tcgen05.mma.cta_group::2``, ``sm100c2`` on :data:`SM100_CASES`; ``run_all``
skips them on a device that is not compute capability 10.0.  They are built and ptxas-checked on the
CPU machine but have not run: no B200 has been lent yet.

Each check draws fresh random inputs, poisons C with NaN before every launch and compares with
torch in fp32 by ‖C − ref‖ / ‖ref‖ (the output is rounded to 16 bits once: fp16 lands near
3e-4, bf16 near 3e-3).
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: name -> (M, N, K)
SHAPES = {
    "square": (1024, 1024, 1024),
    "tall": (4096, 256, 512),
    "wide": (128, 4096, 256),
    "ragged": (1000, 1000, 1000),
    "ragged2": (777, 1496, 328),
    "k1": (512, 512, 64),         # one k-block: no group left in flight
    "k2": (384, 768, 72),         # two k-blocks (the second one ragged), no main-loop iterations
    "multi": (2560, 2048, 520),   # 320 ping-pong tiles: 2 or 3 per CTA (both warpgroups, odd counts), ragged K
    # stream-K tails (a partial wave): 304 tiles on 132 CTAs, 9 k-blocks; 20 tiles on 8 CTAs, 16 k-blocks;
    # 48 tiles on 10 CTAs, 4 k-blocks (range boundaries moved off a tile's second and last k-block)
    "sk": (2048, 4864, 520),
    "sk_a": (640, 1000, 1000),
    "sk_b": (1000, 1496, 256),
    # split-K (few tiles): 8 tiles x 8 slices of 8 k-blocks; 8 x 3 slices of 6 (the last past K) on 8
    # CTAs (several units per CTA); 2 x 2 slices of 4 on 1 CTA (it takes the partials it published itself)
    "kx": (256, 1024, 4096),
    "kx_a": (200, 1000, 1000),
    "kx_b": (128, 512, 512),
    # fewer rows than a tile (declared through a tile-high view, TMA maps sized from the tensors)
    "m1": (1, 1000, 1000),
    "m16": (16, 4096, 1024),
    "m100": (100, 1496, 328),
    "m64": (64, 2048, 1024),
}
#: (shape, dtype, B layout) cases: every shape in fp16 with both B layouts, bf16 on a subset
CASES = [(s, "float16", b) for s in SHAPES if not s.startswith(("kx", "m1", "m64")) for b in ("row", "col")] + \
        [(s, dt, b) for s in ("m1", "m16", "m100") for dt, b in (("float16", "row"), ("bfloat16", "col"))] + \
        [(s, "bfloat16", b) for s in ("square", "ragged") for b in ("row", "col")]
#: make() variants: tag -> keywords (cluster pairs; 4 stages with the 64-column chunked epilogue)
VARIANTS = {"c2": {"cluster": 2}, "s3": {"stages": 3, "in_flight": 1, "epilogue": 256},
            "e64": {"epilogue": 64, "epilogue_bufs": 2}, "c2s3": {"cluster": 2, "stages": 3, "in_flight": 1, "epilogue": 256},
            "pp": {"schedule": "pingpong"}, "sk": {"stream_k": True},
            "sk8": {"sms": 8, "stream_k": True}, "sk10": {"sms": 10, "stream_k": True},
            "x8": {"split_k": 8}, "x3": {"sms": 8, "split_k": 3}, "x2": {"sms": 1, "split_k": 2}}
#: variant cases (shape, dtype, B layout, tag); ragged2 has 7 block-rows, k2 3
CLUSTER_CASES = [(s, "float16", b, "c2") for s in ("square", "ragged", "ragged2", "k2") for b in ("row", "col")] + \
                [(s, "bfloat16", b, "c2") for s in ("square", "ragged2") for b in ("row", "col")] + \
                [(s, "float16", b, v) for v in ("s3", "e64", "c2s3") for s in ("square", "ragged2", "k2") for b in ("row", "col")] + \
                [("ragged", "bfloat16", b, v) for v in ("s3", "e64") for b in ("row", "col")] + \
                [(s, "float16", b, "pp") for s in ("square", "ragged2", "k1", "k2", "multi") for b in ("row", "col")] + \
                [("ragged2", "bfloat16", "col", "pp"), ("multi", "bfloat16", "row", "pp")] + \
                [("sk_a", dt, b, "sk8") for dt in ("float16", "bfloat16") for b in ("row", "col")] + \
                [("sk_b", "float16", b, "sk10") for b in ("row", "col")] + \
                [("sk", dt, b, "sk") for dt in ("float16", "bfloat16") for b in ("row", "col")] + \
                [(s, dt, b, v) for s, v in (("kx", "x8"), ("kx_a", "x3"), ("kx_b", "x2"))
                 for dt in ("float16", "bfloat16") for b in ("row", "col")]
#: Blackwell builds of the plain kernel (the cooperative schedule; cases as above) and of CTA pairs
#: (``sm100c2``: cluster=2, tcgen05.mma.cta_group::2; ragged2 has 7 block-rows, k2 3)
SM100_CASES = [(s, "float16", b, "sm100") for s in ("square", "tall", "wide", "ragged", "ragged2", "k1", "k2", "multi")
               for b in ("row", "col")] + [(s, "bfloat16", b, "sm100") for s in ("square", "ragged") for b in ("row", "col")] + \
              [(s, "float16", b, "sm100c2") for s in ("square", "ragged2", "k2") for b in ("row", "col")] + \
              [("ragged", "bfloat16", b, "sm100c2") for b in ("row", "col")]
VARIANTS["sm100c2"] = {"cluster": 2}
#: the fused elementwise epilogue (``epilogue_ops``): every operand, subsets, and with the split-K,
#: stream-K, ping-pong and CTA-pair parts; ``ewdyn`` is the runtime-M build, checked at several M
FUSED = ("row_scale", "col_scale", "bias", "residual")
VARIANTS.update({"ew": {"epilogue_ops": FUSED}, "ewb": {"epilogue_ops": ("bias",)},
                 "ewrc": {"epilogue_ops": ("row_scale", "col_scale")}, "ewr": {"epilogue_ops": ("residual",)},
                 "ewx3": {"sms": 8, "split_k": 3, "epilogue_ops": FUSED},
                 "ewsk8": {"sms": 8, "stream_k": True, "epilogue_ops": FUSED},
                 "ewpp": {"schedule": "pingpong", "epilogue_ops": FUSED}, "ewc2": {"cluster": 2, "epilogue_ops": FUSED}})
FUSED_CASES = [("k1", "float16", "row", v) for v in ("ewb", "ewrc", "ewr")] + \
              [(s, dt, b, "ew") for s in ("square", "ragged", "ragged2", "k1") for dt, b in (("float16", "row"), ("bfloat16", "col"))] + \
              [("ragged", "bfloat16", "row", "ewb"), ("ragged2", "float16", "col", "ewrc"), ("ragged2", "bfloat16", "col", "ewr")] + \
              [("kx_a", dt, "col", "ewx3") for dt in ("float16", "bfloat16")] + \
              [("sk_a", dt, "row", "ewsk8") for dt in ("float16", "bfloat16")] + \
              [(s, "bfloat16", "col", "ewpp") for s in ("ragged2", "multi")] + \
              [(s, "float16", "row", "ewc2") for s in ("square", "ragged2")]
DYNAMIC_FUSED = [("float16", "row"), ("bfloat16", "col")]
DYNAMIC_N_K, DYNAMIC_MS = (1496, 520), (1, 5, 64, 333, 1000)
#: tile widths (``tile_n``), alone and with split-K, stream-K, CTA pairs and ping-pong
VARIANTS.update({"n64": {"tile_n": 64}, "n128": {"tile_n": 128}, "n192": {"tile_n": 192},
                 "n128c2": {"tile_n": 128, "cluster": 2}, "n64x4": {"tile_n": 64, "split_k": 4, "stages": 8},
                 "n128sk": {"tile_n": 128, "stream_k": True, "sms": 8}, "n128pp": {"tile_n": 128, "schedule": "pingpong"}})
TILE_CASES = [(s, dt, b, v) for v in ("n64", "n128", "n192") for s in ("ragged", "ragged2", "m16")
              for dt, b in (("float16", "row"), ("bfloat16", "col"))] + \
             [(s, "float16", b, "n128c2") for s in ("square", "ragged2") for b in ("row", "col")] + \
             [(s, dt, "col", "n64x4") for s in ("kx", "m1") for dt in ("float16", "bfloat16")] + \
             [("sk_a", "bfloat16", "row", "n128sk"), ("ragged2", "bfloat16", "col", "n128pp")]
#: the transposed decode tile (``tile_m`` < 128: Cᵀ = B·Aᵀ, the weights' rows on the MMA's M side), alone
#: and with split-K, on M = 1 up to tile_m
VARIANTS.update({"t16": {"tile_m": 16, "tile_n": 128}, "t16x4": {"tile_m": 16, "tile_n": 128, "split_k": 4, "stages": 8},
                 "t32x2": {"tile_m": 32, "tile_n": 128, "split_k": 2}, "t64": {"tile_m": 64, "tile_n": 128}})
SWAP_CASES = [(s, dt, "col", v) for v in ("t16", "t16x4", "t32x2") for s in ("m1", "m16") for dt in ("float16", "bfloat16")] + \
             [(s, dt, "col", "t64") for s in ("m16", "m64") for dt in ("float16", "bfloat16")]
#: 128-deep k-blocks (two 64-column panels per slot: each warpgroup's rows are a row range of both)
VARIANTS.update({"k128": {"tile_k": 128, "tile_n": 128, "stages": 3},
                 "k128x2": {"tile_k": 128, "tile_n": 128, "stages": 3, "split_k": 2},
                 "k128pp": {"tile_k": 128, "tile_n": 128, "stages": 4, "schedule": "pingpong"},
                 "t16k128": {"tile_m": 16, "tile_n": 128, "tile_k": 128, "split_k": 2, "stages": 6}})
DEEP_CASES = [(s, dt, b, "k128") for s in ("square", "ragged", "ragged2", "multi") for dt, b in (("float16", "row"), ("bfloat16", "col"))] + \
             [("kx", dt, "col", "k128x2") for dt in ("float16", "bfloat16")] + \
             [("ragged2", "bfloat16", "col", "k128pp"), ("multi", "float16", "row", "k128pp")] + \
             [(s, dt, "col", "t16k128") for s in ("m1", "m16") for dt in ("float16", "bfloat16")]
#: the decode bucket's artifacts (``make_dynamic(..., max_rows=128)``): checked at several M up to the
#: bound, a launch with one row more refused
BOUNDED = {"bnd_n64x4": {"tile_n": 64, "split_k": 4, "stages": 8}, "bnd_n256x2": {"split_k": 2},
           "bnd_n128": {"tile_n": 128, "stages": 6},
           "bnd_t16x2": {"tile_m": 16, "tile_n": 128, "split_k": 2, "stages": 8}, "bnd_t64": {"tile_m": 64, "tile_n": 128}}
#: the middle buckets' statically scheduled candidates (``max_rows`` 256..1024): checked at M from 1 up to
#: the bound (tiles past M load zeros and store nothing)
BOUNDED.update({"bnd256_n256x4": {"split_k": 4}, "bnd512_n128x2": {"tile_n": 128, "split_k": 2, "stages": 6},
                "bnd1024_n256x2": {"split_k": 2}, "bnd1024_sk": {"stream_k": True}})
#: the middle buckets' 192-column tile, cut in K (bounded) and with M at run time (``rtn192``: no bound)
BOUNDED.update({"bnd512_n192x2": {"tile_n": 192, "split_k": 2}, "bnd256_n192x3": {"tile_n": 192, "split_k": 3}})
BOUNDED_ROWS = {"bnd256_n256x4": 256, "bnd512_n128x2": 512, "bnd1024_n256x2": 1024, "bnd1024_sk": 1024,
                "bnd512_n192x2": 512, "bnd256_n192x3": 256}
RUNTIME_TILES = {"rtn192": {"tile_n": 192}}
#: the middle buckets' CTA pairs (sharing B), scheduled for the bound: odd and even block-row counts up to it
BOUNDED.update({"bnd512_n128c2": {"tile_n": 128, "cluster": 2, "stages": 6}, "bnd256_n256c2": {"cluster": 2}})
BOUNDED_ROWS.update({"bnd512_n128c2": 512, "bnd256_n256c2": 256})
#: stream-K wants a wave of tiles: 8 × 20 = 160 tiles of 128×256 at the bound (one wave and a part)
BOUNDED_SHAPE = {"bnd1024_sk": (5120, 2048)}
BOUNDED_N_K, BOUNDED_MS = (4096, 2048), (1, 5, 64, 128, 200, 449, 777)
#: variant tag -> build target (make()'s keywords are in VARIANTS)
TARGETS = {"sm100": "sm_100a", "sm100c2": "sm_100a"}
TOL = {"float16": 2e-3, "bfloat16": 1e-2}


def case_name(shape, dtype, b_major, variant=None):
    v = f"{variant}_" if variant else ""
    return f"gemm_{v}{shape}_{'f16' if dtype == 'float16' else 'bf16'}_{b_major}"


def _builder(shape, dtype, b_major, variant=None):
    def build():
        sys.path.insert(0, ROOT)
        from kernels import gemm
        return gemm.build(*SHAPES[shape], dtype=dtype, b_major=b_major, name=case_name(shape, dtype, b_major, variant),
                          target=TARGETS.get(variant, "sm_90a"), **VARIANTS.get(variant, {}))
    return build


def _dynamic_builder(dtype, b_major):
    def build():
        sys.path.insert(0, ROOT)
        from kernels import gemm
        return gemm.build_dynamic(*DYNAMIC_N_K, dtype=dtype, b_major=b_major, name=case_name("dyn", dtype, b_major, "ew"),
                                  epilogue_ops=FUSED)
    return build


def _bounded_builder(tag, dtype, b_major):
    """A ``make_dynamic`` case: scheduled for its bound (:data:`BOUNDED`), or with M at run time
    (:data:`RUNTIME_TILES`: no bound)."""
    runtime = tag in RUNTIME_TILES
    config = RUNTIME_TILES[tag] if runtime else BOUNDED[tag]
    rows = None if runtime else BOUNDED_ROWS.get(tag, config.get("tile_m", 128))

    def build():
        sys.path.insert(0, ROOT)
        from kernels import gemm
        return gemm.build_dynamic(*BOUNDED_SHAPE.get(tag, BOUNDED_N_K), dtype=dtype, b_major=b_major,
                                  name=case_name("dyn", dtype, b_major, tag), max_rows=rows, **config)
    return build


BUILDS = {case_name(*c): _builder(*c) for c in CASES + CLUSTER_CASES + SM100_CASES + FUSED_CASES + TILE_CASES + SWAP_CASES + DEEP_CASES}
BUILDS.update({case_name("dyn", dt, b, "ew"): _dynamic_builder(dt, b) for dt, b in DYNAMIC_FUSED})
BUILDS.update({case_name("dyn", dt, b, t): _bounded_builder(t, dt, b) for t in BOUNDED
               for dt, b in (("float16", "row"), ("bfloat16", "col")) if b == "col" or "tile_m" not in BOUNDED[t]})
BUILDS.update({case_name("dyn", dt, b, t): _bounded_builder(t, dt, b) for t in RUNTIME_TILES
               for dt, b in (("float16", "row"), ("bfloat16", "col"))})


def fused_operands(args, m, n, dtype, torch):
    """Random fused operands for the kernel parameters among ``args`` (scales near 1, a bias, a
    residual), by :func:`reference`'s keyword, in the kernel's parameter order."""
    make = {"Srow_": ("row_scale", lambda: torch.rand(1, m, device="cuda") + 0.5),
            "Scol_": ("col_scale", lambda: torch.rand(1, n, device="cuda") + 0.5),
            "Bias_": ("bias", lambda: torch.randn(1, n, device="cuda")),
            "R_": ("residual", lambda: torch.randn(m, n, device="cuda", dtype=dtype))}
    return {make[a][0]: make[a][1]() for a in args if a in make}


def reference(a, b, b_major, row_scale=None, col_scale=None, bias=None, residual=None):
    """The oracle in fp32: ``(a·b) · row_scale[m] · col_scale[n] + bias[n] + residual``."""
    ref = a.float() @ (b if b_major == "row" else b.t()).float()
    if row_scale is not None:
        ref = ref * row_scale.reshape(-1, 1)
    if col_scale is not None:
        ref = ref * col_scale
    if bias is not None:
        ref = ref + bias
    return ref if residual is None else ref + residual.float()


def run_check(kernel, torch, runs=3, m=None):
    """Launch ``kernel`` (a built GEMM; with fused operands where it declares them) on fresh random
    data ``runs`` times; returns the worst relative error.  Raises AssertionError on unwritten
    outputs or an error above tolerance.  ``m``: the row count of a runtime-M build."""
    args = {a["name"]: a for a in kernel.launch["args"]}
    (m0, k), b_shape, dt = args["A_"]["shape"], args["B_"]["shape"], args["A_"]["dtype"]
    m, n = m or m0, args["C_"]["shape"][1]
    b_major = "col" if kernel.launch["name"].endswith("_col") else "row"
    dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16}[dt]
    worst = 0.0
    for _ in range(runs):
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        b = torch.randn(*b_shape, device="cuda", dtype=dtype)
        c = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
        fused = fused_operands(args, m, n, dtype, torch)
        kernel(a, b, c, *fused.values())
        torch.cuda.synchronize()
        unwritten = c.isnan().sum().item()
        assert unwritten == 0, f"{m}x{n}x{k} {dt} B {b_major}: {unwritten} outputs never written"
        ref = reference(a, b, b_major, **fused)
        err = ((c.float() - ref).norm() / ref.norm()).item()
        worst = max(worst, err)
        assert err < TOL[dt], f"{m}x{n}x{k} {dt} B {b_major}: relative error {err:.2e} > {TOL[dt]}"
    return worst


def _check(kernel, torch):
    err = run_check(kernel, torch)
    a = {x["name"]: x for x in kernel.launch["args"]}
    m, k = a["A_"]["shape"]
    return f"{m}x{a['C_']['shape'][1]}x{k} {a['A_']['dtype']}, 3 random runs, rel err {err:.1e} vs fp32"


def _check_dynamic(kernel, torch):
    errs = [run_check(kernel, torch, runs=1, m=m) for m in DYNAMIC_MS]
    return f"runtime M in {DYNAMIC_MS} x {DYNAMIC_N_K}, rel err <= {max(errs):.1e} vs fp32"


def _check_bounded(kernel, torch):
    bound = kernel.launch["symbols"]["M"]["max"]
    ms = tuple(m for m in BOUNDED_MS if m < bound) + (bound,)
    errs = [run_check(kernel, torch, runs=1, m=m) for m in ms]
    dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16}[kernel.launch["args"][0]["dtype"]]
    b_shape = kernel.launch["args"][1]["shape"]
    k, n = kernel.launch["args"][0]["shape"][1], kernel.launch["args"][2]["shape"][1]
    try:
        kernel(torch.zeros(bound + 1, k, device="cuda", dtype=dtype), torch.zeros(*b_shape, device="cuda", dtype=dtype),
               torch.zeros(bound + 1, n, device="cuda", dtype=dtype))
    except Exception as e:          # the runtime's LaunchError, naming the bound
        assert f"exceeds {bound}" in str(e), e
    else:
        raise AssertionError(f"a launch with {bound + 1} rows was not refused")
    return f"M in {ms} x {(n, k)}, rel err <= {max(errs):.1e} vs fp32; M = {bound + 1} refused"


def _check_of(name):
    """The check of a case by its name: run-time M, bounded M, or a static shape."""
    return _check_dynamic if name.startswith(("gemm_ew_dyn", "gemm_rtn")) else \
        _check_bounded if name.startswith("gemm_bnd") else _check



#: tile widths in steps of 16 (column-major B, ``tile_n`` not a multiple of 64: the store's last chunk is a
#: warpgroup's last 64 columns, overlapping the chunk before): static ragged shapes (a ragged last
#: block-column at each width), split-K on few tiles (8 CTAs, 3 slices), M at run time (``rtn*``) and cut in
#: K for a bound of 512 rows (``bnd512_n*x2``)
NARROW = (144, 176, 224)
VARIANTS.update({f"n{w}": {"tile_n": w} for w in NARROW})
VARIANTS.update({f"n{w}x3": {"tile_n": w, "sms": 8, "split_k": 3} for w in NARROW})
NARROW_CASES = [(s, dt, "col", f"n{w}") for w in NARROW for s in ("ragged", "ragged2", "wide")
                for dt in ("float16", "bfloat16")] + [("kx_a", dt, "col", f"n{w}x3") for w in NARROW
                                                       for dt in ("float16", "bfloat16")]
NARROW_BOUNDED = {f"bnd512_n{w}x2": {"tile_n": w, "split_k": 2} for w in NARROW}
NARROW_RUNTIME = {f"rtn{w}": {"tile_n": w} for w in NARROW}
BOUNDED.update(NARROW_BOUNDED)
BOUNDED_ROWS.update({t: 512 for t in NARROW_BOUNDED})
RUNTIME_TILES.update(NARROW_RUNTIME)
NARROW_BUILDS = {case_name(*c): _builder(*c) for c in NARROW_CASES}
NARROW_BUILDS.update({case_name("dyn", "bfloat16", "col", t): _bounded_builder(t, "bfloat16", "col") for t in NARROW_BOUNDED})
NARROW_BUILDS.update({case_name("dyn", dt, "col", t): _bounded_builder(t, dt, "col") for t in NARROW_RUNTIME
                      for dt in ("float16", "bfloat16")})
BUILDS.update(NARROW_BUILDS)
#: stream-K spread over fewer tiles than CTAs (every CTA streams its even share of all k-blocks, a
#: tile's head adds the tails of the CTAs whose ranges start inside it): the transposed decode tile
#: (28 tiles of 224 k-blocks on 132 CTAs: up to 6 pieces a tile; 5 tiles of 64 on 8 CTAs) and the
#: 128-row tiles of a middle bucket (32 and 128 tiles); ``bnd_t16skw``: the decode tile under the
#: plain stream-K (32 tiles on 8 CTAs: whole waves, then two pieces a tile)
SPREAD = {"bnd_t16sk": {"tile_m": 16, "tile_n": 128, "stream_k": True, "stages": 8},
          "bnd_t16sk8": {"tile_m": 16, "tile_n": 128, "stream_k": True, "sms": 8},
          "bnd_t16skw": {"tile_m": 16, "tile_n": 128, "stream_k": True, "sms": 8},
          "bnd_t64sk": {"tile_m": 64, "tile_n": 128, "stream_k": True},
          "bnd256_sk": {"stream_k": True}, "bnd512_n128sk": {"tile_n": 128, "stream_k": True, "stages": 6}}
BOUNDED.update(SPREAD)
BOUNDED_ROWS.update({"bnd256_sk": 256, "bnd512_n128sk": 512})
BOUNDED_SHAPE.update({"bnd_t16sk": (3584, 14336), "bnd_t16sk8": (640, 4096), "bnd_t64sk": (4096, 12288),
                      "bnd512_n128sk": (4096, 14336)})
BUILDS.update({case_name("dyn", dt, b, t): _bounded_builder(t, dt, b) for t in SPREAD
               for dt, b in (("float16", "row"), ("bfloat16", "col")) if b == "col" or "tile_m" not in SPREAD[t]})
#: CTA pairs with narrow tiles (column-major B only: each CTA of a pair loads half of the tile's rows,
#: 56 and 72 here) on an odd and an even number of block-rows
NARROW_PAIRS = {"bnd512_n112c2": {"tile_n": 112, "cluster": 2, "stages": 6},
                "bnd1024_n144c2": {"tile_n": 144, "cluster": 2, "stages": 5}}
BOUNDED.update(NARROW_PAIRS)
BOUNDED_ROWS.update({"bnd512_n112c2": 512, "bnd1024_n144c2": 1024})
BUILDS.update({case_name("dyn", dt, "col", t): _bounded_builder(t, dt, "col") for t in NARROW_PAIRS
               for dt in ("float16", "bfloat16")})
#: the middle buckets' 128-deep uncut tiles (``gemm_select.deep``), M at run time
DEEP_RUNTIME = {"rtn128k128": {"tile_n": 128, "tile_k": 128, "stages": 3},
                "rtn112k128": {"tile_n": 112, "tile_k": 128, "stages": 3}}
RUNTIME_TILES.update(DEEP_RUNTIME)
BUILDS.update({case_name("dyn", dt, b, t): _bounded_builder(t, dt, b) for t in DEEP_RUNTIME
               for dt, b in (("float16", "row"), ("bfloat16", "col")) if b == "col" or t == "rtn128k128"})
CHECKS = {name: _check_of(name) for name in BUILDS}
