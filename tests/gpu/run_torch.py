#!/usr/bin/env python3
"""axe kernels as PyTorch functions on the GPU (issue 12): calls, dynamic M, torch.compile,
CUDA graphs, host overhead.

Two steps, one list of specializations (:data:`SPECS`) so both sides compute the same keys:

- here (TVM + nvcc): ``.venv/bin/python tests/gpu/run_torch.py build`` fills the cache folder
  ``.carry/axe_cache`` (one entry per specialization, with a progress display);
- on the GPU machine (no TVM): ``python3 tests/gpu/run_torch.py run [--out DIR]`` points
  ``AXE_CACHE_DIR`` there, checks that TVM is absent (so nothing is built), runs every check,
  prints a table and writes ``torch.json`` to ``--out`` (``$OUT``).  Exit status 1 if any
  check fails.

Checks: ``axe::rmsnorm`` / ``axe::softmax`` for many row counts (one artifact each, against
torch in fp32), the serving ops of a decoder layer (``axe::rmsnorm`` at row lengths that are not
multiples of 1024, ``axe::fused_add_rmsnorm``, ``axe::silu_and_mul``, ``axe::rotary_embedding`` —
in place, through strided views of a fused qkv tensor — eager, under ``torch.compile`` with
inductor and in a CUDA graph, and their GPU time beside torch's own ops), ``axe::gemm`` (the
dynamic-M builds: one artifact per (N, K, dtype, layout of b) and bucket of M, for every M in
``GEMM_ROWS``), a miss without TVM naming the build command, ``torch.compile(fullgraph=True)`` (inductor) of a function using the ops, CUDA
graph capture and replay, and the host time per call (jit + runtime) beside torch's own ops.
"""

import argparse
import json
import os
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cases_serving  # noqa: E402  (the serving ops' references, shared with the artifact checks)

CACHE = os.path.join(ROOT, ".carry", "axe_cache")
TARGET = "sm_90a"

#: (jit kernel in axe.torch.ops.KERNELS, its spec) — what the GPU run needs prebuilt
ROWS = (1, 7, 128, 1000, 4097)
#: row counts of the GEMM: below one tile, ragged, whole tiles, fewer tiles than SMs and more
GEMM_ROWS = (1, 127, 128, 512, 1000, 4097, 8192)


def _gemm_specs():
    """The GEMM op's specializations for GEMM_ROWS (one per bucket of M; the heuristic's
    configurations: no tuning table is carried)."""
    from axe.torch import tune
    out = []
    for name, dt, major in (("gemm", "float16", "row"), ("gemm_nt", "bfloat16", "col")):
        for m in GEMM_ROWS:
            s = (name, tune.spec_for("", 1024, 1024, dt, major, m))
            if s not in out:
                out.append(s)
    return out


#: the serving ops' sizes: Gemma-2-2B, gpt-oss and Gemma-2-9B hidden sizes (not multiples of 1024)
#: and Llama-3-8B's; MLP widths; rotary (head_size, query heads, key heads) of Llama-3-8B and a GPT-J
SERVING_HIDDEN = (2304, 2880, 3584, 4096)
SERVING_MLP = (2880, 14336)
SERVING_ROTARY = ((128, 32, 8, True), (64, 16, 16, False))


def _serving_specs():
    out = [(k, {"n": n, "dtype": "bfloat16"}) for n in SERVING_HIDDEN for k in ("rmsnorm", "fused_add_rmsnorm")]
    out += [("softmax", {"n": 2880, "dtype": "bfloat16"})]
    out += [("silu_and_mul", {"d": d, "dtype": "bfloat16"}) for d in SERVING_MLP]
    for hs, hq, hk, neox in SERVING_ROTARY:
        for kv in (hk, 0):                      # with a key and without (key=None)
            out.append(("rotary_neox" if neox else "rotary_gptj",
                        {"head_size": hs, "q_heads": hq, "kv_heads": kv, "is_neox": neox, "dtype": "bfloat16",
                         "pos_dtype": "int64"}))
    return [s for s in out if s[0] != "rmsnorm" or s[1]["n"] != 4096]     # rmsnorm 4096 bf16 is in SPECS already


