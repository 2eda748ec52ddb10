"""GPU cases for the serving kernels a Llama decoder layer needs (issue 24 item 3): the dynamic-M
builds behind ``torch.ops.axe.rmsnorm`` / ``fused_add_rmsnorm`` / ``softmax`` / ``silu_and_mul`` /
``rotary_embedding``, at the hidden sizes of current models (Gemma-2-2B 2304, gpt-oss 2880,
Gemma-2-9B 3584 and the multiples of 1024), built on the CPU machine, checked on the GPU
against torch in float64 for 1, 7, 33 and 1000 rows (fresh random inputs, outputs poisoned with
NaN, and a guard row past the last one that must stay untouched).

The gate/up GEMM with SiLU·up fused (``kernels/gemm.py`` ``act="silu_mul"``, behind
``torch.ops.axe.gemm_silu_mul``) at Llama-3.1-8B's (2·14336 × 4096) and Llama-2-7B's (2·11008 ×
4096) gate/up shapes: every configuration a decode bucket may pick (the candidates ``axe tune``
measures, made to compose by ``kernels/gemm_select.py:act_config``) and the heuristic's for
2048 rows, checked at 1, 7, 16, 64, 128 and 2048 rows (those each artifact takes) against the
unfused MLP in float64, the weight interleaved here from the definition.

Build and run (the artifact names all start with ``serving_``)::

    .venv/bin/python scripts/gpu_build.py --match 'serving_'
    python3 tests/gpu/run_all.py --only $(ls .carry/artifacts | grep '^serving_')
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

HIDDEN = (2048, 2304, 2880, 3584, 4096, 5120, 7168, 8192)
ROWS = (1, 7, 33, 1000)
#: MLP intermediate sizes (d of silu_and_mul): gpt-oss, Gemma-2-2B, Llama-2-7B, Llama-3-8B / Gemma-2-9B,
#: Qwen2-7B, Llama-3-70B; and one short block
INTERMEDIATE = (2880, 9216, 11008, 14336, 18944, 28672, 768)
#: (head_size, query heads, key heads, NeoX, dtype, positions dtype): Llama-3-8B, Llama-3-70B,
#: a short pass of heads (28 of 16-head passes), no key, GPT-J at both head sizes
ROTARY = ((128, 32, 8, True, "bfloat16", "int64"), (128, 64, 8, True, "bfloat16", "int64"),
          (128, 28, 4, True, "float16", "int32"), (128, 32, 0, True, "bfloat16", "int64"),
          (64, 16, 16, False, "float16", "int64"), (128, 32, 8, False, "bfloat16", "int32"),
          (64, 32, 8, True, "bfloat16", "int64"))
SHORT = {"float16": "f16", "bfloat16": "bf16"}


def _builder(module, factory, *args):
    """A build of ``module.factory(*args)`` for sm_90a; trailing ``(key, value)`` pairs in ``args``
    are keywords."""
    pos = tuple(a for a in args if not (isinstance(a, tuple) and len(a) == 2 and isinstance(a[0], str)))
    kw = dict(a for a in args[len(pos):])

    def build():
        sys.path.insert(0, ROOT)
        import importlib

        import axe.lang as Ax
        return Ax.compile_kernel(getattr(importlib.import_module(module), factory)(*pos, **kw), "sm_90a")
    return build


def _rotary_name(hs, hq, hk, neox, dt, pdt):
    return f"serving_rotary_{'neox' if neox else 'gptj'}_{hs}_{hq}q{hk}k_{SHORT[dt]}_{pdt}"


#: the fused gate/up GEMM: (2I, K) shapes and the row counts checked
GATE_UP = ((2 * 14336, 4096), (2 * 11008, 4096))
GATE_UP_ROWS = (1, 7, 16, 64, 128, 2048)


def _gate_up_builds():
    """``{name: (builder, rows it is checked at)}``: each distinct configuration of the decode
    buckets' candidates and of the heuristic at 2048 rows, per shape."""
    sys.path.insert(0, ROOT)
    from kernels import gemm_select as sel
    out = {}
    for N, K in GATE_UP:
        for bound in (16, 64, 128, 2048):
            lo = max((b for b in sel.BUCKETS if b is not None and b < bound), default=0)
            rows = tuple(m for m in GATE_UP_ROWS if lo < m <= bound)
            configs = sel.candidates(bound, N, K) if bound <= sel.BM else [sel.heuristic(bound, N, K)]
            for config in configs:
                config = sel.act_config(config, N)
                max_rows = sel.scheduled_rows(bound, config)
                name = f"serving_gemm_silu_mul_{N}x{K}_m{bound}_{sel.name(config)}"
                out[name] = (_builder("kernels.gemm", "make_dynamic", N, K, "bfloat16", "col", name, max_rows,
                                      "silu_mul", *config.items()), rows)
    return out


