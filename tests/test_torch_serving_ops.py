"""The ops a Llama decoder layer needs, on the CPU: ``torch.ops.axe.rmsnorm`` / ``softmax`` at any
row length that is a multiple of 8, ``fused_add_rmsnorm``, ``silu_and_mul`` and
``rotary_embedding`` (vLLM's conventions).

- the row tiling of ``kernels/rmsnorm.py`` (:func:`row_tile`) checked by enumeration;
- the kernels build for sm_90a at representative hidden sizes (a tail of threads or not), with
  16-byte vectors, no spills and their launch signature;
- the ops through real builds (TVM + nvcc) whose launches a CPU stand-in performs: the runtime's
  own ``bind_arguments`` checks every call against the artifact's ``launch.json`` and torch
  computes what the kernel computes; the ops' results are checked against NumPy oracles written
  here from the definitions (float64), including the in-place ops' writes into the caller's
  tensors (copied back when the caller's tensor is a strided or misaligned view);
- fake tensors, ``torch.library.opcheck`` and ``torch.compile(fullgraph=True)``.

The kernels' own numerics are checked on the GPU: ``tests/gpu/cases_serving.py`` and
``tests/gpu/run_torch.py``.
"""

import os
import random
import re

import numpy as np
import pytest
import torch

pytest.importorskip("tvm")
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")

from axe.backends.cuda.artifact import Artifact, eval_expr  # noqa: E402
from axe.layout import slice_layout  # noqa: E402
from axe.torch.cache import ArtifactCache  # noqa: E402
from axe.torch.jit import JitKernel  # noqa: E402
from kernels import rotary, silu_mul  # noqa: E402
from test_torch_jit import REFS, CpuLaunch  # noqa: E402