#: the fused gate/up GEMM's (I, K): a small one, and gpt-oss's 2880 (2I = 5760 is not a multiple of
#: the 256-wide tile, so the selection takes 128-wide tiles there)
SILU_MUL_SHAPES = ((1024, 1024), (2880, 2880))
SILU_MUL_ROWS = (1, 7, 64, 300, 2048)


def _silu_mul_specs():
    """``gemm_silu_mul``'s specializations for SILU_MUL_ROWS (one per bucket of M, the heuristic's)."""
    from axe.torch import ops
    out = []
    for i, k in SILU_MUL_SHAPES:
        for m in SILU_MUL_ROWS:
            s = ("gemm_silu_mul", ops.spec_silu_mul_for("", 2 * i, k, "bfloat16", m))
            if s not in out:
                out.append(s)
    return out


SPECS = [("rmsnorm", {"n": n, "dtype": dt}) for n in (1024, 4096) for dt in ("float16", "bfloat16")] + \
        [("softmax", {"n": n, "dtype": dt}) for n in (1024, 4096) for dt in ("float16", "bfloat16")] + _gemm_specs() + \
        _serving_specs() + _silu_mul_specs()


def build(args):
    from axe.torch import ops
    return 1 if ops.prebuild(SPECS, args.cache, TARGET) else 0


# --- the GPU side -------------------------------------------------------------------------------

def _rms_ref(x, w, eps):
    xf = x.float()
    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()


def _close(got, want, what, tol):
    err = ((got.float() - want.float()).abs().max() / want.float().abs().max().clamp_min(1e-6)).item()
    assert not got.isnan().any(), f"{what}: NaN in the output"
    assert err < tol, f"{what}: max error {err:.2e} (relative to the largest value) exceeds {tol}"
    return err


def _loaded(ops, names, count, what):
    """Each jit kernel ``names`` built nothing here and loaded ``count`` artifacts (for ``what``)."""
    for name in names:
        k = ops.KERNELS[name]
        assert k.builds == 0, f"{name}: built {k.builds} artifacts on the GPU machine"
        assert len(k._memo) == count, f"{name}: {len(k._memo)} kernels loaded for {what}, expected {count}"


def check_rows(ops, res):
    """rmsnorm and softmax for every row count in ROWS, 2 row lengths, 2 dtypes: one artifact
    per (n, dtype), nothing built."""
    worst = 0.0
    for n in (1024, 4096):
        for dt in (torch.float16, torch.bfloat16):
            w = torch.randn(n, dtype=dt, device="cuda")
            for m in ROWS:
                x = torch.randn(m, n, dtype=dt, device="cuda") * 3
                worst = max(worst, _close(torch.ops.axe.rmsnorm(x, w, 1e-5), _rms_ref(x, w, 1e-5), f"rmsnorm {m}x{n} {dt}", 2e-2))
                worst = max(worst, _close(torch.ops.axe.softmax(x), torch.softmax(x.float(), -1), f"softmax {m}x{n} {dt}", 2e-2))
            x3 = torch.randn(2, 3, n, dtype=dt, device="cuda")
            _close(torch.ops.axe.softmax(x3), torch.softmax(x3.float(), -1), f"softmax 2x3x{n}", 2e-2)
    _loaded(ops, ("rmsnorm", "softmax"), 4, "4 (n, dtype) pairs")
    res["rows_max_rel_err"] = worst
    return f"{len(ROWS)} row counts x 2 n x 2 dtypes, one artifact per (n, dtype); worst rel err {worst:.1e}"


def check_gemm(ops, res):
    """``axe::gemm`` for every M in GEMM_ROWS, B row- and column-major: one artifact per bucket of
    M serves them (nothing built), rows past M untouched (C is exactly M x N)."""
    b = torch.randn(1024, 1024, dtype=torch.float16, device="cuda")
    b2 = torch.randn(1024, 1024, dtype=torch.bfloat16, device="cuda")
    worst = 0.0
    for m in GEMM_ROWS:
        a = torch.randn(m, 1024, dtype=torch.float16, device="cuda")
        worst = max(worst, _close(torch.ops.axe.gemm(a, b), a.float() @ b.float(), f"gemm fp16 row M={m}", 1e-2))
        a2 = a.bfloat16()
        worst = max(worst, _close(torch.ops.axe.gemm(a2, b2, True), a2.float() @ b2.float().T,
                                  f"gemm bf16 col M={m}", 2e-2))
    buckets = sum(1 for name, _ in SPECS if name == "gemm")       # distinct configurations of the buckets
    _loaded(ops, ("gemm", "gemm_nt"), buckets, f"{len(GEMM_ROWS)} row counts of one (N, K, dtype)")
    res["gemm_max_rel_err"] = worst
    return (f"M in {GEMM_ROWS} x 1024 x 1024, fp16 a@b and bf16 a@b.T, one artifact per bucket's configuration ({buckets}); "
            f"worst rel err {worst:.1e}")