GATE_UP_BUILDS = _gate_up_builds()


BUILDS = {
    **{name: build for name, (build, _) in GATE_UP_BUILDS.items()},
    **{f"serving_rmsnorm_{n}_bf16": _builder("kernels.rmsnorm", "dynamic", n, "bfloat16") for n in HIDDEN},
    **{f"serving_rmsnorm_{n}_f16": _builder("kernels.rmsnorm", "dynamic", n, "float16") for n in (2880, 8)},
    **{f"serving_fused_add_rmsnorm_{n}_bf16": _builder("kernels.rmsnorm", "dynamic_add", n, "bfloat16") for n in HIDDEN},
    "serving_fused_add_rmsnorm_3584_f16": _builder("kernels.rmsnorm", "dynamic_add", 3584, "float16"),
    **{f"serving_softmax_{n}_f16": _builder("kernels.softmax", "dynamic", n, "float16") for n in (2304, 2880, 3584, 4096)},
    "serving_softmax_2880_bf16": _builder("kernels.softmax", "dynamic", 2880, "bfloat16"),
    **{f"serving_silu_and_mul_{d}_bf16": _builder("kernels.silu_mul", "dynamic", d, "bfloat16") for d in INTERMEDIATE},
    "serving_silu_and_mul_11008_f16": _builder("kernels.silu_mul", "dynamic", 11008, "float16"),
    **{_rotary_name(*r): _builder("kernels.rotary", "dynamic", *r) for r in ROTARY},
}


def _args(kernel):
    return {a["name"]: a for a in kernel.launch["args"]}


def _dtype(torch, arg):
    return getattr(torch, arg["dtype"])


def _tol(dtype, torch):
    """Max error relative to the largest |reference|: a result rounded once to the dtype is off by
    at most half a unit in the last place, 2^-11 (fp16) or 2^-8 (bf16) of max |ref| in the top
    binade; a little more for the GPU's approximate rsqrt/exp and its order of summation."""
    return 1.2e-3 if dtype == torch.float16 else 6e-3


def _check(torch, got, want, what):
    assert not got.isnan().any(), f"{what}: {got.isnan().sum().item()} outputs never written (NaN)"
    err = ((got.double() - want).abs().max() / want.abs().max().clamp_min(1e-12)).item()
    assert err < _tol(got.dtype, torch), f"{what}: max error {err:.2e} of max |ref|"
    return err


def _guarded(torch, rows, cols, dtype, fill=float("nan")):
    """A ``(rows, cols)`` tensor filled with ``fill`` whose storage goes on for one more row (the
    guard: a kernel writing past its last row shows there)."""
    buf = torch.full((rows + 1, cols), fill, device="cuda", dtype=dtype)
    return buf[:rows], buf[rows:]


def _rms(torch, x, w, eps):
    xd = x.double()
    return xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * w.double()


def _out_of_place(kernel, torch, what, cols_in, cols_out, dt, make, launch, reference, also=None):
    """For every row count: inputs ``make(m)``, a NaN-poisoned output with a guard row,
    ``launch(x, y)``, the output against ``reference(x)`` (float64) and ``also(x, y, what)``
    (extra checks); returns the worst error."""
    worst = 0.0
    for m in ROWS:
        x = make(m)
        y, guard = _guarded(torch, m, cols_out, dt)
        launch(x, y)
        torch.cuda.synchronize()
        worst = max(worst, _check(torch, y, reference(x), f"{what} {m}x{cols_in}"))
        assert guard.isnan().all(), f"{what} {m}x{cols_in}: wrote past the last row"
        if also:
            also(x, y, f"{what} {m}x{cols_in}")
    return worst