def _load_cases():
    """tests/gpu/cases_serving.py (not a package: loaded by path, as scripts/gpu_build.py does)."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu", "cases_serving.py")
    spec = importlib.util.spec_from_file_location("cases_serving", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


CASES = _load_cases()

ROW_COUNTS = (1, 7, 33)
HIDDEN = (2048, 2304, 2880, 3584, 4096, 5120, 7168, 8192)


# --- NumPy oracles (float64, from the definitions) ----------------------------------------------

def _np(t):
    return t.detach().double().numpy()


def rmsnorm_np(x, w, eps):
    x = _np(x)
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * _np(w)


def silu_mul_np(x):
    x = _np(x)
    d = x.shape[-1] // 2
    g, u = x[..., :d], x[..., d:]
    return g / (1 + np.exp(-g)) * u


def softmax_np(x):
    x = _np(x)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def rotary_np(positions, x, cache, is_neox):
    """Rotate every head of ``x`` (tokens, heads, head_size) pair by pair, as the definition reads."""
    x, cache, pos = _np(x), _np(cache), positions.numpy().reshape(-1)
    out = x.copy()
    hs = x.shape[-1]
    half = hs // 2
    for t in range(x.shape[0]):
        cos, sin = cache[pos[t], :half], cache[pos[t], half:]
        for h in range(x.shape[1]):
            for i in range(half):
                ia, ib = (i, i + half) if is_neox else (2 * i, 2 * i + 1)
                a, b = x[t, h, ia], x[t, h, ib]
                out[t, h, ia] = a * cos[i] - b * sin[i]
                out[t, h, ib] = b * cos[i] + a * sin[i]
    return out


def close(got, want, tol):
    """Max error relative to the largest |want| (a dtype-rounded result against float64)."""
    got = _np(got)
    err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-6)
    assert err < tol, f"max error {err:.2e} of max |want| exceeds {tol}"


# --- the row tiling -----------------------------------------------------------------------------

def test_row_tile_covers_each_value_once():
    """For every row length: the pieces tile [0, n) in order; each value of the row is held by
    exactly one (thread, register) of the padded tile; a piece's slice of the layout is a
    layout (one copy) whose threads are all threads (the body) or the first n/8 mod T (the
    tail); nothing is padded exactly when n is a multiple of T·8."""
    from kernels.rmsnorm import VEC, row_tile
    rng = random.Random(0)
    for n in sorted({8, 16, 1016, 1024, 1032, *HIDDEN, 16384, 16392, *rng.sample(range(8, 20000, 8), 12)}):
        rt = row_tile(n)
        T = rt.threads
        assert T in (128, 256, 512, 1024) and rt.padded % (T * VEC) == 0 and 0 <= rt.padded - n < T * VEC
        assert rt.exact == (n % (T * VEC) == 0) and rt.layout.size == rt.padded
        assert [lo for lo, _ in rt.pieces] == [0] + [hi for _, hi in rt.pieces[:-1]] and rt.pieces[-1][1] == n
        assert n <= T * 64 or T == 1024                       # at most 64 values a thread below 1024 threads
        owners = set()
        for i in range(0, rt.padded, VEC):                    # a chunk's 8 values lie in one thread's registers
            (c,) = rt.layout.map((0, i), (1, rt.padded))
            (c_last,) = rt.layout.map((0, i + VEC - 1), (1, rt.padded))
            assert c_last["tx"] == c["tx"] and c_last["m"] == c["m"] + VEC - 1
            owners.add((c["tx"], c["m"]))
        assert len(owners) == rt.padded // VEC                # no two chunks share registers
        for lo, hi in rt.pieces:
            piece = slice_layout(rt.layout, (1, rt.padded), ((0, 1), (lo, hi)))
            assert piece is not None
            threads = {next(iter(piece.map(j)))["tx"] for j in range(0, hi - lo, VEC)}
            want = T if hi - lo >= T * VEC else (n // VEC) % T
            assert threads == set(range(want)), (n, lo, hi)


def test_row_tile_refuses_lengths_not_multiple_of_8():
    from kernels import rmsnorm, silu_mul, softmax
    for bad in (0, 4, 1000 + 4, -8):
        with pytest.raises(ValueError, match=f"n={bad} must be a positive multiple of 8"):
            rmsnorm.dynamic(bad, "float16")
        with pytest.raises(ValueError, match=f"n={bad} must be a positive multiple of 8"):
            softmax.dynamic(bad, "float16")
    with pytest.raises(ValueError, match="d=12 .* must be a positive multiple of 8"):
        silu_mul.dynamic(12, "float16")
    with pytest.raises(ValueError, match="dtype 'float32' must be float16 or bfloat16"):
        rmsnorm.dynamic_add(2880, "float32")


# --- the ops through real builds and a CPU stand-in for the launcher -------------------------------

def _f32_rms(x, w, eps):
    xf = x.float()
    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()


def _rotary_standin(t, env, is_neox):
    """The rotation in fp32 by tests/gpu/cases_serving.py's torch reference (what the GPU checks use)."""
    P, C = t["P_"], t["C_"]
    hs = C.shape[1]
    cos, sin = C.float()[P.long()].chunk(2, dim=-1)
    for name in ("Q_", "K_"):
        if name in t:
            X = t[name]
            X.copy_(CASES.rotate(torch, X.view(X.shape[0], -1, hs).float(), cos, sin, is_neox).reshape(X.shape))


def _fused_standin(t, env):
    r = (t["X_"].float() + t["R_"].float()).to(t["R_"].dtype)
    t["R_"].copy_(r)
    t["X_"].copy_(_f32_rms(r, t["W_"], env["eps"]).to(r.dtype))


#: what each artifact computes (the kernel's conventions, in torch), by kernel name, for
#: test_torch_jit's CpuLaunch (which binds each call with the runtime's bind_arguments)
REFS.update({                   # (rmsnorm_dyn and softmax_dyn are test_torch_jit's own)
    "fused_add_rmsnorm_dyn": _fused_standin,
    "silu_and_mul_dyn": lambda t, env: t["Y_"].copy_(silu_mul.reference(t["X_"])),
    "rotary_neox_dyn": lambda t, env: _rotary_standin(t, env, True),
    "rotary_gptj_dyn": lambda t, env: _rotary_standin(t, env, False),
})