def check_missing(ops, res):
    from axe.torch.cache import ArtifactMissing
    x = torch.randn(4, 2048, dtype=torch.float16, device="cuda")
    try:
        torch.ops.axe.softmax(x)
    except ArtifactMissing as e:
        msg = str(e)
        assert "axe cache build kernels.softmax:dynamic dtype=float16 n=2048 --target sm_90a" in msg, msg
        assert "TVM is not installed" in msg, msg
        return "an unbuilt (n=2048) specialization names its build command"
    raise AssertionError("softmax n=2048 ran, but nothing built it")


def check_compile(ops, res):
    def f(x, w):
        return torch.ops.axe.softmax(torch.ops.axe.rmsnorm(x, w) * 2) + 1

    w = torch.randn(1024, dtype=torch.float16, device="cuda")
    out = []
    for backend in ("inductor", "aot_eager"):
        torch._dynamo.reset()
        g = torch.compile(f, fullgraph=True, backend=backend, dynamic=True)
        for m in (5, 64, 333):
            x = torch.randn(m, 1024, dtype=torch.float16, device="cuda")
            want = torch.softmax((_rms_ref(x, w, 1e-6).half() * 2).float(), -1) + 1
            _close(g(x, w), want, f"compiled ({backend}) M={m}", 2e-2)
        out.append(backend)
    return f"fullgraph=True, dynamic=True, backends {', '.join(out)}: right for M in (5, 64, 333)"


def check_graphs(ops, res):
    w = torch.randn(4096, dtype=torch.bfloat16, device="cuda")
    x = torch.randn(256, 4096, dtype=torch.bfloat16, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):                  # warm up (loads the kernels) off the capture
        for _ in range(2):
            y = torch.ops.axe.softmax(torch.ops.axe.rmsnorm(x, w))
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = torch.ops.axe.softmax(torch.ops.axe.rmsnorm(x, w))
    for i in range(3):
        x.copy_(torch.randn_like(x) * (i + 1))
        g.replay()
        torch.cuda.synchronize()
        _close(y, torch.softmax(_rms_ref(x, w, 1e-6).bfloat16().float(), -1), f"graph replay {i}", 2e-2)
    return "rmsnorm -> softmax captured once, 3 replays on new inputs right"


def _per_call(fn, n=2000):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    host = (time.perf_counter() - t) / n
    torch.cuda.synchronize()
    return host


def _profile(fn, n=500, top=15):
    """Where the host time of ``fn`` goes: cProfile's top functions by own time over ``n`` calls,
    as ``"us per call own/cumulative  function"`` lines (printed, and kept in the JSON)."""
    import cProfile
    import pstats
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    st = pstats.Stats(prof)
    rows = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:top]
    lines = [f"{tt / n * 1e6:7.2f} {ct / n * 1e6:7.2f}  {os.path.basename(f)}:{line}({fn_name})"
             for (f, line, fn_name), (_, _, tt, ct, _) in rows]
    print("host profile (us per call, own / cumulative):\n  " + "\n  ".join(lines))
    return lines