def check_rmsnorm(kernel, torch):
    a = _args(kernel)
    n, dt = a["X_"]["shape"][1], _dtype(torch, a["X_"])
    w = torch.randn(1, n, device="cuda", dtype=dt)
    worst = _out_of_place(kernel, torch, "rmsnorm", n, n, dt, lambda m: torch.randn(m, n, device="cuda", dtype=dt) * 3,
                          lambda x, y: kernel(x, w, y, 1e-5), lambda x: _rms(torch, x, w, 1e-5))
    return f"n={n} {a['X_']['dtype']}, rows {ROWS}: max err {worst:.1e} of max|ref| vs float64"


def check_fused_add_rmsnorm(kernel, torch):
    a = _args(kernel)
    n, dt = a["X_"]["shape"][1], _dtype(torch, a["X_"])
    worst = 0.0
    w = torch.randn(1, n, device="cuda", dtype=dt)
    for m in ROWS:
        x, xg = _guarded(torch, m, n, dt, 7.0)
        r, rg = _guarded(torch, m, n, dt, 7.0)
        x.copy_(torch.randn(m, n, device="cuda", dtype=dt))
        r.copy_(torch.randn(m, n, device="cuda", dtype=dt) * 4)
        want_r = (x.float() + r.float()).to(dt)           # the fp32 sum rounded once
        kernel(x, w, r, 1e-6)
        torch.cuda.synchronize()
        bad = (r != want_r).sum().item()
        assert bad == 0, f"fused_add_rmsnorm {m}x{n}: {bad} residual values differ from round(x + residual)"
        worst = max(worst, _check(torch, x, _rms(torch, want_r, w, 1e-6), f"fused_add_rmsnorm {m}x{n}"))
        assert (xg == 7).all() and (rg == 7).all(), f"fused_add_rmsnorm {m}x{n}: wrote past the last row"
    return f"n={n} {a['X_']['dtype']}, rows {ROWS}: residual exact, max err {worst:.1e} of max|ref| vs float64"


def check_softmax(kernel, torch):
    a = _args(kernel)
    n, dt = a["X_"]["shape"][1], _dtype(torch, a["X_"])

    def make(m):
        x = torch.randn(m, n, device="cuda", dtype=dt) * 4
        x[::2, ::5] = float("-inf")                       # masked entries, as attention scores have
        x[m // 2, :] = -30000.0                          # a row far below zero: the padding must not win
        x[m // 2, n - 1] = -29990.0
        return x

    def sums(x, y, what):
        s = y.double().sum(-1)
        assert ((s - 1).abs() < 2e-2).all(), f"softmax {what}: row sums off by up to {(s - 1).abs().max().item():.2e}"
    worst = _out_of_place(kernel, torch, "softmax", n, n, dt, make, kernel,
                          lambda x: torch.softmax(x.double(), dim=-1), sums)
    return f"n={n} {a['X_']['dtype']}, rows {ROWS}, -inf entries: max err {worst:.1e} of max|ref| vs float64"


def check_silu_and_mul(kernel, torch):
    a = _args(kernel)
    d, dt = a["Y_"]["shape"][1], _dtype(torch, a["Y_"])

    def reference(x):
        xd = x.double()
        return torch.nn.functional.silu(xd[:, :d]) * xd[:, d:]
    worst = _out_of_place(kernel, torch, "silu_and_mul", 2 * d, d, dt,
                          lambda m: torch.randn(m, 2 * d, device="cuda", dtype=dt) * 3, kernel, reference)
    return f"d={d} {a['Y_']['dtype']}, rows {ROWS}: max err {worst:.1e} of max|ref| vs float64"


def rotate(torch, x, cos, sin, neox):
    """``x`` (tokens, heads, head_size) rotated by the per-token ``cos``/``sin`` (tokens, half), in
    the dtype of its arguments: NeoX pairs ``(x[i], x[i + half])``, GPT-J ``(x[2i], x[2i + 1])``,
    ``(a, b) -> (a·cos - b·sin, b·cos + a·sin)`` (the definition; run_torch.py uses it too)."""
    cos, sin = cos[:, None, :], sin[:, None, :]
    if neox:
        a, b = x.chunk(2, dim=-1)
        return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, b * cos + a * sin], dim=-1).flatten(-2)