NAMES = ("rmsnorm", "softmax", "fused_add_rmsnorm", "silu_and_mul", "rotary_neox", "rotary_gptj")


@pytest.fixture(scope="module")
def ops(tmp_path_factory):
    """axe.torch.ops with the serving kernels building for real into a fresh cache, launched by
    ``CpuLaunch`` (the runtime's argument checks against the real ``launch.json``, then torch)."""
    from axe.torch import ops
    cache = ArtifactCache(tmp_path_factory.mktemp("cache"), shipped=[])
    saved = dict(ops.KERNELS)
    for name in NAMES:
        k = ops.KERNELS[name]
        ops.KERNELS[name] = JitKernel(k.kernel, k.spec, path=k.path, cache=cache, loader=CpuLaunch,
                                      target="sm_90a", progress=False)
    yield ops
    ops.KERNELS.update(saved)


def _loaded(ops, name):
    return [dict(m[1:]) for m in ops.KERNELS[name]._memo]


# --- the builds (the same specializations as the op tests below: each is built once) ---------------

def _built(ops, name, **spec):
    """The sm_90a artifact of ``ops.KERNELS[name]`` for ``spec`` (from the fixture's cache)."""
    art = Artifact.load(ops.KERNELS[name].artifact_path("sm_90a", spec))
    assert art.launch["resources"].get("spill_stores", 0) == 0, art.launch["resources"]
    return art


def _v4(art):
    return art.ptx.count("ld.global.v4"), art.ptx.count("st.global.v4")


@pytest.mark.parametrize("name,n,dtype", [("rmsnorm", 2304, "float16"), ("rmsnorm", 2880, "bfloat16"),
                                          ("fused_add_rmsnorm", 3584, "float16"), ("fused_add_rmsnorm", 4096, "float16"),
                                          ("softmax", 2880, "bfloat16")])
def test_row_kernels_build_for_hidden_sizes(ops, name, n, dtype):
    """One 16-byte load per chunk a thread holds (its whole chunks, plus a predicated tail chunk
    where n/8 is not a multiple of the threads), for each tensor read; the grid is one CTA a row."""
    from kernels.rmsnorm import row_tile
    art = _built(ops, name, n=n, dtype=dtype)
    rt = row_tile(n)
    L = art.launch
    assert L["block"] == [rt.threads, 1, 1] and [eval_expr(g, {"M": 1000}) for g in L["grid"]] == [1000, 1, 1]
    tensors = {a["name"]: a for a in L["args"] if a["kind"] == "tensor"}
    assert all(a["dtype"] == dtype and a["alignment"] == 16 for a in tensors.values())
    per_tensor = rt.padded // (rt.threads * 8)                # copies a thread issues per row (tail included)
    reads = {"rmsnorm": 2, "fused_add_rmsnorm": 3, "softmax": 1}[name]
    writes = {"rmsnorm": 1, "fused_add_rmsnorm": 2, "softmax": 1}[name]
    assert _v4(art) == (reads * per_tensor, writes * per_tensor), (_v4(art), per_tensor)
    # each copy of the tail runs on the threads that hold it: tx % tail == tx (or tx & (tail - 1) == tx)
    guarded = re.findall(r"if \(\(\(\(int\)threadIdx\.x\) [%&] \d+\) == \(\(int\)threadIdx\.x\)\)", art.cuda_source)
    assert len(guarded) == (0 if rt.exact else reads + writes)
    if name == "fused_add_rmsnorm":
        assert [a["name"] for a in L["args"]] == ["X_", "W_", "R_", "eps"]
        assert tensors["X_"]["shape"] == tensors["R_"]["shape"] == ["M", n]
    assert "shfl.sync.bfly" in art.ptx