def check_overhead(ops, res):
    """Host time per call on a tiny problem (launch-bound): the op (custom-op dispatch + jit +
    runtime), the jit kernel alone, the runtime Kernel alone, torch's own op."""
    x = torch.randn(8, 1024, dtype=torch.float16, device="cuda")
    w = torch.randn(1024, dtype=torch.float16, device="cuda")
    y = torch.empty_like(x)
    jk = ops.KERNELS["rmsnorm"]
    w2 = w.view(1, 1024)
    rk = jk._memo[(x.device, ("n", 1024), ("dtype", "float16"))]
    ga = torch.randn(8, 1024, dtype=torch.float16, device="cuda")          # the dynamic-M GEMM, M = 8
    gb = torch.randn(1024, 1024, dtype=torch.float16, device="cuda")
    fig = {
        "op axe::rmsnorm": _per_call(lambda: torch.ops.axe.rmsnorm(x, w)),
        "op body without dispatch": _per_call(lambda: ops._rmsnorm(x, w)),
        "jit kernel": _per_call(lambda: jk(x, w2, y, 1e-6)),
        "runtime Kernel": _per_call(lambda: rk(x, w2, y, 1e-6)),
        "op axe::gemm": _per_call(lambda: torch.ops.axe.gemm(ga, gb)),
        "torch matmul": _per_call(lambda: ga @ gb),
        "torch rms_norm": _per_call(lambda: torch.nn.functional.rms_norm(x, (1024,), w, 1e-6)),
        "torch softmax": _per_call(lambda: torch.softmax(x, -1)),
    }
    res["host_us_per_call"] = {k: round(v * 1e6, 2) for k, v in fig.items()}
    res["op_profile"] = _profile(lambda: torch.ops.axe.rmsnorm(x, w))
    res["jit_bookkeeping_us"] = round((fig["jit kernel"] - fig["runtime Kernel"]) * 1e6, 2)
    return ", ".join(f"{k} {v * 1e6:.1f} us" for k, v in fig.items())


def check_speed(ops, res):
    """GPU time per call (CUDA events) of the dynamic-M kernels against torch, a few M."""
    rows = {}
    for n in (1024, 4096):
        w = torch.randn(n, dtype=torch.float16, device="cuda")
        for m in (128, 4096, 32768):
            x = torch.randn(m, n, dtype=torch.float16, device="cuda")
            t = {}
            for name, fn in (("axe_rmsnorm", lambda: torch.ops.axe.rmsnorm(x, w)),
                             ("torch_rmsnorm", lambda: torch.nn.functional.rms_norm(x, (n,), w, 1e-6)),
                             ("axe_softmax", lambda: torch.ops.axe.softmax(x)),
                             ("torch_softmax", lambda: torch.softmax(x, -1))):
                for _ in range(5):
                    fn()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                for _ in range(50):
                    fn()
                b.record()
                torch.cuda.synchronize()
                t[name] = round(a.elapsed_time(b) / 50 * 1e3, 2)     # us
            rows[f"{m}x{n}"] = t
    res["gpu_us"] = rows
    return "; ".join(f"{k}: " + " ".join(f"{n}={v}" for n, v in t.items()) for k, t in rows.items())


def check_readme(ops, res):
    """The README's "Calling axe from PyTorch" example, as written (its specializations are in
    SPECS)."""
    text = open(os.path.join(ROOT, "README.md")).read()
    section = text[text.index("## Calling axe from PyTorch"):]
    code = section[section.index("```python\n") + 10:section.index("```\n", section.index("```python\n") + 10)]
    scope = {}
    exec(compile(code, "README.md", "exec"), scope)
    _close(scope["y"], _rms_ref(scope["x"], scope["w"], 1e-6), "README rmsnorm", 2e-2)
    _close(scope["f"](scope["x"], scope["w"]), torch.softmax(_rms_ref(scope["x"], scope["w"], 1e-6).bfloat16().float(), -1),
           "README compiled", 2e-2)
    return f"ran ({len(code.splitlines())} lines); y, f(x, w) right; c {tuple(scope['c'].shape)}"


# --- the serving ops ----------------------------------------------------------------------------

SERVING_ROWS = (1, 7, 33, 1000)


def _fused_ref(x, r, w, eps):
    """(x, residual) after vLLM's fused_add_rms_norm, from torch ops: the residual rounded once."""
    r2 = (x.float() + r.float()).to(x.dtype)
    return _rms_ref(r2, w, eps), r2


def _rope_cache(hs):
    return cases_serving.rope_cache(torch, hs, torch.bfloat16)


def _rope_ref(pos, x, cache, neox):
    """``x`` (tokens, heads, hs) rotated by ``cache[pos]`` in fp32."""
    cos, sin = cache.float()[pos].chunk(2, dim=-1)
    return cases_serving.rotate(torch, x.float(), cos, sin, neox)