def rope_cache(torch, head_size, dtype, max_pos=8192, base=500000.0):
    """A Llama-3 style ``cos_sin_cache`` (max_pos, head_size): cos of the angles, then sin."""
    inv = 1.0 / (base ** (torch.arange(0, head_size, 2, device="cuda", dtype=torch.float64) / head_size))
    ang = torch.arange(max_pos, device="cuda", dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cat([ang.cos(), ang.sin()], dim=-1).to(dtype)


def check_rotary(kernel, torch):
    a = _args(kernel)
    neox = "neox" in kernel.launch["name"]
    hs = a["C_"]["shape"][1]
    hq = a["Q_"]["shape"][1] // hs
    hk = a["K_"]["shape"][1] // hs if "K_" in a else 0
    dt, pdt = _dtype(torch, a["Q_"]), _dtype(torch, a["P_"])
    cache = rope_cache(torch, hs, dt)
    max_pos, cd = cache.shape[0], cache.double()
    worst = 0.0
    for m in ROWS:
        pos = torch.randint(0, max_pos, (m,), device="cuda", dtype=pdt)
        q, qg = _guarded(torch, m, hq * hs, dt, 7.0)
        q.copy_(torch.randn(m, hq * hs, device="cuda", dtype=dt))
        q0 = q.clone()
        args = [pos, q]
        if hk:
            k, kg = _guarded(torch, m, hk * hs, dt, 7.0)
            k.copy_(torch.randn(m, hk * hs, device="cuda", dtype=dt))
            k0 = k.clone()
            args.append(k)
        kernel(*args, cache)
        torch.cuda.synchronize()
        cos, sin = cd[pos.long(), :hs // 2], cd[pos.long(), hs // 2:]
        worst = max(worst, _check(torch, q.view(m, hq, hs), rotate(torch, q0.view(m, hq, hs).double(), cos, sin, neox),
                                  f"rotary q {m} tokens"))
        assert (qg == 7).all(), f"rotary: wrote past the last token of q ({m} tokens)"
        if hk:
            worst = max(worst, _check(torch, k.view(m, hk, hs), rotate(torch, k0.view(m, hk, hs).double(), cos, sin, neox),
                                      f"rotary k {m} tokens"))
            assert (kg == 7).all(), f"rotary: wrote past the last token of k ({m} tokens)"
    style = "NeoX" if neox else "GPT-J"
    return (f"{style} head_size={hs}, {hq} q / {hk} k heads, {a['Q_']['dtype']}, positions {a['P_']['dtype']}, "
            f"tokens {ROWS}: max err {worst:.1e} of max|ref| vs float64")


def check_gemm_silu_mul(rows):
    """The fused gate/up GEMM at each of ``rows``: ``silu(x·gateᵀ)·(x·upᵀ)`` against float64, the
    weight interleaved from the definition (blocks of 128 rows: 64 gate rows, then the same 64 up
    rows), the output NaN-poisoned with a guard row."""
    def check(kernel, torch):
        a = _args(kernel)
        N, K = a["B_"]["shape"]
        I, dt = N // 2, _dtype(torch, a["B_"])
        g = torch.Generator(device="cuda").manual_seed(N + K)
        gate, up = (torch.randn(I, K, device="cuda", dtype=dt, generator=g) * 0.03 for _ in range(2))
        w = torch.stack([gate.view(-1, 64, K), up.view(-1, 64, K)], 1).reshape(N, K)
        worst = 0.0
        for m in rows:
            x = torch.randn(m, K, device="cuda", dtype=dt, generator=g)
            y, guard = _guarded(torch, m, I, dt)
            kernel(x, w, y)
            torch.cuda.synchronize()
            xd = x.double()
            want = torch.nn.functional.silu(xd @ gate.double().T) * (xd @ up.double().T)
            worst = max(worst, _check(torch, y, want, f"gemm_silu_mul {m}x{N}x{K}"))
            assert guard.isnan().all(), f"gemm_silu_mul {m}x{N}x{K}: wrote past the last row"
        return f"{N}x{K} {a['B_']['dtype']}, rows {rows}: max err {worst:.1e} of max|ref| vs float64"
    return check


def _check_for(name):
    if name in GATE_UP_BUILDS:
        return check_gemm_silu_mul(GATE_UP_BUILDS[name][1])
    for prefix, fn in (("serving_rmsnorm_", check_rmsnorm), ("serving_fused_add_rmsnorm_", check_fused_add_rmsnorm),
                       ("serving_softmax_", check_softmax), ("serving_silu_and_mul_", check_silu_and_mul),
                       ("serving_rotary_", check_rotary)):
        if name.startswith(prefix):
            return fn
    raise KeyError(name)


CHECKS = {name: _check_for(name) for name in BUILDS}
