"""GPU cases for ``torch.ops.axe.fused_moe`` on real MoE shapes: build here, check on an H100/H200.

Every kernel the op may launch for each shape of :data:`SHAPES` (:func:`axe.torch.moe_ops.all_specs`)
is an artifact ``moeop_<shape>_<kernel>``; its check runs the op itself — its host side choosing the
configuration and sizing the buffers, its kernels loaded from the artifacts built together —
at every T of :data:`TOKENS` whose configuration launches that artifact, with softmax top-k
routing and a skewed one (every token's first choices among 4 experts: most experts get few
tokens or none, the hot ones many tiles), against :func:`axe.torch.moe_ops.reference` (torch,
fp32).  Tolerance: the op rounds the SiLU·up intermediate and each expert's output to bf16 (8
mantissa bits, 3.9e-3 per rounding) and accumulates in fp32, so ``‖out − ref‖ / ‖ref‖ < 2e-2``
(the bound ``tests/gpu/run_moe_fp8_ops.py`` uses) and no NaN.

The shapes: Mixtral-8x7B (E 8: an expert count the alignment pads to 32 lanes), gpt-oss-20b
(H = I = 2880: column blocks and k-blocks of 128 and 256 that divide neither, GEMM 1's k-blocks
fitted to 64), DeepSeek-V3's expert sizes with 64 experts (H 7168: four vectors per combine
thread), E 128 with H 2304 (the combine's 144 threads) and Qwen3-30B-A3B's tuned shape.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: name -> (E, H, I, top_k)
SHAPES = {"mixtral": (8, 4096, 14336, 2), "gptoss": (32, 2880, 2880, 4), "dsv3e64": (64, 7168, 2048, 8),
          "e128h2304": (128, 2304, 768, 8), "qwen3": (128, 2048, 768, 8)}
TOKENS = (1, 7, 300, 2048)
TOL = 2e-2
DTYPE = "bfloat16"
DEVICE = "cuda"     # (the CPU test of these cases runs them on stand-ins: tests/test_moe_shapes.py)


def _ops():
    """``axe.torch.moe_ops`` (no TVM: it loads on the GPU machine)."""
    sys.path.insert(0, ROOT)
    from axe.torch import moe_ops
    return moe_ops


def _label(name, spec):
    """An artifact's name within its shape, from its spec (the same in the build and the run)."""
    if name == "gemm":
        return (f"gemm{2 - bool(spec.get('act'))}_bm{spec['bm']}_bn{spec['bn']}_bk{spec.get('bk', 64)}"
                + ("_gather" if spec.get("gather_rows") else ""))
    return name if name == "combine" else f"{name}_bm{spec['bm']}"


def _artifacts():
    """``{artifact name: (shape name, name in KERNELS, spec)}``."""
    ops = _ops()
    return {f"moeop_{shape}_{_label(name, spec)}": (shape, name, spec) for shape, dims in SHAPES.items()
            for name, spec in ops.all_specs(*dims, DTYPE)}


def _builder(name, spec):
    def build():
        import importlib

        import axe.lang as Ax
        module, fn = _ops().KERNELS[name].kernel.split(":")
        return Ax.compile_kernel(getattr(importlib.import_module(module), fn)(**spec), "sm_90a")
    return build


def _builds():
    try:
        import tvm  # noqa: F401
    except ImportError:     # the GPU machine has no TVM: run_all needs only the names (CHECKS)
        return {}
    return {art: _builder(name, spec) for art, (_, name, spec) in _artifacts().items()}


BUILDS = _builds()

_CHECKED = {}       # (shape, T) -> its summary, or the exception its check raised


def _tokens_of(art):
    """The T of :data:`TOKENS` whose configuration launches artifact ``art``."""
    ops = _ops()
    shape, name, spec = _artifacts()[art]
    E, H, I, k = SHAPES[shape]
    return [T for T in TOKENS if (name, spec) in ops.specs(ops.config(T, I), E, H, I, k, DTYPE).values()]


def _loading_from(folder, shape):
    """The op's kernels loaded from this shape's artifacts in ``folder`` (instead of its cache)."""
    from axe import runtime as rt
    by_spec = {(name, repr(spec)): art for art, (s, name, spec) in _artifacts().items() if s == shape}
    loaded = {}

    def load(name):
        def get(device, spec):
            art = by_spec[(name, repr(spec))]
            if art not in loaded:
                loaded[art] = rt.load(os.path.join(folder, art))
            return loaded[art]
        return get
    return load


_WEIGHTS = {}       # the last shape's (w1, w2): run_all checks a shape's artifacts one after another


def _weights(torch, shape):
    """``(w1, w2)`` of ``shape``, normal with variance 1/fan-in, bf16 (seeded)."""
    if shape not in _WEIGHTS:
        _WEIGHTS.clear()
        E, H, I, _ = SHAPES[shape]
        g = torch.Generator(device=DEVICE).manual_seed(0)
        _WEIGHTS[shape] = ((torch.randn(E, 2 * I, H, device=DEVICE, generator=g) / H ** 0.5).bfloat16(),
                           (torch.randn(E, H, I, device=DEVICE, generator=g) / I ** 0.5).bfloat16())
    return _WEIGHTS[shape]


def _run(torch, folder, shape, T):
    """The op at T tokens, softmax and skewed routing, against the fp32 reference."""
    ops = _ops()
    E, H, I, k = SHAPES[shape]
    w1, w2 = _weights(torch, shape)
    g = torch.Generator(device=DEVICE).manual_seed(T)
    load, saved = _loading_from(folder, shape), {n: jk.load for n, jk in ops.KERNELS.items()}
    done = []
    from kernels.moe_host import route_reference
    try:
        for n, jk in ops.KERNELS.items():
            jk.load = load(n)
        for routing, hot in (("softmax", 0.0), ("skewed", 10.0)):
            x = torch.randn(T, H, device=DEVICE, generator=g).bfloat16()
            logits = torch.randn(T, E, device=DEVICE, generator=g)
            logits[:, :4] += hot
            ids, w = route_reference(logits, k)
            out = torch.ops.axe.fused_moe(x, w1, w2, w, ids)
            ref = ops.reference(x, w1, w2, w, ids)
            err = float((out.float() - ref).norm() / ref.norm())
            assert not out.isnan().any() and err < TOL, \
                f"fused_moe {shape} T={T} {routing} ({ops.config(T, I)}): rel. error {err:.2e} >= {TOL}"
            done.append(f"{routing} {err:.1e}")
    finally:
        for n, jk in ops.KERNELS.items():
            jk.load = saved[n]
    return f"T={T} ({ops.config(T, I)}): " + ", ".join(done)


def check_op(kernel, torch):
    """The op on this artifact's shape at every T that launches it (each (shape, T) run once per
    process, its outcome reported for every artifact it launches)."""
    import axe.torch.moe_ops  # noqa: F401 - registers the op
    art = os.path.basename(os.path.abspath(kernel.artifact.path))
    folder = os.path.dirname(os.path.abspath(kernel.artifact.path))
    shape = _artifacts()[art][0]
    done = []
    for T in _tokens_of(art):
        if (shape, T) not in _CHECKED:
            try:
                _CHECKED[shape, T] = _run(torch, folder, shape, T)
            except Exception as e:      # noqa: BLE001 - kept, and raised for every artifact it launches
                _CHECKED[shape, T] = e
        if isinstance(_CHECKED[shape, T], Exception):
            raise _CHECKED[shape, T]
        done.append(_CHECKED[shape, T])
    return f"{shape} {SHAPES[shape]}: " + "; ".join(done)


CHECKS = {art: check_op for art in _artifacts()}