def check_serving(ops, res):
    """The decoder-layer ops at every row count in SERVING_ROWS against torch: rmsnorm and
    fused_add_rmsnorm at hidden sizes that are not multiples of 1024, softmax with -inf entries,
    silu_and_mul, rotary_embedding on the q and k slices of a fused qkv tensor (strided: rotated
    through copies written back) and on contiguous q (key None); nothing built here."""
    worst = 0.0
    bf = torch.bfloat16
    for n in SERVING_HIDDEN:
        w = torch.randn(n, dtype=bf, device="cuda")
        for m in SERVING_ROWS:
            x, r = torch.randn(m, n, dtype=bf, device="cuda"), torch.randn(m, n, dtype=bf, device="cuda") * 4
            worst = max(worst, _close(torch.ops.axe.rmsnorm(x, w, 1e-5), _rms_ref(x, w, 1e-5), f"rmsnorm {m}x{n}", 2e-2))
            want_x, want_r = _fused_ref(x, r, w, 1e-6)
            torch.ops.axe.fused_add_rmsnorm(x, r, w, 1e-6)
            assert torch.equal(r, want_r), f"fused_add_rmsnorm {m}x{n}: residual is not round(x + residual)"
            worst = max(worst, _close(x, want_x, f"fused_add_rmsnorm {m}x{n}", 2e-2))
    for m in SERVING_ROWS:
        x = torch.randn(m, 2880, dtype=bf, device="cuda") * 4
        x[:, ::3] = float("-inf")
        worst = max(worst, _close(torch.ops.axe.softmax(x), torch.softmax(x.float(), -1), f"softmax {m}x2880", 2e-2))
        for d in SERVING_MLP:
            g = torch.randn(m, 2 * d, dtype=bf, device="cuda") * 3
            want = torch.nn.functional.silu(g[:, :d].float()) * g[:, d:].float()
            worst = max(worst, _close(torch.ops.axe.silu_and_mul(g), want, f"silu_and_mul {m}x{d}", 2e-2))
    for hs, hq, hk, neox in SERVING_ROTARY:
        cache = _rope_cache(hs)
        for m in SERVING_ROWS:
            pos = torch.randint(0, cache.shape[0], (m,), device="cuda")
            qkv = torch.randn(m, (hq + 2 * hk) * hs, dtype=bf, device="cuda")
            q, k, v = qkv.split([hq * hs, hk * hs, hk * hs], dim=-1)
            q0, k0, v0 = q.clone(), k.clone(), v.clone()
            torch.ops.axe.rotary_embedding(pos, q, k, hs, cache, neox)
            worst = max(worst, _close(q.view(m, hq, hs), _rope_ref(pos, q0.view(m, hq, hs), cache, neox), f"rope q {m}", 2e-2))
            worst = max(worst, _close(k.view(m, hk, hs), _rope_ref(pos, k0.view(m, hk, hs), cache, neox), f"rope k {m}", 2e-2))
            assert torch.equal(v, v0), "rotary_embedding touched v"
            qc = q0.clone()
            torch.ops.axe.rotary_embedding(pos, qc, None, hs, cache, neox)
            _close(qc.view(m, hq, hs), _rope_ref(pos, q0.view(m, hq, hs), cache, neox), f"rope q (key None) {m}", 2e-2)
    for name in ("fused_add_rmsnorm", "silu_and_mul", "rotary_neox", "rotary_gptj"):
        assert ops.KERNELS[name].builds == 0, f"{name}: built on the GPU machine"
    res["serving_max_rel_err"] = worst
    return (f"hidden {SERVING_HIDDEN}, mlp {SERVING_MLP}, rope {SERVING_ROTARY}, rows {SERVING_ROWS}; "
            f"residual exact; worst rel err {worst:.1e}")


def _decoder_piece(x, residual, w, pos, q, k, cache, gate_up):
    torch.ops.axe.fused_add_rmsnorm(x, residual, w, 1e-5)
    torch.ops.axe.rotary_embedding(pos, q, k, 128, cache, True)
    return x * 2, residual + 1, q * 1, k * 1, torch.ops.axe.silu_and_mul(gate_up)


def _decoder_args(m, cache):
    bf = torch.bfloat16
    return (torch.randn(m, 4096, dtype=bf, device="cuda"), torch.randn(m, 4096, dtype=bf, device="cuda"),
            torch.randn(4096, dtype=bf, device="cuda"), torch.randint(0, cache.shape[0], (m,), device="cuda"),
            torch.randn(m, 32 * 128, dtype=bf, device="cuda"), torch.randn(m, 8 * 128, dtype=bf, device="cuda"),
            cache, torch.randn(m, 2 * 14336, dtype=bf, device="cuda"))