@pytest.mark.parametrize("d,dtype", [(2880, "bfloat16"), (4096, "float16")])
def test_silu_and_mul_builds(ops, d, dtype):
    """Grid (M, column blocks of 2048); whole blocks: 2 chunks of gate, up and out a thread; a
    short last block is its own branch (d = 2880: one whole block + 832 columns; d = 4096: two
    whole blocks, no branch)."""
    art = _built(ops, "silu_and_mul", d=d, dtype=dtype)
    L = art.launch
    blocks = -(-d // silu_mul.BLOCK)
    assert [eval_expr(g, {"M": 33}) for g in L["grid"]] == [33, blocks, 1] and L["block"] == [128, 1, 1]
    assert {a["name"]: a["shape"] for a in L["args"]} == {"X_": ["M", 2 * d], "Y_": ["M", d]}
    whole = d // silu_mul.BLOCK
    tail = d % silu_mul.BLOCK
    loads = (4 if whole else 0) + (2 if tail else 0)     # gate, up: 2 chunks each in a whole block, 1 in the tail
    assert _v4(art) == (loads, loads // 2)
    assert ("blockIdx.y) == " in art.cuda_source) == bool(tail and whole)   # one block: no branch


ROTARY = [(128, 20, 4, True, "bfloat16", "int64"), (64, 3, 1, False, "float16", "int32"),
          (128, 20, 0, True, "bfloat16", "int64")]


@pytest.mark.parametrize("head_size,hq,hk,neox,dtype,pos", ROTARY)
def test_rotary_builds(ops, head_size, hq, hk, neox, dtype, pos):
    """One CTA a token; the cos and sin halves once (16-byte NeoX, 8-byte GPT-J chunks); each
    head pass of query and key one 16-byte load and store per thread and half (NeoX) or chunk
    (GPT-J), a short pass on the first threads only; no key argument when kv_heads = 0."""
    art = _built(ops, "rotary_neox" if neox else "rotary_gptj", head_size=head_size, q_heads=hq, kv_heads=hk,
                 is_neox=neox, dtype=dtype, pos_dtype=pos)
    L = art.launch
    assert [a["name"] for a in L["args"]] == ["P_", "Q_"] + (["K_"] if hk else []) + ["C_"]
    assert L["symbols"]["M"] == {"arg": "P_", "dim": 0} and [eval_expr(g, {"M": 7}) for g in L["grid"]] == [7, 1, 1]
    plan = rotary.Plan(head_size, neox)
    passes = -(-hq // plan.heads) + -(-hk // plan.heads)
    short = (hq % plan.heads != 0) + (hk % plan.heads != 0)
    halves = 2 if neox else 1
    assert _v4(art) == (passes * halves + (2 if neox else 0), passes * halves)
    assert art.ptx.count("ld.global.v2") == (0 if neox else 2)
    guarded = re.findall(r"if \(\(\(\(int\)threadIdx\.x\) [%&] \d+\) == \(\(int\)threadIdx\.x\)\)", art.cuda_source)
    assert len(guarded) == 2 * short * halves            # a short pass's loads and stores


def test_rmsnorm_softmax_any_multiple_of_8(ops):
    """Row lengths that are not multiples of 1024 (Gemma-2-2B 2304, gpt-oss 2880); one artifact
    per (n, dtype) serves every row count."""
    for n, dt in ((2880, torch.bfloat16), (2304, torch.float16)):
        w = torch.randn(n, dtype=dt)
        for m in ROW_COUNTS:
            x = torch.randn(m, n, dtype=dt) * 3
            close(torch.ops.axe.rmsnorm(x, w, 1e-5), rmsnorm_np(x, w, 1e-5), 1e-2)
        x3 = torch.randn(2, 3, n, dtype=dt)
        y = torch.ops.axe.rmsnorm(x3, w, 1e-6)
        assert y.shape == x3.shape and y.dtype == dt
        close(y, rmsnorm_np(x3, w, 1e-6), 1e-2)
    x = torch.randn(5, 2880, dtype=torch.bfloat16) * 4
    close(torch.ops.axe.softmax(x), softmax_np(x), 1e-2)
    assert sorted((s["n"], s["dtype"]) for s in _loaded(ops, "rmsnorm")) == [(2304, "float16"), (2880, "bfloat16")]
    assert ops.KERNELS["rmsnorm"].builds == 2


@pytest.mark.parametrize("n,dt", [(2880, torch.bfloat16), (3584, torch.float16)])
def test_fused_add_rmsnorm_in_place(ops, n, dt):
    """residual ← x + residual (rounded to the dtype), x ← rmsnorm(residual)·weight, both in the
    caller's tensors; returns None."""
    w = torch.randn(n, dtype=dt)
    for m in ROW_COUNTS:
        x, r = torch.randn(m, n, dtype=dt), torch.randn(m, n, dtype=dt) * 2
        x0, r0 = x.clone(), r.clone()
        assert torch.ops.axe.fused_add_rmsnorm(x, r, w, 1e-5) is None
        want_r = torch.from_numpy(_np(x0) + _np(r0)).to(dt)           # the sum rounded once
        assert torch.equal(r, want_r)
        close(x, rmsnorm_np(want_r, w, 1e-5), 1e-2)


def test_fused_add_rmsnorm_writes_back_into_views(ops):
    """A strided x and a misaligned residual run on contiguous copies; the results land in the
    caller's views (and nowhere else of their storage)."""
    n, dt = 4096, torch.float16
    w = torch.randn(n, dtype=dt)
    base_x = torch.randn(4, 2 * n, dtype=dt)
    x = base_x[:, :n]                                       # rows strided by 2n: not contiguous
    base_r = torch.randn(4 * n + 1, dtype=dt)
    r = base_r[1:].view(4, n)                               # 2 bytes off: not 16-byte aligned
    x0, r0, untouched = x.clone(), r.clone(), base_x[:, n:].clone()
    torch.ops.axe.fused_add_rmsnorm(x, r, w, 1e-6)
    want_r = torch.from_numpy(_np(x0) + _np(r0)).to(dt)
    assert torch.equal(r, want_r) and torch.equal(base_x[:, n:], untouched)
    close(x, rmsnorm_np(want_r, w, 1e-6), 1e-2)


@pytest.mark.parametrize("d,dt", [(2880, torch.bfloat16), (4096, torch.float16)])
def test_silu_and_mul(ops, d, dt):
    for shape in ((1, 2 * d), (7, 2 * d), (33, 2 * d), (2, 3, 2 * d)):
        x = torch.randn(shape, dtype=dt) * 3
        y = torch.ops.axe.silu_and_mul(x)
        assert y.shape == (*shape[:-1], d) and y.dtype == dt
        close(y, silu_mul_np(x), 1e-2)
    (spec,) = [s for s in _loaded(ops, "silu_and_mul") if s["d"] == d]
    assert spec == {"d": d, "dtype": str(dt)[6:]}


@pytest.mark.parametrize("head_size,hq,hk,neox,pdt,dt", [(128, 20, 4, True, torch.int64, torch.bfloat16),
                                                          (64, 3, 1, False, torch.int32, torch.float16)])
def test_rotary_embedding_in_place(ops, head_size, hq, hk, neox, pdt, dt):
    """vLLM's signature: query (tokens, heads·head_size) or (tokens, heads, head_size) and key
    rotated in place by cos_sin_cache[positions] (cos first half, sin second half)."""
    max_pos = 4096
    inv = 1.0 / (10000 ** (torch.arange(0, head_size, 2, dtype=torch.float64) / head_size))
    ang = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv[None, :]
    cache = torch.cat([ang.cos(), ang.sin()], dim=-1).to(dt)
    for m in ROW_COUNTS:
        pos = torch.randint(0, max_pos, (m,), dtype=pdt)
        q = torch.randn(m, hq * head_size, dtype=dt)
        k = torch.randn(m, hk, head_size, dtype=dt)
        q0, k0 = q.clone(), k.clone()
        assert torch.ops.axe.rotary_embedding(pos, q, k, head_size, cache, neox) is None
        close(q.view(m, hq, head_size), rotary_np(pos, q0.view(m, hq, head_size), cache, neox), 1e-2)
        close(k, rotary_np(pos, k0, cache, neox), 1e-2)
    key = "rotary_neox" if neox else "rotary_gptj"
    (spec,) = _loaded(ops, key)
    assert spec == {"head_size": head_size, "q_heads": hq, "kv_heads": hk, "is_neox": neox,
                    "dtype": str(dt)[6:], "pos_dtype": str(pdt)[6:]}


def test_rotary_embedding_key_none_and_strided_query(ops):
    """key=None (vLLM allows it): only the query turns; a query that is a strided slice of a
    fused qkv tensor is rotated through a copy written back into the slice."""
    hs, hq, hk, m = 128, 20, 4, 7
    cache = torch.randn(64, hs, dtype=torch.bfloat16)
    pos = torch.randint(0, 64, (m,))
    qkv = torch.randn(m, (hq + 2 * hk) * hs, dtype=torch.bfloat16)
    q, k = qkv[:, :hq * hs], qkv[:, hq * hs:(hq + hk) * hs]
    q0, k0, v0 = q.clone(), k.clone(), qkv[:, (hq + hk) * hs:].clone()
    torch.ops.axe.rotary_embedding(pos, q, k, hs, cache, True)
    close(q.view(m, hq, hs), rotary_np(pos, q0.view(m, hq, hs), cache, True), 1e-2)
    close(k.view(m, hk, hs), rotary_np(pos, k0.view(m, hk, hs), cache, True), 1e-2)
    assert torch.equal(qkv[:, (hq + hk) * hs:], v0)
    q2 = q0.clone()
    torch.ops.axe.rotary_embedding(pos, q2, None, hs, cache, True)
    close(q2.view(m, hq, hs), rotary_np(pos, q0.view(m, hq, hs), cache, True), 1e-2)
    q3 = q0.clone()
    torch.ops.axe.rotary_embedding(pos, q3, q3.new_empty(m, 0), hs, cache, True)    # an empty key: as None
    assert torch.equal(q3, q2)
    assert {s["kv_heads"] for s in _loaded(ops, "rotary_neox") if s["q_heads"] == hq and s["head_size"] == hs} >= {0, hk}


def test_ops_refuse_with_names(ops):
    f16, bf16 = torch.float16, torch.bfloat16
    x = torch.randn(2, 2880, dtype=f16)
    w = torch.randn(2880, dtype=f16)
    with pytest.raises(ValueError, match="last dimension of x is 2884; the axe kernel needs a positive multiple of 8"):
        torch.ops.axe.rmsnorm(torch.randn(2, 2884, dtype=f16), torch.randn(2884, dtype=f16))
    with pytest.raises(ValueError, match=r"fused_add_rmsnorm: residual has shape \(3, 2880\), x has \(2, 2880\)"):
        torch.ops.axe.fused_add_rmsnorm(x, torch.randn(3, 2880, dtype=f16), w)
    with pytest.raises(TypeError, match="fused_add_rmsnorm: residual has dtype torch.bfloat16, x has torch.float16"):
        torch.ops.axe.fused_add_rmsnorm(x, x.to(bf16), w)
    with pytest.raises(TypeError, match="fused_add_rmsnorm: weight has dtype torch.bfloat16"):
        torch.ops.axe.fused_add_rmsnorm(x, x.clone(), w.to(bf16))
    with pytest.raises(ValueError, match="fused_add_rmsnorm: residual is on meta, x on cpu"):
        torch.ops.axe.fused_add_rmsnorm(x, x.to("meta"), w)
    with pytest.raises(ValueError, match="x and residual are the same memory"):
        torch.ops.axe.fused_add_rmsnorm(x, x, w)
    with pytest.raises(ValueError, match="silu_and_mul: the last dimension of x is 100; .* multiple of 16"):
        torch.ops.axe.silu_and_mul(torch.randn(3, 100, dtype=f16))
    with pytest.raises(TypeError, match="silu_and_mul: x has dtype torch.float32"):
        torch.ops.axe.silu_and_mul(torch.randn(3, 128))
    pos, q, k = torch.arange(3), torch.randn(3, 256, dtype=bf16), torch.randn(3, 128, dtype=bf16)
    cache = torch.randn(16, 128, dtype=bf16)
    with pytest.raises(TypeError, match="rotary_embedding: positions has dtype torch.float32"):
        torch.ops.axe.rotary_embedding(pos.float(), q, k, 128, cache, True)
    with pytest.raises(ValueError, match=r"rotary_embedding: head_size=96; the axe kernel supports \(64, 128, 256\)"):
        torch.ops.axe.rotary_embedding(pos, q, k, 96, torch.randn(16, 96, dtype=bf16), True)
    with pytest.raises(ValueError, match=r"cos_sin_cache rows hold rot_dim=64 .* \(rot_dim == head_size=128\)"):
        torch.ops.axe.rotary_embedding(pos, q, k, 128, torch.randn(16, 64, dtype=bf16), True)
    with pytest.raises(TypeError, match="rotary_embedding: cos_sin_cache has dtype torch.float32, query has torch.bfloat16"):
        torch.ops.axe.rotary_embedding(pos, q, k, 128, cache.float(), True)
    with pytest.raises(TypeError, match="rotary_embedding: key has dtype torch.float16, query has torch.bfloat16"):
        torch.ops.axe.rotary_embedding(pos, q, k.half(), 128, cache, True)
    with pytest.raises(ValueError, match=r"rotary_embedding: key has shape \(3, 100\) .* not 3 tokens"):
        torch.ops.axe.rotary_embedding(pos, q, torch.randn(3, 100, dtype=bf16), 128, cache, True)
    with pytest.raises(ValueError, match="rotary_embedding: positions is on meta, query on cpu"):
        torch.ops.axe.rotary_embedding(pos.to("meta"), q, k, 128, cache, True)


def test_empty_inputs_launch_nothing(ops):
    before = {n: len(ops.KERNELS[n]._memo) for n in NAMES}
    x, r = torch.randn(0, 2880, dtype=torch.bfloat16), torch.randn(0, 2880, dtype=torch.bfloat16)
    torch.ops.axe.rotary_embedding(torch.arange(0), torch.randn(0, 256, dtype=torch.bfloat16), None, 128,
                                   torch.randn(4, 128, dtype=torch.bfloat16), True)
    assert torch.ops.axe.silu_and_mul(torch.randn(0, 5760, dtype=torch.bfloat16)).shape == (0, 2880)
    torch.ops.axe.fused_add_rmsnorm(x, r, torch.randn(2880, dtype=torch.bfloat16))
    assert before["rotary_neox"] == len(ops.KERNELS["rotary_neox"]._memo)      # no tokens: no kernel looked up


# --- fake tensors, opcheck, torch.compile -------------------------------------------------------

def test_fake_tensors_give_shapes_without_launching(ops):
    from torch._subclasses.fake_tensor import FakeTensorMode
    before = {n: len(k._memo) for n, k in ops.KERNELS.items()}
    with FakeTensorMode():
        x = torch.empty(9, 3, 5760, dtype=torch.bfloat16)
        assert torch.ops.axe.silu_and_mul(x).shape == (9, 3, 2880)
        xr, r = torch.empty(5, 2880, dtype=torch.bfloat16), torch.empty(5, 2880, dtype=torch.bfloat16)
        w = torch.empty(2880, dtype=torch.bfloat16)
        assert torch.ops.axe.fused_add_rmsnorm(xr, r, w) is None
        assert torch.ops.axe.rmsnorm(xr, w).shape == (5, 2880)
        q, k = torch.empty(5, 2560, dtype=torch.bfloat16), torch.empty(5, 512, dtype=torch.bfloat16)
        assert torch.ops.axe.rotary_embedding(torch.empty(5, dtype=torch.int64), q, k, 128,
                                              torch.empty(100, 128, dtype=torch.bfloat16), True) is None
        with pytest.raises(ValueError, match="multiple of 16"):
            torch.ops.axe.silu_and_mul(torch.empty(3, 100, dtype=torch.float16))
        with pytest.raises(ValueError, match="rot_dim == head_size"):
            torch.ops.axe.rotary_embedding(torch.empty(5, dtype=torch.int64), q, k, 128,
                                           torch.empty(100, 64, dtype=torch.bfloat16), True)
    assert {n: len(k._memo) for n, k in ops.KERNELS.items()} == before      # nothing built or launched


def _cache(max_pos, hs, dt):
    return torch.randn(max_pos, hs, dtype=dt)


def test_opcheck(ops):
    bf = torch.bfloat16
    x, r, w = torch.randn(5, 2880, dtype=bf), torch.randn(5, 2880, dtype=bf), torch.randn(2880, dtype=bf)
    pos = torch.randint(0, 64, (5,))
    q, k = torch.randn(5, 20 * 128, dtype=bf), torch.randn(5, 4 * 128, dtype=bf)
    cases = [(torch.ops.axe.fused_add_rmsnorm.default, (x, r, w, 1e-5)),
             (torch.ops.axe.silu_and_mul.default, (torch.randn(5, 5760, dtype=bf),)),
             (torch.ops.axe.rotary_embedding.default, (pos, q, k, 128, _cache(64, 128, bf), True)),
             (torch.ops.axe.rotary_embedding.default, (pos, q, None, 128, _cache(64, 128, bf), True)),
             (torch.ops.axe.rmsnorm.default, (x, w, 1e-6)),
             (torch.ops.axe.softmax.default, (x,))]
    for op, args in cases:
        torch.library.opcheck(op, args, test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))


def _decoder_piece(x, residual, w, positions, q, k, cache, gate_up):
    """The serving ops in a decoder layer's order, with torch ops between them."""
    torch.ops.axe.fused_add_rmsnorm(x, residual, w, 1e-5)
    torch.ops.axe.rotary_embedding(positions, q, k, 128, cache, True)
    h = torch.ops.axe.silu_and_mul(gate_up * 1)
    return x * 2, residual + 1, q * 1, k * 1, torch.ops.axe.rmsnorm(h, w, 1e-6)


def test_compile_fullgraph_with_mutating_ops(ops):
    bf = torch.bfloat16
    n = 2880
    w = torch.randn(n, dtype=bf)
    cache = _cache(256, 128, bf)

    def args(m):
        g = torch.Generator().manual_seed(m)
        return (torch.randn(m, n, dtype=bf, generator=g), torch.randn(m, n, dtype=bf, generator=g), w,
                torch.randint(0, 256, (m,), generator=g), torch.randn(m, 20 * 128, dtype=bf, generator=g),
                torch.randn(m, 4 * 128, dtype=bf, generator=g), cache, torch.randn(m, 2 * n, dtype=bf, generator=g))

    explained = torch._dynamo.explain(_decoder_piece)(*args(6))
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    compiled = torch.compile(_decoder_piece, fullgraph=True, backend="aot_eager", dynamic=True)
    for m in (6, 11, 1):
        a = args(m)
        eager_in = [t.clone() if isinstance(t, torch.Tensor) else t for t in a]
        want = _decoder_piece(*eager_in)
        got = compiled(*a)
        for gt, wt in zip(got, want):
            assert torch.equal(gt, wt)
        for i in (0, 1, 4, 5):                  # the mutated inputs, as eager left them
            assert torch.equal(a[i], eager_in[i])