def check_serving_compile(ops, res):
    """torch.compile(fullgraph=True, dynamic=True) of the mutating ops (functionalized by
    torch, re-inplaced by inductor): outputs and the mutated inputs equal eager's."""
    cache = _rope_cache(128)
    out = []
    for backend in ("inductor", "aot_eager"):
        torch._dynamo.reset()
        g = torch.compile(_decoder_piece, fullgraph=True, backend=backend, dynamic=True)
        for m in (5, 64, 333):
            a = _decoder_args(m, cache)
            e = [t.clone() for t in a]
            want = _decoder_piece(*e)
            got = g(*a)
            for i, (x, y) in enumerate(zip(got, want)):
                assert torch.equal(x, y), f"compiled ({backend}) M={m}: output {i} differs from eager"
            for i in (0, 1, 4, 5):
                assert torch.equal(a[i], e[i]), f"compiled ({backend}) M={m}: mutated input {i} differs from eager"
        out.append(backend)
    return f"fullgraph=True, dynamic=True, backends {', '.join(out)}: equal to eager for M in (5, 64, 333)"


def check_serving_graph(ops, res):
    """fused_add_rmsnorm, rotary_embedding and silu_and_mul captured in a CUDA graph, replayed
    on new inputs."""
    cache = _rope_cache(128)
    a = _decoder_args(64, cache)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):                  # warm up (loads the kernels) off the capture
        for _ in range(2):
            _decoder_piece(*a)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        outs = _decoder_piece(*a)
    for i in range(3):
        fresh = _decoder_args(64, cache)
        for t, f in zip(a, fresh):
            if t is not cache:
                t.copy_(f)
        e = [f.clone() for f in fresh]
        want = _decoder_piece(*e)
        g.replay()
        torch.cuda.synchronize()
        for j, (x, y) in enumerate(zip(outs, want)):
            assert torch.equal(x, y), f"graph replay {i}: output {j} differs from eager"
    return "fused_add_rmsnorm -> rotary -> silu_and_mul captured once, 3 replays equal to eager"


def _silu_mul_ref(x, g, u):
    """silu(x·gᵀ)·(x·uᵀ) in fp32 from the dtype's operands."""
    return torch.nn.functional.silu(x.float() @ g.float().T) * (x.float() @ u.float().T)


def check_gemm_silu_mul(ops, res):
    """``axe::gemm_silu_mul`` of an interleaved weight equals silu(x·gᵀ)·(x·uᵀ) for every row count
    of SILU_MUL_ROWS and both shapes, eagerly, under torch.compile(fullgraph=True) and replayed
    from a CUDA graph on new inputs."""
    worst = 0.0
    for i, k in SILU_MUL_SHAPES:
        g = torch.randn(i, k, dtype=torch.bfloat16, device="cuda") / k ** 0.5
        u = torch.randn(i, k, dtype=torch.bfloat16, device="cuda") / k ** 0.5
        w = ops.interleave_gate_up(g, u)
        for m in SILU_MUL_ROWS:
            x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
            got = torch.ops.axe.gemm_silu_mul(x, w)
            assert got.shape == (m, i), f"gemm_silu_mul {m}x{k} . {2 * i}x{k}: shape {tuple(got.shape)}"
            worst = max(worst, _close(got, _silu_mul_ref(x, g, u), f"gemm_silu_mul M={m} I={i} K={k}", 2e-2))
    torch._dynamo.reset()
    f = torch.compile(lambda x, w: torch.ops.axe.gemm_silu_mul(x, w) * 2, fullgraph=True, dynamic=True)
    for m in (7, 300):
        x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        _close(f(x, w), 2 * _silu_mul_ref(x, g, u), f"compiled gemm_silu_mul M={m}", 2e-2)
    x = torch.randn(64, k, dtype=torch.bfloat16, device="cuda")
    torch.ops.axe.gemm_silu_mul(x, w)               # loads the kernel off the capture
    torch.cuda.synchronize()
    cg = torch.cuda.CUDAGraph()
    with torch.cuda.graph(cg):
        y = torch.ops.axe.gemm_silu_mul(x, w)
    for r in range(3):
        x.copy_(torch.randn_like(x) * (r + 1))
        cg.replay()
        torch.cuda.synchronize()
        _close(y, _silu_mul_ref(x, g, u), f"gemm_silu_mul graph replay {r}", 2e-2)
    res["gemm_silu_mul_max_rel_err"] = worst
    return (f"(I, K) in {SILU_MUL_SHAPES} x M in {SILU_MUL_ROWS}, compiled (M 7, 300), 3 graph replays; "
            f"worst rel err {worst:.1e}")


def _gpu_us(fn, n=50):
    from axe.torch.timing import burst_ms
    return round(burst_ms(torch, fn, calls=n, blocks=1, warmup=5) * 1e3, 2)


def check_serving_speed(ops, res):
    """GPU time per call (CUDA events, back to back) of the serving ops beside torch's eager
    equivalents (not fused: what a model without custom kernels runs)."""
    rows = {}
    cache = _rope_cache(128)
    for m in (1, 33, 1000, 8192):
        x, r, w, pos, q, k, _, gu = _decoder_args(m, cache)
        xs = x[:, :3584].contiguous()
        ws = w[:3584].contiguous()

        def torch_fused():
            r2 = x + r
            return torch.nn.functional.rms_norm(r2, (4096,), w, 1e-6)

        def torch_rope():
            c = cache[pos]
            cos, sin = c.chunk(2, -1)
            for t, h in ((q, 32), (k, 8)):
                v = t.view(m, h, 128)
                a, b = v.chunk(2, -1)
                cs, sn = cos[:, None], sin[:, None]
                torch.cat([a * cs - b * sn, b * cs + a * sn], -1)
        rows[f"M={m}"] = {
            "axe_fused_add_rmsnorm_4096": _gpu_us(lambda: torch.ops.axe.fused_add_rmsnorm(x, r, w, 1e-6)),
            "torch_add_rms_norm_4096": _gpu_us(torch_fused),
            "axe_rmsnorm_3584": _gpu_us(lambda: torch.ops.axe.rmsnorm(xs, ws, 1e-6)),
            "torch_rms_norm_3584": _gpu_us(lambda: torch.nn.functional.rms_norm(xs, (3584,), ws, 1e-6)),
            "axe_silu_and_mul_14336": _gpu_us(lambda: torch.ops.axe.silu_and_mul(gu)),
            "torch_silu_mul_14336": _gpu_us(lambda: torch.nn.functional.silu(gu[:, :14336]) * gu[:, 14336:]),
            "axe_rope_32q8k": _gpu_us(lambda: torch.ops.axe.rotary_embedding(pos, q, k, 128, cache, True)),
            "torch_rope_32q8k": _gpu_us(torch_rope),
        }
    res["serving_gpu_us"] = rows
    return "; ".join(f"{k}: " + " ".join(f"{n}={v}" for n, v in t.items()) for k, t in rows.items())


CHECKS = [check_rows, check_gemm, check_missing, check_compile, check_graphs, check_overhead, check_speed,
          check_readme, check_serving, check_serving_compile, check_serving_graph, check_serving_speed,
          check_gemm_silu_mul]


def run(args):
    global torch
    os.environ["AXE_CACHE_DIR"] = args.cache
    import importlib.util
    assert importlib.util.find_spec("tvm") is None, "TVM is installed here: this run must show that none is needed"
    import torch
    from axe.torch import ops
    res, failed = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}, 0
    rows = []
    for check in CHECKS:
        t = time.perf_counter()
        try:
            msg, ok = check(ops, res), True
        except Exception:  # noqa: BLE001 - report every check
            msg, ok = traceback.format_exc(), False
            failed += 1
        rows.append((check.__name__, ok, time.perf_counter() - t))
        print(f"{'ok  ' if ok else 'FAIL'} {check.__name__:16s} {msg}", flush=True)
    print("\n".join(f"{n:16s} {'ok' if ok else 'FAIL':4s} {s:6.1f} s" for n, ok, s in rows))
    res["checks"] = {n: ok for n, ok, _ in rows}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "torch.json"), "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res, indent=1))
    return 1 if failed else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("build", "run"))
    ap.add_argument("--cache", default=CACHE)
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/axe-out"))
    args = ap.parse_args(argv)
    return build(args) if args.what == "build" else run(args)


if __name__ == "__main__":
    sys.exit(main())
